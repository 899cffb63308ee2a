"""Spec format versions. A model's JSON / TOML carries `version`; files without one are version 1
(vspec before stages). `upgrade` brings any known version to the current one, so that the spec files
and checkpoints of earlier releases keep loading.

- 1 -> 2 (stages): SOPE / DAFF `norm` strings become Norm tables (eps 1e-5, the BatchNorm2d /
  LayerNorm defaults they used), HeadTokens `eps` becomes `norm`, and a DAFF that re-weights a class
  token the model does not have, or (in the last block) one the head never reads, becomes cls =
  identity: its weights could only ever get zero gradients and are dropped from checkpoints (a
  repeated block becomes a listed stack when only its last copy changes). The one-stage `block` /
  `depth` / `dim` form stays valid. The sizes are checked before anything is done per block: a depth
  that is no int in 1..MAX_SIZE is left for the structurer to reject, and an upgrade that would list or
  rename more than MAX_UPGRADE_DEPTH blocks is refused (a 200-byte file must not make it loop 2**31
  times).
- 2 -> 3 (the block is a role): each block table gets its `kind` from the one option of format 2's Block it
  sets, which the table then keeps: `head_tokens` -> head_tokens (DHVT), `conv` -> coupled (Conformer),
  `post_norm: true` -> post_norm, `adjust_ratio` other than 1 -> adjusted (Refined-ViT); none -> pre_norm. The
  options at their defaults are dropped; a block setting two of them has no kind and is refused by its path.
  Checkpoint keys are unchanged.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import MAX_SIZE, SpecError, show

__all__ = ["MAX_UPGRADE_DEPTH", "VERSION", "state_key_upgrade", "upgrade", "version_of"]
VERSION = 3
MAX_UPGRADE_DEPTH = 10_000  # blocks an upgrade may list or rename one by one (deep ViTs have under 100)


def version_of(data: Mapping[str, Any]) -> int:
    """The spec format of a spec's dict (its "version" key, 1 when absent); a SpecError if it is no positive int
    or newer than VERSION.

    Args:
        data: a spec as a dict (a file's contents, or a checkpoint's).
    """
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SpecError("version", f"must be a positive int (the spec format), got {show(version)}")
    if version > VERSION:
        raise SpecError("version", f"spec format {show(version)} is newer than this vspec reads (1 to {VERSION}); "
                                   "upgrade vspec")
    return version


def _norm(value: Any) -> Any:
    return {"kind": value, "eps": 1e-5} if isinstance(value, str) else value


def _dead_reweight(block: Any) -> bool:
    ffn = block.get("ffn") if isinstance(block, Mapping) else None
    return isinstance(ffn, Mapping) and ffn.get("kind") == "daff" and ffn.get("cls", "reweight") == "reweight"


def _v1_to_v2(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    dropped: list[str] = []
    embedder = data.get("embedder")
    if isinstance(embedder, Mapping) and embedder.get("kind") == "sope" and "norm" in embedder:
        data["embedder"] = {**embedder, "norm": _norm(embedder["norm"])}
    block, depth = data.get("block"), data.get("depth", 12)
    if not (isinstance(depth, int) and not isinstance(depth, bool) and 0 < depth <= MAX_SIZE):
        depth = 1  # the structurer rejects it
    class_token = data.get("class_token", True) is not False
    head = data.get("head")
    head_reads_class_token = not (isinstance(head, Mapping) and head.get("kind") == "gap")
    listed = isinstance(block, list)
    blocks = list(block) if listed else [block]
    if not listed and depth > MAX_UPGRADE_DEPTH and _dead_reweight(block) and (
            not class_token or not head_reads_class_token):
        raise SpecError("depth", f"{depth} blocks of a format-1 spec whose DAFF class-token re-weighting the "
                                 f"upgrade removes block by block; it does so for at most {MAX_UPGRADE_DEPTH} "
                                 f"(give the spec in format {VERSION})")
    if blocks and class_token and not head_reads_class_token and _dead_reweight(blocks[-1]):
        # the last block's class-token re-weighting before a head that never reads the class token
        if not listed:
            blocks, listed = [block] * depth, True
        blocks[-1] = {**blocks[-1], "ffn": {**blocks[-1]["ffn"], "cls": "identity"}}
        dropped += [f"stages.0.blocks.{len(blocks) - 1}.ffn.{name}." for name in ("compress", "excitation")]
    out = []
    for i, b in enumerate(blocks):
        if not isinstance(b, Mapping):
            out.append(b)
            continue
        b = dict(b)
        ffn = b.get("ffn")
        if isinstance(ffn, Mapping) and ffn.get("kind") == "daff":
            ffn = {**ffn, "norm": _norm(ffn["norm"])} if "norm" in ffn else dict(ffn)
            if not class_token and _dead_reweight(b):  # no class token at all
                ffn["cls"] = "identity"
                dropped += [f"stages.0.blocks.{j}.ffn.{name}." for j in ([i] if listed else range(depth))
                            for name in ("compress", "excitation")]
            b["ffn"] = ffn
        tokens = b.get("head_tokens")
        if isinstance(tokens, Mapping) and "eps" in tokens:
            b["head_tokens"] = {"norm": {"kind": "layernorm", "eps": tokens["eps"]},
                                **{k: v for k, v in tokens.items() if k != "eps"}}
        out.append(b)
    if block is not None:
        data["block"] = out if listed else out[0]
    return data, dropped


# format 2's Block options -> (the format 3 kind that keeps it, whether a value sets it)
_BLOCK_OPTIONS = {"head_tokens": ("head_tokens", lambda v: v is not None), "conv": ("coupled", lambda v: v is not None),
                 "post_norm": ("post_norm", lambda v: v is True), "adjust_ratio": ("adjusted", lambda v: v != 1)}


def _block_v3(block: Any, path: str) -> Any:
    """A format-2 block table with its kind (module doc); anything else is left for the structurer."""
    if not isinstance(block, Mapping) or "kind" in block:
        return block
    b = dict(block)
    for name, want in (("post_norm", bool), ("adjust_ratio", (int, float))):
        if name in b and (not isinstance(b[name], want) or (want is not bool and isinstance(b[name], bool))):
            raise SpecError(f"{path}.{name}", f"must be {'bool' if want is bool else 'float'}, got {show(b[name])}")
    chosen = [name for name, (_, sets) in _BLOCK_OPTIONS.items() if name in b and sets(b[name])]
    if len(chosen) > 1:
        raise SpecError(path, f"a format-2 block with {' and '.join(chosen)} has no kind in format 3 (a block is one "
                              "kind: head_tokens, coupled, post_norm or adjusted)")
    kind = _BLOCK_OPTIONS[chosen[0]][0] if chosen else "pre_norm"
    keep = {"head_tokens": "head_tokens", "coupled": "conv", "adjusted": "adjust_ratio"}.get(kind)
    out = {"kind": kind, **{k: v for k, v in b.items() if k not in _BLOCK_OPTIONS or k == keep}}
    return out


def _blocks_v3(value: Any, path: str) -> Any:
    if isinstance(value, list):
        return [_block_v3(b, f"{path}.{i}") for i, b in enumerate(value)]
    return _block_v3(value, path)


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    if "block" in data:
        data["block"] = _blocks_v3(data["block"], "block")
    stages = data.get("stages")
    if isinstance(stages, list):
        data["stages"] = [{**s, "block": _blocks_v3(s["block"], f"stages.{i}.block")}
                          if isinstance(s, Mapping) and "block" in s else s for i, s in enumerate(stages)]
    return data


def upgrade(data: Any) -> tuple[Any, list[str]]:
    """(the model table in the current format without its `version` key, the checkpoint key prefixes
    whose weights the upgrade removed). Anything but a table is returned for the structurer to reject.

    Args:
        data: a spec's model table as read from a file or checkpoint, of any format version.
    """
    if not isinstance(data, Mapping):
        return data, []
    version = version_of(data)
    data = {k: v for k, v in data.items() if k != "version"}
    dropped: list[str] = []
    if version == 1:
        data, dropped = _v1_to_v2(data)
    if version <= 2:
        data = _v2_to_v3(data)
    return data, dropped


def state_key_upgrade(version: int, dropped: list[str]) -> Callable[[str], str | None]:
    """How a checkpoint key of a model written at `version` reads now (None: the weight is gone).

    Args:
        version: the spec format the checkpoint was written at.
        dropped: the key prefixes whose weights the upgrade removed (`upgrade`'s second value).
    """

    def rename(key: str) -> str | None:
        if version == 1:
            key = re.sub(r"^blocks\.", "stages.0.blocks.", key)  # one stack at the root -> stage 0
        return None if any(key.startswith(p) for p in dropped) else key

    return rename
