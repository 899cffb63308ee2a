"""Mixed precision: the numerically sensitive functions (SVD, power iteration, Newton-Schulz,
covariance, EPN) compute in float32 even under bfloat16 / float16 autocast, like
`torch.amp.custom_fwd(cast_inputs=torch.float32)` but with the autocast device taken from the inputs."""

import functools

import torch

_HALF = (torch.bfloat16, torch.float16)


def autocast_on(device_type: str) -> bool:
    """Whether autocast is active for tensors on `device_type` (never for meta and other devices
    without autocast)."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def _up(x):
    return x.float() if isinstance(x, torch.Tensor) and x.dtype in _HALF else x


def float32(fn):
    """Decorator: under autocast on the device of the first tensor argument, run `fn` with autocast off
    and its bfloat16 / float16 tensor arguments upcast to float32 (float64 ones stay), so its result is
    float32 (autocast casts it where the next op wants). Without autocast `fn` runs on its inputs as
    they are."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        device = next(a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        if not autocast_on(device):
            return fn(*args, **kwargs)
        with torch.autocast(device, enabled=False):
            return fn(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})

    return wrapper
