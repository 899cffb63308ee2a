"""A checkpoint of an earlier release brought to the current one as it is read (vspec/weights/checkpoint.py's
`check_checkpoint`): its spec upgraded to the current format version (vspec/spec/migrate.py) and its state dicts'
keys renamed to those of the current modules."""

import json
from typing import Any

from ..spec import SpecError, from_dict, to_json
from ..spec.errors import cause
from ..spec.migrate import state_key_upgrade, upgrade, version_of

__all__ = ["migrate_checkpoint"]


def migrate_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A copy of the checkpoint with its spec in the current format version and its state dicts
    ("state_dict", "ema") keyed as the current modules are (unchanged for a current checkpoint). An
    upgrade that dropped weights lists their key prefixes under "dropped": an optimizer state saved
    beside them no longer fits the model.

    Args:
        ckpt: the checkpoint dict, its "spec" a JSON text.
    """
    try:
        data = json.loads(ckpt["spec"])
    except (TypeError, ValueError) as e:  # JSONDecodeError, or an int beyond Python's 4300 digits
        raise SpecError("", f"the checkpoint's spec is not JSON: {cause(e)}") from None
    except RecursionError:
        raise SpecError("", "the checkpoint's spec is not JSON vspec reads: nested too deep") from None
    if not isinstance(data, dict):
        raise SpecError("", "the checkpoint's spec is not a JSON table")
    version = version_of(data)
    new, dropped = upgrade(data)
    rename = state_key_upgrade(version, dropped)
    out = {**ckpt, "spec": to_json(from_dict(new)), "dropped": dropped}
    for name in ("state_dict", "ema"):
        if isinstance(ckpt.get(name), dict):
            out[name] = {new_key: value for key, value in ckpt[name].items()
                         if (new_key := rename(key)) is not None}
    return out
