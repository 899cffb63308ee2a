"""Hugging Face transformers -> vspec: BERT, RoBERTa (SpanBERT is BERT), ELECTRA, GPT-2 and OpenAI GPT, the base
models and their `...ForSequenceClassification`; the published pretraining checkpoints (`...ForMaskedLM`,
`...ForPreTraining`, `...LMHeadModel`) convert to their base model, the pretraining head left out with a one-line
ConversionNote (a warning) naming it. Another task model (token classification, question answering, ...) is refused
by its task.

`spec_from_hf(config)` reads a config (a `transformers` config object, its dict, or a config.json's: through the
model type's config class where transformers is installed, so that Hugging Face's defaults fill what the file
leaves out); `from_hf`
loads weights (a model, a state dict, or a folder that `save_pretrained` wrote: config.json + safetensors),
strictly: every key is mapped or the ConversionError lists what is left. `transformers` is imported only to
read a config dict.

Layout facts (transformers 4.x / 5.x key names): BERT-like `embeddings.{word,position,token_type}_embeddings`,
`embeddings.LayerNorm`, ELECTRA's `embeddings_project`, `encoder.layer.i.attention.self.{query,key,value}` (fused
into vspec's qkv), `attention.output.{dense,LayerNorm}`, `intermediate.dense`, `output.{dense,LayerNorm}`,
`pooler.dense`, classifiers `classifier` (BERT) or `classifier.{dense,out_proj}` (RoBERTa, ELECTRA); GPT-2 `wte`,
`wpe`, `h.i.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}`, `ln_f`, `score`, its Conv1D weights
stored (in, out), the transpose of nn.Linear's; OpenAI GPT `tokens_embed`, `positions_embed`, the same blocks
post-norm and no final norm.

Core, as the text body it builds is (`vspec/spec/text.py`): SoT's language head converter extends it.
"""

import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from .. import spec as specs
from ..compiler import build
from .common import ConversionError, ConversionNote, load_mapped, refuse, renamer

__all__ = ["MAX_CONFIG", "QKV", "RULES", "base_key", "from_hf", "hf_key", "hf_state", "is_conv1d", "load_hf_body",
           "qkv_part", "read_config", "spec_from_hf"]

_FAMILIES = ("bert", "roberta", "electra", "gpt2", "openai-gpt")
_PREFIXES = ("bert.", "roberta.", "electra.", "transformer.")  # the task models' name for the base model
BASE, CLASSIFIER = ("Model",), ("ForSequenceClassification",)
_PRETRAINING = ("ForMaskedLM", "ForPreTraining", "LMHeadModel")  # published checkpoints: the body is used
# the pretraining heads' keys (BERT's cls, RoBERTa's and GPT's lm_head, ELECTRA's discriminator / generator heads)
_PRETRAINING_HEADS = ("cls.", "lm_head.", "discriminator_predictions.", "generator_predictions.", "generator_lm_head.")
_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu", "silu": "silu",
         "swish": "silu"}
MAX_CONFIG = 16 * 2**20  # bytes of a config.json read at most (one is kilobytes)
_SEQ_LEN = 128  # the length a converted spec's shapes assume (the papers fine-tune at 128; any length runs)


class _Fields(dict):
    """A config's fields; one that is missing is a one-line ConversionError naming it (not a KeyError)."""

    def __missing__(self, key: str):
        raise ConversionError(f"{self.get('model_type')} config: no {key!r} field (and no default for it: install "
                              "transformers to fill Hugging Face's defaults)")


def read_config(path: str | Path) -> dict[str, Any]:
    """A config.json file as a dict, or a one-line ConversionError naming the file (not UTF-8 JSON, not a table).

    Args:
        path: the config.json file.
    """
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_CONFIG + 1).decode("utf-8"))
    except OSError as e:
        raise ConversionError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, nested too deep
        raise ConversionError(f"{path}: not a JSON config ({type(e).__name__}: {str(e).splitlines()[0][:120]})") \
            from None
    if not isinstance(data, dict):
        raise ConversionError(f"{path}: not a JSON table of config fields (a {type(data).__name__})")
    return data


