"""Weights: where a model's weights are kept and how they are read, checked, moved and fetched.

- `checkpoint`: `.pt` checkpoint files that carry their spec (`save`, `read_checkpoint`, the checks every reader
  runs, `CheckpointError`);
- `folder`: model folders, config.json + model.safetensors (`save_pretrained`, `from_pretrained`);
- `loading`: `load` and `load_checkpoint`, whichever of the two holds a model;
- `checksum`: the checksums both formats carry;
- `resample`: a checkpoint's weights at another image size;
- `published`: the published-weights catalogue (a preset's `WEIGHTS`: `create_model(name, pretrained=True)`);
- `converted`: published weights converted into vspec's cache, and their `pretrained_cfg`;
- `cache`: where the download caches are (Hugging Face's, torch hub's, vspec's) and the checks of what they hold;
- `download`: fetching published weights into those caches and verifying their digests.

The public entry points stay at the top: `vspec.load`, `vspec.save`, `vspec.save_pretrained`,
`vspec.from_pretrained`, `vspec.create_model`. Importing this package imports no torch; its modules do.
"""

__all__ = []
