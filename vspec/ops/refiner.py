"""BatchNorm in training on a channels-last CPU tensor, with accurate batch statistics.

PyTorch's CPU batch_norm on channels-last input (2.14) accumulates the batch statistics in float32:
on (8, 36, 197, 197) maps with values near 1 and variance 1e-5 its normalised output is off by ~2e-3
(NCHW: 3e-6), and Refined-ViT-S's train-mode logits by ~10x the float32 rounding of the NCHW model.
Here the statistics come from `torch.var_mean` (accurate), the normalisation is one channels-last
pass (batch_norm given the statistics would return NCHW), and the backward is aten's
native_batch_norm_backward given the same statistics. The running statistics are updated as
nn.BatchNorm2d does.
"""

import torch
from torch import nn


class _BatchNormTrain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        var, mean = torch.var_mean(x.permute(0, 2, 3, 1).reshape(-1, x.shape[1]), 0, correction=0)
        invstd = torch.rsqrt(var + eps)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.eps = eps
        ctx.mark_non_differentiable(mean, var)
        s = weight * invstd
        y = torch.addcmul((bias - mean * s)[:, None, None], x, s[:, None, None])  # keeps x's channels-last
        return y, mean, var

    @staticmethod
    def backward(ctx, grad, _mean, _var):
        x, weight, mean, invstd = ctx.saved_tensors
        grad = grad.contiguous(memory_format=torch.channels_last)
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(grad, x, weight, None, None, mean, invstd, True,
                                                               ctx.eps, list(ctx.needs_input_grad[:3]))
        return dx, dw, db, None


def batch_norm_train(x: torch.Tensor, bn: nn.BatchNorm2d) -> torch.Tensor:
    """bn(x) in training mode (batch statistics; running statistics updated) for channels-last x."""
    y, mean, var = _BatchNormTrain.apply(x, bn.weight, bn.bias, bn.eps)
    if bn.track_running_stats:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            f = 1.0 / bn.num_batches_tracked.item() if bn.momentum is None else bn.momentum
            n = var.new_tensor(x.numel() // x.shape[1])
            bn.running_mean.lerp_(mean, f)
            bn.running_var.lerp_(var * n / (n - 1), f)
    return y