def _config(config: Any) -> dict[str, Any]:
    """The config's fields as a dict: a config object's own `to_dict`; a dict (a config.json's) through its model
    type's config class where transformers is installed, so that the fields an old file leaves out take Hugging
    Face's defaults (SpanBERT's has no layer_norm_eps or pad_token_id), as `from_pretrained` gives them."""
    data = config.to_dict() if hasattr(config, "to_dict") else config
    if not isinstance(data, Mapping):
        raise ConversionError(f"a Hugging Face config object or dict, got {type(config).__name__}")
    family = data.get("model_type")
    if family not in _FAMILIES:
        raise ConversionError(f"model_type {family!r}: vspec converts {', '.join(_FAMILIES)}")
    if hasattr(config, "to_dict"):
        return dict(data)
    try:
        from transformers import AutoConfig  # extra
    except ImportError:  # the fields the file has; a missing one is named by spec_from_hf
        return dict(data)
    try:
        full = AutoConfig.for_model(family, **{k: v for k, v in data.items() if k != "model_type"}).to_dict()
    except Exception as e:  # noqa: BLE001 - transformers' validation of a field's value: one line
        raise ConversionError(f"{family} config: {type(e).__name__}: {' '.join(str(e).split())[:160]}") from None
    return {**full, **data}


def _check_task(architecture: str | None) -> None:
    """Refuse a task model vspec has no head for, by its task (a Hugging Face class name such as
    `BertForTokenClassification`; None: unknown, accepted)."""
    if architecture is None or architecture.endswith(CLASSIFIER + _PRETRAINING) or (
            architecture.endswith(BASE) and "For" not in architecture and "DoubleHeads" not in architecture):
        return
    task = architecture.split("For", 1)[1] if "For" in architecture else architecture.removesuffix("Model")
    raise ConversionError(f"{architecture}: the task {task!r} is not supported; vspec converts the base model, "
                          f"...ForSequenceClassification, and the pretraining checkpoints' bodies "
                          f"({', '.join('...' + t for t in _PRETRAINING)})")


def _architecture(config: Any) -> str | None:
    data = config.to_dict() if hasattr(config, "to_dict") else config
    names = data.get("architectures") if isinstance(data, Mapping) else None
    return names[0] if names and isinstance(names[0], str) else None


def _num_labels(c: Mapping[str, Any]) -> int:
    if c.get("num_labels") is not None:
        return int(c["num_labels"])
    return len(c["id2label"]) if c.get("id2label") else 2


def _only(c: Mapping[str, Any], plain: dict[str, Any]) -> None:
    """Refuse a config that sets any of `plain`'s fields to another value."""
    refuse(c["model_type"], [(c.get(key, value) != value, f"{key} = {c.get(key)!r} is not supported (only {value!r})")
                             for key, value in plain.items()])


def _act(c: Mapping[str, Any], key: str) -> str:
    act = c.get(key)
    if c["model_type"] == "openai-gpt" and act == "gelu":
        return "gelu_tanh"  # modeling_openai's ACT_FNS maps "gelu" to gelu_new
    if act not in _ACTS:
        raise ConversionError(f"{c['model_type']} config: {key} = {act!r} is not supported ({', '.join(_ACTS)})")
    return _ACTS[act]


