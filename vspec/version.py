"""The package's version: pyproject.toml reads it; checkpoints and model folders record it."""

__version__ = "0.1.0"
