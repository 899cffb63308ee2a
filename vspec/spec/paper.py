"""What a paper declares beside its kinds, torch-free: the tables of a family's `paper.py` hold these records.
`Recipe`, the hyper-parameters of a run (`RECIPES`; `vspec train --recipe NAME`, which vspec/train/recipes.py
resolves and applies), and `Analysis`, a figure it plots (`ANALYSES`; `vspec analyze --what NAME`, which
vspec/analysis.py runs). Declarations only: nothing here trains or plots, so a paper imports no machinery."""

import attrs

from .validators import Is, OneOf, floats, ints

__all__ = ["Analysis", "MAX_EPOCHS", "Recipe"]
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


@attrs.frozen
class Analysis:
    """One figure a family's paper plots, as `vspec analyze --what NAME` draws it (its name is its key in the
    family's `ANALYSES`).

    Args:
        function: "package.module:name" of `function(model, inputs: Inputs) -> Figure`, imported when it runs; it
            raises `AnalysisError` where the figure does not apply to the model (skipped with a note under `--what
            all`), `InputError` for a flag that does not fit the model.
        output: the middle of its files' names, `PATH_STEM.<output>.png` and `.json`.
        help: what it draws, a sentence or more of `vspec analyze --help`.
        batch_size: images per batch without `--batch-size`; None: one image whatever `--batch-size` says.
        per_block: it reads `--blocks`, checked against the model's depth before any work.
    """

    function: str
    output: str
    help: str
    batch_size: int | None = 8
    per_block: bool = False
