"""The checksums of checkpoints and model folders: `checksum` covers everything in an object (every field, the
spec text, each tensor's dtype, shape and bytes), `tensor_checksum` the tensors alone (the previous release's).
Both walk without recursion and hash an object met again as a reference, so that the walk is as long as the file;
the checkpoint reader refuses shared or self-containing containers first (`vspec.weights.checkpoint.Scan`). The tensors
on a device are read to the host together (`host_bytes`: one copy per CHUNK bytes, not one per tensor)."""

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

__all__ = ["CHUNK", "CONTAINERS", "checksum", "children", "host_bytes", "tensor_checksum"]

CONTAINERS = (dict, list, tuple, set, frozenset)


def children(obj: Any) -> list[tuple[Any, Any]]:
    """(key, child) of a container; dict keys are labels, not walked.

    Args:
        obj: a container (`CONTAINERS`).
    """
    if isinstance(obj, dict):
        return list(obj.items())
    if isinstance(obj, (set, frozenset)):
        return [(i, v) for i, v in enumerate(sorted(obj, key=repr))]
    return list(enumerate(obj))


CHUNK = 2**28  # bytes of device tensors read to the host in one copy at most (a larger tensor: alone)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _on_host(t: torch.Tensor) -> bool:
    return t.device.type == "cpu"


def host_bytes(tensors: Iterable[torch.Tensor]) -> Iterator[np.ndarray]:
    """Each tensor's bytes (a uint8 array), in order. A host tensor's are read in place; the device tensors of a
    run of up to CHUNK bytes are concatenated there and copied to the host at once, one read per device, so that
    a checkpoint's few hundred tensors cost a few host-device synchronisations, not one each.

    Args:
        tensors: the tensors, on any devices.
    """
    run: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        n = 0 if _on_host(t) else t.nbytes
        if run and size + n > CHUNK:
            yield from _read(run)
            run, size = [], 0
        run.append(t)
        size += n
    yield from _read(run)


def _read(run: list[torch.Tensor]) -> list[np.ndarray]:
    """The bytes of a run of tensors: a host tensor's in place, the tensors of each device in one copy."""
    flat = [_flat(t) for t in run]
    out: list[np.ndarray | None] = [f.numpy() if _on_host(f) else None for f in flat]
    by_device: dict[torch.device, list[int]] = {}
    for i, f in enumerate(flat):
        if out[i] is None:
            by_device.setdefault(f.device, []).append(i)
    for index in by_device.values():
        joined = flat[index[0]] if len(index) == 1 else torch.cat([flat[i] for i in index])
        data, start = joined.cpu().numpy(), 0  # the one read of these tensors
        for i in index:
            out[i], start = data[start:start + flat[i].numel()], start + flat[i].numel()
    return out


def tensor_checksum(obj: Any) -> str:
    """The previous release's checksum: sha256 (hex) over the key path, dtype, shape and bytes of every tensor
    in `obj`, dict keys in sorted order; containers that hold no tensor are skipped (they add nothing).
    Walks without recursion; the caller refuses shared or self-containing containers first (`Scan`).

    Args:
        obj: a checkpoint's object tree.
    """
    return _digest(_tensor_parts(obj))


def _tensor_parts(obj: Any) -> Iterator[bytes | torch.Tensor]:
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, torch.Tensor):
            yield f"{key}|{value.dtype}|{tuple(value.shape)}\n".encode()
            yield value
        elif isinstance(value, dict):
            stack.extend((f"{key}.{k}", value[k]) for k in reversed(sorted(value, key=str)))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{key}.{i}", v) for i, v in reversed(list(enumerate(value))))


def _digest(parts: Iterable[bytes | torch.Tensor]) -> str:
    """sha256 (hex) over the parts in order, a tensor by its bytes (read with the others: `host_bytes`)."""
    parts = list(parts)
    data = host_bytes(p for p in parts if isinstance(p, torch.Tensor))
    h = hashlib.sha256()
    for p in parts:
        h.update(next(data) if isinstance(p, torch.Tensor) else p)
    return h.hexdigest()


_CLOSE = object()


def checksum(obj: Any) -> str:
    """sha256 (hex) over everything in `obj`: each object's type and value (str, int, float, bool, None,
    bytes; torch dtypes and devices by name), containers with their lengths and their items in order (dict
    keys too), tensors with dtype, shape and bytes. An object met again (a shared tuple, one tensor under two
    keys) is hashed as a reference to its first occurrence, so the walk is as long as the file. No recursion.

    Args:
        obj: a checkpoint's object tree.
    """
    return _digest(_parts(obj))


def _parts(obj: Any) -> Iterator[bytes | torch.Tensor]:
    seen: dict[int, int] = {}
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if value is _CLOSE:
            yield b");"
            continue
        if isinstance(value, (torch.Tensor, *CONTAINERS)):
            if id(value) in seen:
                yield f"R{seen[id(value)]};".encode()
                continue
            seen[id(value)] = len(seen)
        kind = type(value).__name__
        if value is None or isinstance(value, bool):
            yield f"{kind}:{value};".encode()
        elif isinstance(value, int):
            yield f"{kind}:{value:x};".encode()  # hex: no limit on the digits of an int
        elif isinstance(value, float):
            yield f"{kind}:{value.hex()};".encode()
        elif isinstance(value, str):
            data = value.encode("utf-8", "surrogatepass")
            yield f"{kind}:{len(data)}:".encode()
            yield data
        elif isinstance(value, (bytes, bytearray)):
            yield f"{kind}:{len(value)}:".encode()
            yield value
        elif isinstance(value, torch.Tensor):
            yield f"{kind}:{value.dtype}|{tuple(value.shape)}:".encode()
            yield value
        elif isinstance(value, CONTAINERS):
            items = children(value)
            yield f"{kind}:{len(items)}(".encode()
            stack.append(_CLOSE)  # closes the container after its items
            for k, v in reversed(items):
                stack.append(v)
                if isinstance(value, dict):
                    stack.append(k)
        else:  # torch.dtype, torch.device, complex ...
            yield f"{kind}:{value!s};".encode()