def spec_from_hf(config: Any, *, classifier: bool | None = None, pooler: bool | None = None) -> specs.Model:
    """The vspec spec of a Hugging Face BERT / RoBERTa / ELECTRA / GPT-2 / OpenAI GPT config.

    classifier: the `...ForSequenceClassification` model (num_classes = num_labels) or the base model
    (num_classes 0: the head returns BERT's pooler output, the first token or the last real token); None: read
    from the config's `architectures`. pooler: whether a BERT / RoBERTa base model has its pooler (their
    default, `add_pooling_layer=True`); None: the default.

    Args:
        config: a transformers config, or its dict (config.json's).
        classifier: as above; None: read from `architectures`.
        pooler: as above; None: the model's default.
    """
    c = _Fields(_config(config))
    family = c["model_type"]
    _check_task(_architecture(c))
    if classifier is None:
        classifier = any(a.endswith("ForSequenceClassification") for a in c.get("architectures") or ())
    num_classes = _num_labels(c) if classifier else 0
    if family in ("gpt2", "openai-gpt"):
        _only(c, {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False})
        d, drop, eps = c["n_embd"], c["resid_pdrop"], c["layer_norm_epsilon"]
        gpt2 = family == "gpt2"
        embedder = specs.TokenEmbed(vocab_size=c["vocab_size"], max_positions=c["n_positions"],
                                    seq_len=min(_SEQ_LEN, c["n_positions"]), type_vocab_size=0, padding_id=None,
                                    norm=None, drop=c["embd_pdrop"])
        ffn = specs.MLP(hidden=(c.get("n_inner") if gpt2 else None) or 4 * d,  # OpenAI GPT: 4 d always
                        act=_act(c, "activation_function" if gpt2 else "afn"),
                        drop=drop, hidden_drop=0.0)
        kind = specs.Block if gpt2 else specs.PostNormBlock
        block = kind(attention=specs.MHSA(heads=c["n_head"], attn_drop=c["attn_pdrop"], proj_drop=drop), ffn=ffn,
                     norm=specs.Norm(eps=eps))
        head = specs.LastTokenHead(pad_id=c.get("pad_token_id"))  # HF's rule: the last token that is not padding
        return specs.Model(embedder=embedder, block=block, depth=c["n_layer"], dim=d, num_classes=num_classes,
                           class_token=False, pos_embed="none", final_norm=gpt2, head=head, causal=True)
    _only(c, {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False})
    d, drop, eps = c["hidden_size"], c["hidden_dropout_prob"], c["layer_norm_eps"]
    width = c.get("embedding_size", d)
    roberta = family == "roberta"
    first = c["pad_token_id"] + 1 if roberta else 0
    embedder = specs.TokenEmbed(vocab_size=c["vocab_size"], max_positions=c["max_position_embeddings"],
                                seq_len=min(_SEQ_LEN, c["max_position_embeddings"] - first),
                                type_vocab_size=c["type_vocab_size"], padding_id=c["pad_token_id"],
                                pad_positions=roberta, norm=specs.Norm(eps=eps), drop=drop,
                                width=width if width != d else None)
    block = specs.PostNormBlock(attention=specs.MHSA(heads=c["num_attention_heads"],
                                                     attn_drop=c["attention_probs_dropout_prob"], proj_drop=drop),
                            ffn=specs.MLP(hidden=c["intermediate_size"], act=_act(c, "hidden_act"), drop=drop,
                                          hidden_drop=0.0),
                            norm=specs.Norm(eps=eps))
    head_drop = c.get("classifier_dropout")
    head_drop = drop if head_drop is None else head_drop
    if classifier:  # BERT: pooler, dropout, classifier; RoBERTa / ELECTRA: dropout, dense, act, dropout, out_proj
        head = (specs.FirstTokenHead(pooler="tanh", drop=head_drop) if family == "bert" else
                specs.FirstTokenHead(pooler="tanh" if roberta else "gelu", drop_in=head_drop, drop=head_drop))
    else:
        has_pooler = family != "electra" if pooler is None else pooler
        head = specs.FirstTokenHead(pooler="tanh" if has_pooler else None)
    return specs.Model(embedder=embedder, block=block, depth=c["num_hidden_layers"], dim=d, num_classes=num_classes,
                       class_token=False, pos_embed="none", final_norm=False, head=head)


