"""The presets shrunk (benchmarks/shrunk.py: `small`, `shrunk`), one forward + backward of a model and a few
training steps."""

import torch

import vspec
from benchmarks.shrunk import shrunk, small

from . import ROOT

__all__ = ["run", "shrunk", "small", "small_spec", "train_steps"]


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


def train_steps(spec: vspec.Model, checkpointing: bool, steps: int = 3, wrap=lambda model: model,
                ) -> tuple[dict, list[dict], torch.Tensor]:
    """`steps` SGD steps of `wrap(model)` (torch.compile) in train mode from seed 0, each step's draws (drop path)
    seeded: the buffers after them, each step's gradients and the eval logits after them."""
    torch.manual_seed(0)
    model = vspec.build(spec).train()
    model.set_grad_checkpointing(checkpointing)
    forward = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(0)
    grads = []
    for step in range(steps):
        x = vspec.example_input(spec, 4, generator=data)
        torch.manual_seed(step)
        forward(x).square().mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        logits = model.eval()(vspec.example_input(spec, 4, generator=data))
    return {n: b.clone() for n, b in model.named_buffers()}, grads, logits
