"""vspec -> Hugging Face transformers: `to_hf` writes a text model whose body transformers has (BERT, SpanBERT,
RoBERTa, ELECTRA, OpenAI GPT, GPT-2), as the base model (num_classes 0) or `...ForSequenceClassification`, into a
folder that transformers reads without vspec: config.json of HF's own model type and model.safetensors with HF's key
names.

It inverts `vspec.convert.hf` by that module's rules rather than a second table: the config written (`_hf_config`)
is read back by `spec_from_hf`, whose spec must be the model's (`canonical`: one model spelt one way; the embedder's
`seq_len`, which HF does not store, aside), else the first part that differs is refused by name before anything is
written; the weights take the names of HF's own model built from that config (on the meta device), each renamed by
`hf_key` to the vspec weight it holds (q / k / v: thirds of the fused qkv, `qkv_part`; GPT's Conv1D weights
transposed, `is_conv1d`); HF's constant buffers are HF's own. `transformers` is imported when `to_hf` runs.
"""

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from safetensors.torch import save_file

from .. import spec as specs
from ..extras import needs
from ..spec import SpecError
from .common import ConversionError, ConversionNote, canonical, exported_state, refuse_difference, spec_and_state
from .hf import _ACTS, QKV, _act, base_key, hf_key, is_conv1d, qkv_part, spec_from_hf

__all__ = ["WEIGHTS", "hf_weights", "to_hf"]

_LIBRARY = "Hugging Face"
WEIGHTS = "model.safetensors"  # save_pretrained's name, the one from_pretrained looks for first
_GPT = ("gpt2", "openai-gpt")
_ACT_FIELD = {"gpt2": "activation_function", "openai-gpt": "afn"}  # the others': hidden_act


def _family(spec: specs.Model) -> str:
    """The model type a text spec is written as: causal with pre-norm blocks GPT-2, else OpenAI GPT; RoBERTa's
    positions RoBERTa; an embedding width of its own, a GELU pooler or a base model without pooler ELECTRA; else
    BERT. What the type cannot express is found by `spec_from_hf`'s reading of the config."""
    if not spec.embedder.text:
        raise ConversionError(f"embedder: {spec.embedder.kind} (an image model) has no {_LIBRARY} text model "
                              "equivalent; vspec.convert.to_timm writes ViT, DeiT and Swin")
    if spec.causal:
        return "gpt2" if spec.blocks[0].kind == "pre_norm" else "openai-gpt"
    if getattr(spec.embedder, "pad_positions", False):
        return "roberta"
    pooler = getattr(spec.head, "pooler", "tanh")
    if getattr(spec.embedder, "width", None) or pooler == "gelu" or (spec.num_classes == 0 and pooler is None):
        return "electra"
    return "bert"


def _hf_act(family: str, act: str) -> str:
    """The config's name of an activation: the first of `_ACTS` that `_act` (the reader's rule) reads as `act`; `act`
    itself where none is (OpenAI GPT has no exact GELU: the reader then names the difference)."""
    key = _ACT_FIELD.get(family, "hidden_act")
    return next((name for name in _ACTS if _act({"model_type": family, key: name}, key) == act), act)