RULES = [
    (r"^embeddings\.word_embeddings\.", "embedder.word."),
    (r"^embeddings\.position_embeddings\.", "embedder.position."),
    (r"^embeddings\.token_type_embeddings\.", "embedder.token_type."),
    (r"^embeddings\.LayerNorm\.", "embedder.norm."),
    (r"^embeddings_project\.", "embedder.proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.qkv\.", r"stages.0.blocks.\1.attn.qkv."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"stages.0.blocks.\1.attn.proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"stages.0.blocks.\1.norm1."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"stages.0.blocks.\1.ffn.fc1."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"stages.0.blocks.\1.ffn.fc2."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"stages.0.blocks.\1.norm2."),
    (r"^pooler\.dense\.", "head.pooler."),
    (r"^classifier\.dense\.", "head.pooler."),
    (r"^classifier\.out_proj\.", "head.fc."),
    (r"^classifier\.", "head.fc."),
    (r"^(?:wte|tokens_embed)\.", "embedder.word."),
    (r"^(?:wpe|positions_embed)\.", "embedder.position."),
    (r"^h\.(\d+)\.ln_1\.", r"stages.0.blocks.\1.norm1."),
    (r"^h\.(\d+)\.ln_2\.", r"stages.0.blocks.\1.norm2."),
    (r"^h\.(\d+)\.attn\.c_attn\.", r"stages.0.blocks.\1.attn.qkv."),
    (r"^h\.(\d+)\.attn\.c_proj\.", r"stages.0.blocks.\1.attn.proj."),
    (r"^h\.(\d+)\.mlp\.c_fc\.", r"stages.0.blocks.\1.ffn.fc1."),
    (r"^h\.(\d+)\.mlp\.c_proj\.", r"stages.0.blocks.\1.ffn.fc2."),
    (r"^ln_f\.", "norm."),
    (r"^score\.", "head.fc."),
]
_rename = renamer(RULES)
_BUFFERS = ("position_ids", "token_type_ids", ".attn.bias", ".attn.masked_bias")  # HF's constant buffers


def hf_key(key: str) -> str | None:
    """The vspec name of a (prefix-stripped, q / k / v fused) Hugging Face key; None for HF's constant buffers
    and the pretraining heads.

    Args:
        key: the Hugging Face key.
    """
    if key.endswith(_BUFFERS) or key.startswith(_PRETRAINING_HEADS):
        return None
    return _rename(key)


_QKV_KEY = re.compile(r"(.*\.attention\.self\.)(query|key|value)\.(weight|bias)")
QKV = ("query", "key", "value")  # BERT-like q / k / v: the thirds of vspec's fused qkv, in this order


def base_key(key: str) -> str:
    """A task model's key without its base model's prefix (`bert.`, `roberta.`, `electra.`, `transformer.`).

    Args:
        key: the Hugging Face key.
    """
    prefix = next((p for p in _PREFIXES if key.startswith(p)), "")
    return key[len(prefix):]


def qkv_part(key: str) -> tuple[str, int] | None:
    """(the fused qkv key, which third) of a BERT-like q / k / v key: `...attention.self.key.bias` ->
    (`...attention.self.qkv.bias`, 1); None for another key.

    Args:
        key: the Hugging Face key (without the base model's prefix).
    """
    match = _QKV_KEY.fullmatch(key)
    return (f"{match[1]}qkv.{match[3]}", QKV.index(match[2])) if match else None


def is_conv1d(key: str) -> bool:
    """GPT's Conv1D weights (a base model's key), stored (in, out): the transpose of nn.Linear's.

    Args:
        key: the Hugging Face key (without the base model's prefix).
    """
    return key.startswith("h.") and key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))


