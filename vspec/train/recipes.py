"""Named training recipes (docs/training.md, Recipes: what each paper trained with): the `Recipe` class, vspec's own
(`GENERIC`: DeiT's, the small-data and GLUE ones) and `RECIPES`, every recipe by name, the families' included (each
paper's in its family's `paper.py`). Every field is a flag of
`vspec train` (tools/train.py) that overrides it, its help in the field's metadata (vspec/cli/fields.py).

`lr` is the peak learning rate at `batch_size`; another global batch size scales it linearly
(DeiT's rule), unless --lr is given.
"""

from collections.abc import Iterator, Mapping

import attrs

from ..spec import families
from .validators import ConfigError, Is, OneOf, floats, ints

MAX_EPOCHS = 100_000  # --epochs and --warmup-epochs at most (a typo of many digits would train until killed)
_F = attrs.field
_SHARE, _NONNEGATIVE = floats(0, 1, open_high=True), floats(0)


@attrs.frozen
class Recipe:
    """The hyper-parameters of a run; each field is checked when the recipe is made (`ConfigError`, one line naming
    the field), from Python as from the command line."""

    epochs: int = _F(default=300, validator=ints(1, MAX_EPOCHS), metadata={"help": "training epochs"})
    batch_size: int = _F(default=1024, validator=ints(1), metadata={
        "help": "global batch (all processes and accumulation steps); rescales the recipe's lr linearly unless --lr "
                "is given"})
    lr: float = _F(default=1e-3, validator=floats(0, open_low=True), metadata={"help": "peak learning rate"})
    weight_decay: float = _F(default=0.05, validator=_NONNEGATIVE, metadata={"help": "AdamW's weight decay"})
    warmup_epochs: int = _F(default=5, validator=ints(0, MAX_EPOCHS), metadata={"help": "epochs of linear warmup"})
    warmup_lr: float = _F(default=1e-6, validator=_NONNEGATIVE, metadata={"help": "the lr warmup starts from"})
    min_lr: float = _F(default=1e-5, validator=_NONNEGATIVE, metadata={"help": "the lr the schedule ends at"})
    auto_augment: str | None = _F(default="rand-m9-mstd0.5-inc1", validator=Is((str,), optional=True), metadata={
        "metavar": "POLICY", "off": "none", "help": "timm policy, e.g. rand-m9-mstd0.5-inc1, or none"})
    re_prob: float = _F(default=0.25, validator=floats(0, 1), metadata={"help": "random-erasing probability"})
    random_resized_crop: bool = _F(default=True, validator=Is((bool,)), metadata={
        "help": "timm's training transform (random resized crops, flips) even with no --auto-augment or --re-prob, "
                "validated at crop ratio 0.875; --no-random-resized-crop: plain resizes, ratio 1"})
    mixup: float = _F(default=0.8, validator=_NONNEGATIVE, metadata={"help": "mixup alpha (0: off)"})
    cutmix: float = _F(default=1.0, validator=_NONNEGATIVE, metadata={"help": "cutmix alpha (0: off)"})
    smoothing: float = _F(default=0.1, validator=_SHARE, metadata={"help": "label smoothing"})
    drop_path: float = _F(default=0.1, validator=_SHARE, metadata={
        "help": "stochastic depth (applied when the spec sets none)"})
    ema_decay: float | None = _F(default=0.99996, validator=floats(0, 1, open_high=True, optional=True), metadata={
        "off": 0.0, "help": "EMA of weights (0: off)"})
    clip_grad: float | None = _F(default=None, validator=floats(0, optional=True), metadata={
        "off": 0.0, "help": "gradient-norm clipping (0: off)"})
    schedule: str = _F(default="cosine", validator=OneOf(("cosine", "linear")), metadata={
        "help": "the lr's decay after warmup: cosine, or linear to --min-lr"})
    warmup_frac: float = _F(default=0.0, validator=_SHARE, metadata={
        "help": "warmup as a share of all steps (0: --warmup-epochs)"})
    released_alignment: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "token labels: pool each crop's targets as the release did, from the transposed box (its bug, for "
                "matching the published training); default: the crop's own region"})
    mix_token: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "MixToken (LV-ViT; Refiner's released training): a box of the token grid swapped between images in "
                "training; needs the dense auxiliary head (the spec's DenseAux.mix_token turns it on too)"})
    cos_reg_component: int = _F(default=0, validator=ints(0, 10_000), metadata={
        "metavar": "N", "help": "Refiner's cos_reg: add 0.1 x the mean cosine similarity of the attention maps of "
                                "blocks i, i + 1 for i < N (released yamls: 12; needs N + 1 refiner blocks; 0: off)"})
    annealing_weight: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "the dense head's loss weight follows the lr: x (lr at the epoch's start) / peak lr (the released "
                "--annealing-weight)"})
    dense_avg_pool: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "the dense head trained on the mean of its token logits against the image's target (the released "
                "RelabelPooledCrossEntropy, label_size 1) rather than token by token; not with --token-labels"})
    drop_path_by_depth: bool = _F(default=False, validator=Is((bool,)), metadata={
        "help": "scale --drop-path by the spec's blocks / 12 (Refiner's advanced recipe, Table 8: 0.1 x #blocks / 12)"})

