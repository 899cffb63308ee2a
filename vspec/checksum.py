"""The checksums of checkpoints and model folders: `checksum` covers everything in an object (every field, the
spec text, each tensor's dtype, shape and bytes), `tensor_checksum` the tensors alone (the previous release's).
Both walk without recursion and hash an object met again as a reference, so that the walk is as long as the file;
the checkpoint reader refuses shared or self-containing containers first (`vspec.checkpoint.Scan`)."""

import hashlib
from typing import Any

import torch

CONTAINERS = (dict, list, tuple, set, frozenset)


def children(obj: Any) -> list[tuple[Any, Any]]:
    """(key, child) of a container; dict keys are labels, not walked."""
    if isinstance(obj, dict):
        return list(obj.items())
    if isinstance(obj, (set, frozenset)):
        return [(i, v) for i, v in enumerate(sorted(obj, key=repr))]
    return list(enumerate(obj))


def tensor_bytes(t: torch.Tensor):
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def tensor_checksum(obj: Any) -> str:
    """The previous release's checksum: sha256 (hex) over the key path, dtype, shape and bytes of every tensor
    in `obj`, dict keys in sorted order; containers that hold no tensor are skipped (they add nothing).
    Walks without recursion; the caller refuses shared or self-containing containers first (`Scan`)."""
    h = hashlib.sha256()
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, torch.Tensor):
            h.update(f"{key}|{value.dtype}|{tuple(value.shape)}\n".encode())
            h.update(tensor_bytes(value))
        elif isinstance(value, dict):
            stack.extend((f"{key}.{k}", value[k]) for k in reversed(sorted(value, key=str)))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{key}.{i}", v) for i, v in reversed(list(enumerate(value))))
    return h.hexdigest()


_CLOSE = object()


def checksum(obj: Any) -> str:
    """sha256 (hex) over everything in `obj`: each object's type and value (str, int, float, bool, None,
    bytes; torch dtypes and devices by name), containers with their lengths and their items in order (dict
    keys too), tensors with dtype, shape and bytes. An object met again (a shared tuple, one tensor under two
    keys) is hashed as a reference to its first occurrence, so the walk is as long as the file. No recursion."""
    h = hashlib.sha256()
    seen: dict[int, int] = {}
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if value is _CLOSE:
            h.update(b");")
            continue
        if isinstance(value, (torch.Tensor, *CONTAINERS)):
            if id(value) in seen:
                h.update(f"R{seen[id(value)]};".encode())
                continue
            seen[id(value)] = len(seen)
        kind = type(value).__name__
        if value is None or isinstance(value, bool):
            h.update(f"{kind}:{value};".encode())
        elif isinstance(value, int):
            h.update(f"{kind}:{value:x};".encode())  # hex: no limit on the digits of an int
        elif isinstance(value, float):
            h.update(f"{kind}:{value.hex()};".encode())
        elif isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            h.update(f"{kind}:{len(data)}:".encode())
            h.update(data)
        elif isinstance(value, (bytes, bytearray)):
            h.update(f"{kind}:{len(value)}:".encode())
            h.update(value)
        elif isinstance(value, torch.Tensor):
            h.update(f"{kind}:{value.dtype}|{tuple(value.shape)}:".encode())
            h.update(tensor_bytes(value))
        elif isinstance(value, CONTAINERS):
            items = children(value)
            h.update(f"{kind}:{len(items)}(".encode())
            stack.append(_CLOSE)  # closes the container after its items
            for k, v in reversed(items):
                stack.append(v)
                if isinstance(value, dict):
                    stack.append(k)
        else:  # torch.dtype, torch.device, complex ...
            h.update(f"{kind}:{value!s};".encode())
    return h.hexdigest()
