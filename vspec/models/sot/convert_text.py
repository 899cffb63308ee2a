"""SoT's language head (cokezrr/transformers @ 794889f, a fork of transformers 2.2.1) -> vspec.

With `MGCrP=True` the fork's `BertModel.pooler` is the head and its output the logits: cls_fc(x[:, 0]) +
visual_fc(svPN(cov(x[:, 1:]))). cov: two bias-free 1x1 convolutions (H -> MGCrP_q, H -> MGCrP_k), each +
BatchNorm + ReLU, the mean over tokens removed, (1/N) X Y^T over every position after [CLS], padding included;
svPN: one power iteration from the learned `normalization.weight` (q entries: it starts on the left), alpha 0.5,
the remainder divided by s^0.5 + 1e-5; then dropout MGCrP_dp. In vspec: `language_head(q, k, drop,
padding="included")` (vspec.models.sot.spec); the two convolutions and BatchNorms are stacked into the pool's `wr` and
`bn` (per channel, so exactly).
"""

from collections.abc import Mapping
from typing import Any

import attrs
import torch
from torch import nn

from ... import spec as specs
from ...compiler import build
from ...convert.common import ConversionError, load_mapped, read_arguments
from ...convert.hf import hf_key, hf_state, spec_from_hf
from . import spec as family_spec

__all__ = ["BERT_CONFIG", "CLASSIFIER", "REPRESENTATION", "from_official_sot_text", "sot_text_head"]

_HEAD_PREFIX = "bert.pooler."
_HEAD = {"normalization.weight": "head.norm.v0", "visual_fc.weight": "head.word_fc.weight",
         "visual_fc.bias": "head.word_fc.bias", "cls_fc.weight": "head.cls_fc.weight",
         "cls_fc.bias": "head.cls_fc.bias"}
_BN = ("weight", "bias", "running_mean", "running_var")

# What a config may hold, every key honoured or refused (never ignored). The fixtures' form: the SoT Classifier's
# arguments, `bert_config` and the fixture's notes; the BertConfig fields: transformers 2.2.1's (the fork's base),
# the fork's MGCrP fields and those later transformers write into a config.json
CLASSIFIER = ("num_classes", "input_dim", "representationConfig", "bert_config", "seq_len", "state_dict_prefix_in_bert")
BERT_CONFIG = (
    "vocab_size", "vocab_size_or_config_json_file", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "hidden_act", "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "max_position_embeddings", "type_vocab_size", "initializer_range", "layer_norm_eps", "finetuning_task",
    "num_labels", "output_attentions", "output_hidden_states", "output_past", "torchscript", "use_bfloat16",
    "pruned_heads", "is_decoder", "id2label", "label2id", "MGCrP", "MGCrP_q", "MGCrP_k", "MGCrP_dp",
    "_name_or_path", "add_cross_attention", "architectures", "bos_token_id", "chunk_size_feed_forward",
    "classifier_dropout", "dtype", "torch_dtype", "eos_token_id", "is_encoder_decoder", "model_type", "pad_token_id",
    "position_embedding_type", "problem_type", "return_dict", "tie_word_embeddings", "transformers_version",
    "use_cache", "gradient_checkpointing")
REPRESENTATION = {"": ("type", "args", "normalization"), "args": ("cov_type", "remove_mean", "dimension_reduction",
                                                                   "input_dim"),
                  "normalization": ("type", "args"),
                  "normalization.args": ("alpha", "iterNum", "svNum", "regular", "vec", "input_dim")}


def _table(where: str, value: Any, known: tuple[str, ...]) -> Mapping[str, Any]:
    """`value`, a table whose every key is `known`: else one ConversionError naming `where` and the key."""
    read_arguments(f"SoT text {where}", value, dict.fromkeys(known))
    return value


