"""The released formulations of T2T-ViT (yitu-opensource/T2T-ViT @ 0f63dc9, models/t2t_vit.py) and DeiT with
contextual product iRPE (microsoft/Cream @ 4a13c40, iRPE/DeiT-with-iRPE), written here from their description
(docs/families/t2t.md, docs/families/irpe.md) with the released parameter names, so that the fixtures'
state dicts load into them strictly. `benchmarks/models.py` races vspec against them;
tests/models/t2t/test_t2t.py checks that they reproduce the fixtures.

Their forward passes compute as the released code does: the body's attention materialises its map (timm 0.3's
`Attention`), the performer casts to float32 and sums with einsum, iRPE gathers its bias from a flattened bucket
table and adds it to the map before the softmax."""

import math

import torch
from torch import nn


def sinusoid_table(n: int, d: int) -> torch.Tensor:
    """The Transformer's table, sin on even and cos on odd channels, position p over 10000^(2 floor(i / 2) / d)."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    angle = pos / torch.pow(10000.0, 2 * (torch.arange(d) // 2) / d)
    angle[:, 0::2], angle[:, 1::2] = angle[:, 0::2].sin(), angle[:, 1::2].cos()
    return angle.float()[None]


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    """timm 0.3's attention: the map materialised; `bias(q * scale, attn)` adds a term to it (iRPE)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool, scale: float | None = None):
        super().__init__()
        self.heads, self.scale = heads, scale or (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=qkv_bias), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q = q * self.scale
        attn = self.extra_scores(q, k, q @ k.transpose(-2, -1)).softmax(dim=-1)
        out = self.extra_values(attn, attn @ v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))

    def extra_scores(self, q, k, attn):
        return attn

    def extra_values(self, attn, out):
        return out


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float, qkv_bias: bool, eps: float, attn=None):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=eps), nn.LayerNorm(dim, eps=eps)
        self.attn = attn or Attention(dim, heads, qkv_bias)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# ---------------------------------------------------------------- T2T-ViT
