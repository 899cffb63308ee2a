"""BatchNorm in training on a channels-last CPU tensor, with accurate batch statistics and gradients.

PyTorch's CPU batch_norm on channels-last input (2.14) sums row after row in float32, forward (the
batch statistics) and backward (sum dy, sum dy xhat): on (8, 36, 197, 197) maps with values near 1
and variance 1e-5 its normalised output is off by ~2e-3 (NCHW: 3e-6), and its d/dx and d/dweight by
~5e-4 relative (NCHW: ~1e-7). Here the statistics come from `torch.var_mean` and the backward's sums
from `torch.sum` (both accurate in float32: Welford, cascaded sums), the normalisation is one
channels-last pass (batch_norm given the statistics would return NCHW) and d/dx one fused affine of
dy and x per channel. The running statistics are updated as nn.BatchNorm2d does. The backward takes
~2.3x aten's fused kernel (47 vs 20 ms on those maps, 2 cores).
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
        """d/dx, d/dweight, d/dbias of weight (x - mean) invstd + bias with batch statistics, over
        the M values of each channel: db = sum dy, dw = sum dy xhat, dx = weight invstd (dy - db / M
        - xhat dw / M), written dx = a dy + b x + c per channel. sum dy (x - mean) as torch's NCHW
        kernel sums it (no cancellation against the mean)."""
        x, weight, mean, invstd = ctx.saved_tensors
        grad = grad.contiguous(memory_format=torch.channels_last)
        dims, m = (0, 2, 3), x.numel() // x.shape[1]
        db = grad.sum(dims)
        dw = (x - mean[:, None, None]).mul_(grad).sum(dims) * invstd
        dx = None
        if ctx.needs_input_grad[0]:
            a = weight * invstd
            b = -a * invstd * dw / m
            c = -a * db / m - b * mean
            dx = torch.addcmul(c[:, None, None], x, b[:, None, None]).addcmul_(grad, a[:, None, None])
        return dx, dw if ctx.needs_input_grad[1] else None, db if ctx.needs_input_grad[2] else None, None


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