def sot_text_head(config: Mapping[str, Any]) -> family_spec.SecondOrderHead:
    """The head of a fork config: a BertConfig dict with MGCrP, MGCrP_q, MGCrP_k, MGCrP_dp, or the fixtures'
    {Classifier arguments, `bert_config`}. A key that is none of these is refused by name.

    Args:
        config: the fork's config (above).
    """
    if "bert_config" in config:
        _table("(top level)", config, CLASSIFIER)
    bert = _table("bert_config" if "bert_config" in config else "(BertConfig)", config.get("bert_config", config),
                  BERT_CONFIG)
    if not bert.get("MGCrP"):
        raise ConversionError("SoT text config: MGCrP is not set (the fork's plain BERT: use from_hf)")
    rep = _table("representationConfig", config.get("representationConfig") or {}, REPRESENTATION[""])
    args = _table("representationConfig.args", rep.get("args") or {}, REPRESENTATION["args"])
    norm = _table("representationConfig.normalization", rep.get("normalization") or {},
                  REPRESENTATION["normalization"])
    _table("representationConfig.normalization.args", norm.get("args") or {}, REPRESENTATION["normalization.args"])
    reduced = args.get("dimension_reduction")
    if reduced is not None and list(reduced) != [bert.get("MGCrP_q"), bert.get("MGCrP_k")]:
        raise ConversionError(f"SoT text config: representationConfig.args.dimension_reduction {list(reduced)} is not "
                              f"[MGCrP_q, MGCrP_k] = [{bert.get('MGCrP_q')}, {bert.get('MGCrP_k')}]")
    for key, value, plain in (("type", rep.get("type", "second-order"), "second-order"),
                              ("cov_type", args.get("cov_type", "cross"), "cross"),
                              ("normalization", norm.get("type", "svPN"), "svPN"),
                              ("vec", norm.get("args", {}).get("vec", "full"), "full")):
        if value != plain:
            raise ConversionError(f"SoT text config: {key} {value!r} is not converted (only {plain!r})")
    svpn = norm.get("args", {})
    head = family_spec.language_head(bert["MGCrP_q"], bert["MGCrP_k"], drop=float(bert.get("MGCrP_dp", 0.0)),
                                     padding="included")
    centering = "channel" if args.get("remove_mean", True) else "none"
    return attrs.evolve(head, pool=attrs.evolve(head.pool, centering=centering),
                        norm=attrs.evolve(head.norm, alpha=float(svpn.get("alpha", 0.5)), iters=svpn.get("iterNum", 1),
                                          num_sv=svpn.get("svNum", 1)))


def _head_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The head's keys in vspec's names: the q and k branches' convolutions and BatchNorms stacked."""
    out = {_HEAD[k]: v for k, v in state.items() if k in _HEAD}
    branch = "representation.conv_dr_block.{}.{}.{}"
    try:
        out["head.pool.wr.weight"] = torch.cat([state[branch.format(i, 0, "weight")].flatten(1) for i in (0, 1)])
        for name in _BN:
            out[f"head.pool.bn.{name}"] = torch.cat([state[branch.format(i, 1, name)] for i in (0, 1)])
    except KeyError as e:
        raise ConversionError(f"SoT text head: {e.args[0]} is missing") from None
    out["head.pool.bn.num_batches_tracked"] = state.get(branch.format(0, 1, "num_batches_tracked"), torch.tensor(0))
    return out


def from_official_sot_text(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any],
                           body: specs.Model | None = None) -> nn.Module:
    """The fork's BERT with SoT's head: `state_dict` of `BertForSequenceClassification` (`bert.` + HF's BERT keys,
    the head under `bert.pooler.`) with its BertConfig dict, the body then `spec_from_hf(config)`; or the head
    alone (its keys with or without `bert.pooler.`, as in the fixture) on `body`, a text spec whose head is
    replaced and whose other weights keep their initialisation.

    Args:
        state_dict: the released weights (above).
        config: the fork's config (`sot_text_head`).
        body: the text spec a head alone sits on; None: the checkpoint holds the body.
    """
    head_keys = {k[len(_HEAD_PREFIX):] if k.startswith(_HEAD_PREFIX) else k: v for k, v in state_dict.items()
                 if k.startswith(_HEAD_PREFIX) or not k.startswith("bert.")}
    body_state = {k: v for k, v in state_dict.items() if k.startswith("bert.") and not k.startswith(_HEAD_PREFIX)}
    if body is None:
        if not body_state:
            raise ConversionError("a SoT text head alone: pass body= (the text spec it sits on)")
        body = spec_from_hf({**config, "model_type": "bert"}, classifier=True)
    if not body.embedder.text:
        raise ConversionError(f"body: a text spec, got a {body.embedder.kind} embedder")
    num_classes = config.get("num_classes", config.get("bert_config", config).get("num_labels"))
    spec = attrs.evolve(body, head=sot_text_head(config), num_classes=int(num_classes))
    model = build(spec)
    head = _head_state(head_keys)
    used = {*_HEAD, *(f"representation.conv_dr_block.{i}.{j}.{n}" for i in (0, 1) for j, names in
                      ((0, ("weight",)), (1, (*_BN, "num_batches_tracked"))) for n in names)}
    if extra := sorted(set(head_keys) - used):
        raise ConversionError(f"SoT text head: unused checkpoint keys: {', '.join(extra)}")
    if body_state:
        state = {**hf_state(body_state), **{f"@{k}": v for k, v in head.items()}}
        return load_mapped(model, state, lambda k: k[1:] if k.startswith("@") else hf_key(k))
    own = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    return load_mapped(model, {**own, **head}, lambda k: k)
