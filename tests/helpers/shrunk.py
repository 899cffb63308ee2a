"""The presets shrunk (benchmarks/shrunk.py: `small`, `shrunk`), and one forward + backward of a model."""

import torch

import vspec
from benchmarks.shrunk import shrunk, small

from . import ROOT

__all__ = ["run", "shrunk", "small", "small_spec"]


def small_spec(name: str) -> vspec.Model:
    return small(vspec.load_spec(ROOT / "specs" / f"{name}.py"))


def run(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and every parameter's gradient of one forward + backward (train mode) and the eval logits."""
    torch.manual_seed(1)
    model.train().zero_grad()
    out = model(x)
    out.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        return torch.cat([out.detach().flatten(), model.eval()(x).flatten()]), grads
