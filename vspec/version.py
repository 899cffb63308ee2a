"""The package's version: pyproject.toml reads it; checkpoints and model folders record it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
