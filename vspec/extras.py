"""Which extra installs a module (pyproject.toml's optional-dependencies; a test keeps the two equal), and the one
line a command or a function prints when a module of an extra is missing. Torch-free."""

from contextlib import contextmanager

__all__ = ["EXTRAS", "missing_extra", "needs"]
# top-level module -> the extra that installs it
EXTRAS = {"timm": "train", "torchvision": "train", "sklearn": "train", "scipy": "train", "matplotlib": "train",
          "transformers": "text", "tokenizers": "text", "accelerate": "text",
          "onnx": "export", "onnxscript": "export", "onnxruntime": "export",
          "mkdocs": "docs", "pygments": "docs", "webdataset": "shards", "datasets": "hf", "pyarrow": "hf"}


@contextmanager
def needs(what: str):
    """Around the imports of an extra's modules: a missing one is a ModuleNotFoundError whose one line says what
    needs it and which extra installs it (`what`: "create_model(features_only=True)", "vspec's training", ...).

    Args:
        what: what needs the extra, as the message says it.
    """
    try:
        yield
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        raise ModuleNotFoundError(f"{what} {line}", name=e.name) from None


def missing_extra(e: BaseException) -> str | None:
    """"needs torchvision (the 'train' extra): pip install 'vspec[train]'" where `e` is the ImportError of a module an
    extra installs, else None (then it is no missing extra: a broken install, reported as it is).

    Args:
        e: the exception raised by an import.
    """
    name = (getattr(e, "name", None) or "").split(".")[0] if isinstance(e, ImportError) else ""
    extra = EXTRAS.get(name)
    return None if extra is None else f"needs {name} (the {extra!r} extra): pip install 'vspec[{extra}]'"
