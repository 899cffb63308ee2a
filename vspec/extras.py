"""Which extra installs a module (pyproject.toml's optional-dependencies; a test keeps the two equal), and the one
line a command prints when a module of an extra is missing. Torch-free."""

# top-level module -> the extra that installs it
EXTRAS = {"timm": "train", "torchvision": "train", "sklearn": "train", "matplotlib": "train",
          "transformers": "text", "tokenizers": "text",
          "onnx": "export", "onnxscript": "export", "onnxruntime": "export",
          "mkdocs": "docs"}


def missing_extra(e: BaseException) -> str | None:
    """"needs torchvision (the 'train' extra): pip install 'vspec[train]'" where `e` is the ImportError of a module an
    extra installs, else None (then it is no missing extra: a broken install, reported as it is)."""
    name = (getattr(e, "name", None) or "").split(".")[0] if isinstance(e, ImportError) else ""
    extra = EXTRAS.get(name)
    return None if extra is None else f"needs {name} (the {extra!r} extra): pip install 'vspec[{extra}]'"