def hf_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF's keys without the task model's prefix, q / k / v fused into one qkv, GPT's Conv1D weights as Linear's.

    Args:
        state: a Hugging Face state dict.
    """
    out = {}
    for key, value in state.items():
        key = base_key(key)
        if ".LayerNorm." in key and key.endswith((".gamma", ".beta")):  # the TF-era names of BERT's first files
            key = key.rsplit(".", 1)[0] + (".weight" if key.endswith(".gamma") else ".bias")
        out[key] = value
    thirds: dict[str, dict[int, str]] = {}
    for key in out:
        if part := qkv_part(key):
            thirds.setdefault(part[0], {})[part[1]] = key
    for fused, keys in thirds.items():
        if len(keys) == len(QKV):
            out[fused] = torch.cat([out.pop(keys[i]) for i in range(len(QKV))])
    for key, value in out.items():
        if is_conv1d(key) and value.ndim == 2:
            out[key] = value.t().contiguous()
    return out


def _read_folder(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A save_pretrained folder: config.json and model.safetensors (or pytorch_model.bin)."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConversionError(f"{folder}: no config.json (a folder that save_pretrained wrote)")
    config = read_config(config_file)
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        state = {k: v for shard in shards for k, v in load_file(shard).items()}
    elif (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise ConversionError(f"{folder}: no *.safetensors or pytorch_model.bin weights")
    return state, config


def from_hf(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor] | str | Path,
            spec: specs.Model | None = None, *, config: Any = None) -> nn.Module:
    """Build the vspec model of a Hugging Face BERT / RoBERTa / ELECTRA / GPT-2 / OpenAI GPT model (its base model,
    `...ForSequenceClassification`, or a pretraining checkpoint's body) and load its weights. Takes the model, its
    state dict (with `spec`, or with its `config`), or the path of a folder that `save_pretrained` wrote (no
    download). `spec` defaults to `spec_from_hf` of the model's config, with the head its weights show
    (classifier, pooler or neither). Another task model is refused by its task (`_check_task`). The model comes back
    in eval mode, as Hugging Face's `from_pretrained` gives one (dropout off; `.train()` to fine-tune).

    Args:
        model_or_state_dict: a transformers model, its state dict, or a folder `save_pretrained` wrote.
        spec: the vspec spec of a state dict; None: `spec_from_hf` of the config.
        config: the transformers config (or its dict) of a state dict, when `spec` is None.
    """
    if isinstance(model_or_state_dict, nn.Module):  # its class is its task (a config's architectures may be stale)
        task = type(model_or_state_dict).__name__
        state, config = model_or_state_dict.state_dict(), model_or_state_dict.config
    else:
        if isinstance(model_or_state_dict, (str, Path)):
            state, config = _read_folder(Path(model_or_state_dict))
        else:
            state = model_or_state_dict
        task = _architecture(config) if config is not None else None
    _check_task(task)
    if spec is None:
        if config is None:
            raise ConversionError("a state dict without its config: pass spec= (e.g. spec_from_hf(config))")
        classifier = any(k.startswith(("classifier.", "score.")) for k in state)
        config = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        config.pop("architectures", None)  # the task was checked above, by the class where there is one
        spec = spec_from_hf(config, classifier=classifier, pooler=any(".pooler." in f".{k}" for k in state))
    state = hf_state(state)
    if dropped := sorted({k.split(".")[0] for k in state if k.startswith(_PRETRAINING_HEADS)}):
        warnings.warn(ConversionNote(f"{task or 'the checkpoint'}: its pretraining head ({', '.join(dropped)}: the "
                                     "LM / MLM head) is dropped; the body is converted"), stacklevel=2)
    return load_mapped(build(spec), state, hf_key).eval()


def load_hf_body(model: nn.Module, folder: str | Path) -> list[str]:
    """Fine-tuning's start: a Hugging Face checkpoint folder's body (embeddings and blocks) loaded into `model`, a
    text body of the same layout whose head (SoT's, say) starts fresh. Strict for the body: every one of the
    model's non-head weights is filled, with its shape, or a ConversionError lists what is missing; the
    checkpoint's own head (pooler, classifier, score) is left out. Returns notes on what was left out.

    Args:
        model: the vspec text model, filled in place.
        folder: a Hugging Face checkpoint folder (*.safetensors or pytorch_model.bin).
    """
    state = hf_state(_read_folder(Path(folder))[0])
    try:
        load_mapped(model, state, hf_key, skip="head.")
    except ConversionError as e:
        raise ConversionError(f"{folder}: {e}") from None
    left = sorted(k for k in state if (hf_key(k) or "").startswith("head."))
    return [f"the checkpoint's head ({', '.join(left)}) is not used: the spec's head starts fresh"] if left else []