# vspec's own recipes; the papers' are their families' (`RECIPES` in vspec/models/<family>/paper.py)
GENERIC: dict[str, Recipe] = {
    # the ImageNet DeiT recipe used by SoT, Refiner and DHVT-ImageNet (SoT: lr 1e-3, wd 0.03 at batch 1024)
    "deit": Recipe(),
    # plain AdamW + cosine, no augmentation or regularisation: small data, smoke tests, the demo
    "none": Recipe(epochs=30, batch_size=64, warmup_epochs=2, auto_augment=None, re_prob=0.0,
                   random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0, drop_path=0.0, ema_decay=None),
    # `none` cut to 4 epochs at 4x the lr, warmup 1: `vspec compare`'s default (four small specs x 3 seeds on mnist5k
    # within minutes on a CPU; in 4 epochs the plain ViT underfits at lower rates)
    "compare": Recipe(epochs=4, batch_size=64, lr=4e-3, warmup_epochs=1, auto_augment=None, re_prob=0.0,
                      random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0, drop_path=0.0, ema_decay=None),
    # fine-tuning a language body (BERT's GLUE recipe, SoT supplement Table S-4): AdamW lr 2e-5, batch 32, linear
    # warmup over 10 % of the steps then linear decay to 0, 3 epochs, no augmentation or regularisation
    "glue": Recipe(epochs=3, batch_size=32, lr=2e-5, weight_decay=0.01, warmup_epochs=0, warmup_lr=0.0, min_lr=0.0,
                   auto_augment=None, re_prob=0.0, random_resized_crop=False, mixup=0.0, cutmix=0.0, smoothing=0.0,
                   drop_path=0.0, ema_decay=None, schedule="linear", warmup_frac=0.1),
}


class Recipes(Mapping):
    """Every named recipe (`RECIPES`): DeiT's, then the families' (the `RECIPES` of each family package's torch-free
    `paper.py`, vspec.spec.families; read again when the families change), then vspec's small-data ones (none,
    compare, glue). A family naming a recipe vspec has is an error. Read-only."""

    def _table(self) -> dict[str, Recipe]:
        papers = families.paper_tables("RECIPES")
        clash = next((name for name in papers if name in GENERIC), None)
        if clash is not None:
            raise ImportError(f"a family's recipe {clash!r} is one of vspec's own already")
        return {"deit": GENERIC["deit"], **papers, **GENERIC}

    def __getitem__(self, name: str) -> Recipe:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"RECIPES({self._table()!r})"


RECIPES = Recipes()

FIELDS = tuple(f.name for f in attrs.fields(Recipe))


def training_spec(recipe: Recipe, spec):
    """The spec as the recipe trains it: its stochastic depth (`drop_path_rate`, when the spec sets none), MixToken
    on its dense head (`mix_token`) and the attention maps its training forward returns (`cos_reg_component`)."""
    if spec.drop_path == 0.0 and recipe.drop_path > 0:
        spec = attrs.evolve(spec, drop_path=drop_path_rate(recipe, spec))
    if recipe.mix_token and not spec.head.mixes_tokens:
        if not any(o.target == "tokens" for o in spec.head.outputs()):
            raise ConfigError("mix_token", f"MixToken mixes the tokens the dense auxiliary head scores; the spec's "
                                           f"{spec.head.kind} head has none (--no-mix-token trains without)")
        spec = attrs.evolve(spec, head=attrs.evolve(spec.head, dense=attrs.evolve(spec.head.dense, mix_token=True)))
    if recipe.cos_reg_component and not spec.attention_maps:
        spec = attrs.evolve(spec, attention_maps=True)  # a body whose blocks hand no maps on: SpecError
    return spec


def drop_path_rate(recipe: Recipe, spec) -> float:
    """The stochastic-depth rate a spec that sets none trains with: the recipe's, times the spec's blocks / 12 with
    `drop_path_by_depth` (Refiner's Table 8, advanced: 0.1 x #blocks / 12)."""
    rate = recipe.drop_path * (spec.depth / 12 if recipe.drop_path_by_depth else 1.0)
    if rate >= 1:
        raise ConfigError("drop_path", f"{recipe.drop_path} x {spec.depth} blocks / 12 = {rate:g} is not below 1")
    return rate


def resolve(name: str, **overrides) -> Recipe:
    """The named recipe with the given (non-None) fields replaced; the lr is scaled to the batch size
    when only the batch size changes."""
    if name not in RECIPES:
        raise ConfigError("recipe", f"unknown {name!r}; known: {', '.join(RECIPES)}")
    base = RECIPES[name]
    given = {k: v for k, v in overrides.items() if v is not None}
    if "batch_size" in given and "lr" not in given:
        given["lr"] = base.lr * given["batch_size"] / base.batch_size
    return attrs.evolve(base, **given)