class TokenPerformer(nn.Module):
    """Token_performer: kqv split k, q, v; positive random features in float32 via einsum; skip through v."""

    def __init__(self, dim: int, in_dim: int, kernel_ratio: float = 0.5):
        super().__init__()
        self.emb, self.m = in_dim, int(in_dim * kernel_ratio)
        self.kqv, self.proj = nn.Linear(dim, 3 * in_dim), nn.Linear(in_dim, in_dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(in_dim)
        self.mlp = nn.Sequential(nn.Linear(in_dim, in_dim), nn.GELU(), nn.Linear(in_dim, in_dim), nn.Dropout(0.1))
        self.dp = nn.Dropout(0.1)
        w = nn.init.orthogonal_(torch.randn(self.m, in_dim)) * math.sqrt(self.m)
        self.w = nn.Parameter(w, requires_grad=False)

    def prm_exp(self, x):
        xd = (x * x).sum(dim=-1, keepdim=True).repeat(1, 1, self.m) / 2
        return torch.exp(torch.einsum("bti,mi->btm", x.float(), self.w) - xd) / math.sqrt(self.m)

    def forward(self, x):
        k, q, v = torch.split(self.kqv(self.norm1(x)), self.emb, dim=-1)
        kp, qp = self.prm_exp(k), self.prm_exp(q)
        d = torch.einsum("bti,bi->bt", qp, kp.sum(dim=1)).unsqueeze(dim=2)
        kptv = torch.einsum("bin,bim->bnm", v.float(), kp)
        y = torch.einsum("bti,bni->btn", qp, kptv) / (d.repeat(1, 1, self.emb) + 1e-8)
        x = v + self.dp(self.proj(y))
        return x + self.mlp(self.norm2(x))


class TokenTransformer(nn.Module):
    """Token_transformer: one head at scale dim^-0.5 (the input width), skip through v, MLP in_dim -> in_dim."""

    def __init__(self, dim: int, in_dim: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(in_dim)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(dim, 3 * in_dim, bias=False), nn.Linear(in_dim, in_dim)
        self.scale, self.in_dim = dim**-0.5, in_dim
        self.mlp = Mlp(in_dim, in_dim)

    def forward(self, x):
        q, k, v = self.attn.qkv(self.norm1(x)).chunk(3, dim=-1)
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        x = v + self.attn.proj(attn @ v)
        return x + self.mlp(self.norm2(x))


class T2TModule(nn.Module):
    def __init__(self, tokens_type: str, in_chans: int, embed_dim: int, token_dim: int):
        super().__init__()
        block = TokenPerformer if tokens_type == "performer" else TokenTransformer
        self.soft_split0 = nn.Unfold(kernel_size=7, stride=4, padding=2)
        self.soft_split1 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.soft_split2 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.attention1 = block(in_chans * 49, token_dim)
        self.attention2 = block(token_dim * 9, token_dim)
        self.project = nn.Linear(token_dim * 9, embed_dim)

    def forward(self, x):
        x = self.soft_split0(x).transpose(1, 2)
        for attention, split in ((self.attention1, self.soft_split1), (self.attention2, self.soft_split2)):
            x = attention(x)
            b, hw, c = x.shape
            side = int(math.sqrt(hw))
            x = split(x.transpose(1, 2).reshape(b, c, side, side)).transpose(1, 2)
        return self.project(x)


class T2TViT(nn.Module):
    """T2T_ViT(img_size, tokens_type, in_chans, num_classes, embed_dim, depth, num_heads, mlp_ratio, qkv_bias,
    qk_scale, token_dim) in eval: LayerNorm eps 1e-5, the frozen sinusoid table, class-token head."""

    def __init__(self, config: dict):
        super().__init__()
        c = config
        dim, grid = c["embed_dim"], c["img_size"] // 16
        self.tokens_to_token = T2TModule(c["tokens_type"], c["in_chans"], dim, c["token_dim"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(sinusoid_table(grid * grid + 1, dim), requires_grad=False)
        heads = c["num_heads"]
        self.blocks = nn.ModuleList(
            Block(dim, heads, c["mlp_ratio"], c["qkv_bias"], 1e-5, Attention(dim, heads, c["qkv_bias"], c["qk_scale"]))
            for _ in range(c["depth"]))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, c["num_classes"])

    def forward(self, x):
        x = self.tokens_to_token(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


# ---------------------------------------------------------------- DeiT with contextual product iRPE
def piecewise(d: torch.Tensor, alpha: float = 1.9, beta: float = 3.8, gamma: float = 15.2) -> torch.Tensor:
    """iRPE's piecewise index: round(d) for |d| <= alpha, else sign(d) min(round(alpha + ln(|d| / alpha) /
    ln(gamma / alpha) (beta - alpha)), beta), as integers."""
    far = alpha + torch.log(d.abs().clamp(min=1) / alpha) / math.log(gamma / alpha) * (beta - alpha)
    far = torch.sign(d) * torch.minimum(far.round(), torch.tensor(beta))
    return torch.where(d.abs() <= alpha, d.round(), far).long()


def product_buckets(side: int, skip: int = 1, beta: int = 3) -> torch.Tensor:
    """(L + skip, L + skip) buckets of the product method on a side x side grid: (r + beta)(2 beta + 1) + (c + beta)
    of the per-axis piecewise offsets pos_i - pos_j; every pair with a skipped (class) token: (2 beta + 1)^2."""
    rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    pos = torch.stack((rows.flatten(), cols.flatten()), dim=-1).float()
    diff = pos[:, None] - pos[None]
    inner = (piecewise(diff[..., 0]) + beta) * (2 * beta + 1) + piecewise(diff[..., 1]) + beta
    out = torch.full((side * side + skip,) * 2, (2 * beta + 1) ** 2, dtype=torch.long)
    out[skip:, skip:] = inner
    return out


class RPETable(nn.Module):
    """One contextual table shared by the heads: `lookup_table_weight` (1, d, 50), or (1, 50, d) on values."""

    def __init__(self, head_dim: int, values: bool = False, buckets: int = 50):
        super().__init__()
        shape = (1, buckets, head_dim) if values else (1, head_dim, buckets)
        self.lookup_table_weight = nn.Parameter(torch.zeros(shape))


class IRPEAttention(Attention):
    """attn += rpe_k(q s), += rpe_q(k s)^T; out += attn @ table_v[bucket] (the released gathers)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool, on: str, side: int):
        super().__init__(dim, heads, qkv_bias)
        for role in on:
            setattr(self, f"rpe_{role}", RPETable(dim // heads, values=role == "v"))
        self.register_buffer("bucket", product_buckets(side), persistent=False)

    def gathered(self, x, table):
        lookup = x @ table.lookup_table_weight  # (B, H, L, 50)
        n = lookup.shape[-2]
        flat = (self.bucket + torch.arange(n)[:, None] * lookup.shape[-1]).flatten()
        return lookup.flatten(2)[:, :, flat].view(*lookup.shape[:2], n, n)

    def extra_scores(self, q, k, attn):
        if hasattr(self, "rpe_k"):
            attn = attn + self.gathered(q, self.rpe_k)
        if hasattr(self, "rpe_q"):
            attn = attn + self.gathered(k * self.scale, self.rpe_q).transpose(2, 3)
        return attn

    def extra_values(self, attn, out):
        if not hasattr(self, "rpe_v"):
            return out
        b, h, n, _ = attn.shape
        summed = attn.new_zeros(b, h, n, self.rpe_v.lookup_table_weight.shape[1])
        summed.scatter_add_(3, self.bucket.expand(b, h, n, n), attn)  # the attention each bucket receives
        return out + summed @ self.rpe_v.lookup_table_weight


class IRPEDeiT(nn.Module):
    """DeiT-with-iRPE's VisionTransformer(img_size, patch_size, embed_dim, depth, num_heads, mlp_ratio, qkv_bias,
    num_classes, rpe on `on` = "k" | "qkv") in eval: LayerNorm eps 1e-6, learned positions, class-token head."""

    def __init__(self, config: dict, on: str):
        super().__init__()
        c = config
        dim, side, heads = c["embed_dim"], c["img_size"] // c["patch_size"], c["num_heads"]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, c["patch_size"], c["patch_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, side * side + 1, dim))
        self.blocks = nn.ModuleList(
            Block(dim, heads, c["mlp_ratio"], c["qkv_bias"], 1e-6, IRPEAttention(dim, heads, c["qkv_bias"], on, side))
            for _ in range(c["depth"]))
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, c["num_classes"])

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def irpe_config(config: dict, on: str) -> dict:
    """The released constructor's arguments as the fixtures store them: `config` plus contextual product iRPE on
    `on` ("k" | "qkv"), shared heads, skip 1 (`get_rpe_config(ratio=1.9, method="product", mode="ctx",
    shared_head=True, skip=1, rpe_on=on)`)."""
    table = dict(shared_head=True, mode="contextual", method=3, alpha=1.9, beta=3.8, gamma=15.2, num_buckets=50)
    rpe = {f"rpe_{r}": (dict(table) if r in on else None) for r in "qkv"}
    return dict(config, qk_scale=None, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0, hybrid_backbone=None,
                norm_layer="LayerNorm(eps=1e-6)", rpe_config=rpe,
                rpe_config_args=dict(ratio=1.9, method="product", mode="ctx", shared_head=True, skip=1, rpe_on=on),
                rpe_method_ids=dict(EUCLIDEAN=0, QUANT=1, PRODUCT=3, CROSS=4))
