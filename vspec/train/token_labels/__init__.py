"""Token labeling, Refiner's "advanced recipe" (its Table 8, taken from LV-ViT): a teacher's dense label map for
every training image, trained on token by token (`vspec train --token-labels`, `vspec label`). One idea, four jobs:
`maps.py` (the label maps: their names, their files, the per-token targets built from them), `dataset.py` (the
training images read with their maps, augmented together; the label folder checked against the data set), `mix.py`
(mixup / cutmix of a batch and its targets) and `writer.py` (`vspec label`'s maps from any classifier)."""

from ..._moved import moved as _moved

__all__ = []


def __getattr__(name: str):  # the names of the module this package was (vspec/_moved.py)
    return _moved(__name__, name)