def _hf_config(spec: specs.Model, labels: Sequence[str] | None = None) -> Any:
    """The transformers config of a text spec's model (its model type's config class); `labels` the class names
    (id2label; HF's LABEL_i where None). Not checked here: `to_hf` reads it back with `spec_from_hf`."""
    with needs("vspec.convert.to_hf"):
        from transformers import AutoConfig  # extra
    family = _family(spec)
    e, b, head, dim = spec.embedder, spec.blocks[0], spec.head, spec.dim
    a, f = b.attention, b.ffn
    drop, attn_drop = getattr(a, "proj_drop", 0.0), getattr(a, "attn_drop", 0.0)
    hidden = f.hidden_dim(dim) if isinstance(f, specs.MLP) else 4 * dim
    act = _hf_act(family, getattr(f, "act", "gelu"))
    if family in _GPT:
        fields = dict(vocab_size=e.vocab_size, n_positions=e.max_positions, n_embd=dim, n_layer=spec.depth,
                      n_head=getattr(a, "heads", 1), resid_pdrop=drop, embd_pdrop=e.drop, attn_pdrop=attn_drop,
                      layer_norm_epsilon=b.norm.eps, pad_token_id=head.pad_id,
                      **{_ACT_FIELD[family]: act}, **({"n_inner": hidden} if family == "gpt2" else {}))
    else:
        head_drop = getattr(head, "drop", drop)
        fields = dict(vocab_size=e.vocab_size, max_position_embeddings=e.max_positions,
                      type_vocab_size=e.type_vocab_size, pad_token_id=e.padding_id, hidden_size=dim,
                      num_hidden_layers=spec.depth, num_attention_heads=getattr(a, "heads", 1),
                      intermediate_size=hidden, hidden_act=act, hidden_dropout_prob=drop,
                      attention_probs_dropout_prob=attn_drop, layer_norm_eps=b.norm.eps,
                      classifier_dropout=None if head_drop == drop else head_drop,
                      **({"embedding_size": e.width or dim} if family == "electra" else {}))
    if labels is not None:
        if not spec.num_classes:
            raise ConversionError("labels: the base model (num_classes 0) has no classes to name")
        if (isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence) or len(labels) != spec.num_classes
                or not all(isinstance(label, str) for label in labels)):
            raise ConversionError(f"labels: {spec.num_classes} class names (str), one per class, got "
                                  f"{type(labels).__name__} {str(labels)[:80]}")
        fields.update(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    elif spec.num_classes:
        fields["num_labels"] = spec.num_classes
    try:
        config = AutoConfig.for_model(family, **fields)
    except Exception as e:  # noqa: BLE001 - transformers' validation of a field's value: one line
        raise ConversionError(f"{family} config: {type(e).__name__}: {' '.join(str(e).split())[:160]}") from None
    for name in ("bos_token_id", "eos_token_id"):  # GPT-2's 50256 is no token of a smaller vocabulary
        if isinstance(getattr(config, name, None), int) and getattr(config, name) >= e.vocab_size:
            setattr(config, name, None)
    return config


def _source(key: str) -> tuple[str, Callable[[torch.Tensor], torch.Tensor]] | None:
    """The vspec weight an HF key holds, and what of it: `hf_key`'s rename of the key as `hf_state` makes it."""
    base = base_key(key)
    part = qkv_part(base)
    name = hf_key(part[0] if part else base)
    if name is None:
        return None
    if part:
        return name, lambda t: t.chunk(len(QKV))[part[1]]
    return name, (lambda t: t.t() if t.ndim == 2 else t) if is_conv1d(base) else (lambda t: t)


def hf_weights(model: Any, labels: Sequence[str] | None = None) -> tuple[Any, dict[str, torch.Tensor]]:
    """What `to_hf` writes, checked, in memory: the transformers config (`architectures` set) and the state dict
    with HF's names (tensors on the meta device stay there: a full-size model's check costs nothing).

    Args:
        model: a vspec text model, or a (spec, state_dict) pair.
        labels: the class names (config.id2label); None: transformers' LABEL_0, ...
    """
    spec, state, _ = spec_and_state(model)
    config = _hf_config(spec, labels)
    theirs = spec_from_hf(config, classifier=spec.num_classes > 0)
    try:  # the length shapes assume: HF's models store none
        theirs = attrs.evolve(theirs, embedder=attrs.evolve(theirs.embedder, seq_len=spec.embedder.seq_len))
    except SpecError:
        pass
    refuse_difference(_LIBRARY, canonical(spec), canonical(theirs), config.model_type)
    import transformers  # extra: _hf_config imported it already

    auto = transformers.AutoModelForSequenceClassification if spec.num_classes else transformers.AutoModel
    with torch.device("meta"):
        hf = auto.from_config(config)
    config.architectures = [type(hf).__name__]
    weights = exported_state(hf.state_dict(), state, _source, f"{_LIBRARY}'s {type(hf).__name__}")
    config.dtype = next((v.dtype for v in weights.values() if v.is_floating_point()), torch.float32)
    return config, weights


def to_hf(model: Any, folder: str | Path, *, labels: Sequence[str] | None = None) -> Path:
    """Write a vspec text model (or a (spec, state_dict) pair) whose body transformers has, BERT, SpanBERT, RoBERTa,
    ELECTRA, OpenAI GPT or GPT-2, into `folder` as transformers' own: config.json (its model type, `architectures`
    `...ForSequenceClassification`, or the base model `...Model` for num_classes 0) and model.safetensors.
    `AutoModelForSequenceClassification` / `AutoModel.from_pretrained(folder)` read it without vspec: no missing or
    unexpected keys, the same outputs. `labels`: the class names (config.id2label).

    A spec transformers cannot express (SoT's head, Refiner's attention, a field value HF's model lacks) is
    refused in one line naming the part, before anything is written. A GPT classifier whose `head.pad_id` is None
    (the mask's last real token) is written with pad_token_id None, as GPT-2's own config: HF then reads each
    row's last position and refuses batches of more than one (a ConversionNote says so). Returns the folder.

    Args:
        model: a vspec text model, or a (spec, state_dict) pair.
        folder: where config.json and model.safetensors go (made if missing).
        labels: the class names; None: transformers' default names.
    """
    config, weights = hf_weights(model, labels)
    if any(v.is_meta for v in weights.values()):
        raise ConversionError("the model's weights are on the meta device (no data): build it on a real one")
    if config.model_type in _GPT and config.architectures[0].endswith("Classification") and config.pad_token_id is None:
        warnings.warn(ConversionNote(f"head.pad_id None (the last token the attention mask keeps) is written as "
                                     f"pad_token_id None: {config.architectures[0]} then reads each row's last "
                                     "position and refuses batches of more than one; set head.pad_id for padded "
                                     "batches"), stacklevel=2)
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(folder)
        save_file(weights, folder / WEIGHTS, metadata={"format": "pt"})
    except OSError as e:
        raise ConversionError(f"{folder}: cannot be written ({e.strerror or type(e).__name__})") from None
    return folder
