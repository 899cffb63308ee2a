"""Named training recipes (docs/training.md, Recipes: what each paper trained with): vspec's own (`_GENERIC`: DeiT's,
the small-data and GLUE ones) and `RECIPES`, every recipe by name, the families' included (each paper's in its
family's `paper.py`), and what a run makes of one (`resolve`, `training_spec`). The record, `Recipe`, is a paper's
declaration (vspec/spec/paper.py). Every field is a flag of `vspec train` (tools/train.py) that overrides it, its
help in the field's metadata (vspec/cli/fields.py).

`lr` is the peak learning rate at `batch_size`; another global batch size scales it linearly
(DeiT's rule), unless --lr is given.
"""

from collections.abc import Iterator, Mapping

import attrs

from .._moved import moved as _moved
from ..spec import families
from ..spec.paper import Recipe
from .validators import ConfigError

__all__ = ["FIELDS", "RECIPES", "Recipes", "drop_path_rate", "resolve", "training_spec"]

# vspec's own recipes; the papers' are their families' (`RECIPES` in vspec/models/<family>/paper.py)
_GENERIC: dict[str, Recipe] = {
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
        clash = next((name for name in papers if name in _GENERIC), None)
        if clash is not None:
            raise ImportError(f"a family's recipe {clash!r} is one of vspec's own already")
        return {"deit": _GENERIC["deit"], **papers, **_GENERIC}

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
    on its dense head (`mix_token`) and the attention maps its training forward returns (`cos_reg_component`).

    Args:
        recipe: the run's Recipe.
        spec: the spec as given."""
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
    `drop_path_by_depth` (Refiner's Table 8, advanced: 0.1 x #blocks / 12).

    Args:
        recipe: the run's Recipe.
        spec: the spec trained."""
    rate = recipe.drop_path * (spec.depth / 12 if recipe.drop_path_by_depth else 1.0)
    if rate >= 1:
        raise ConfigError("drop_path", f"{recipe.drop_path} x {spec.depth} blocks / 12 = {rate:g} is not below 1")
    return rate


def resolve(name: str, **overrides) -> Recipe:
    """The named recipe with the given (non-None) fields replaced; the lr is scaled to the batch size
    when only the batch size changes.

    Args:
        name: a recipe of RECIPES.
        **overrides: Recipe fields to replace (None: keep the recipe's)."""
    if name not in RECIPES:
        raise ConfigError("recipe", f"unknown {name!r}; known: {', '.join(RECIPES)}")
    base = RECIPES[name]
    given = {k: v for k, v in overrides.items() if v is not None}
    if "batch_size" in given and "lr" not in given:
        given["lr"] = base.lr * given["batch_size"] / base.batch_size
    return attrs.evolve(base, **given)


def __getattr__(name: str):  # the previous release's names (vspec/_moved.py)
    return _moved(__name__, name)
