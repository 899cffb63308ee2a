"""The language bodies' table entries: the module of each of their kinds (`vspec.compiler`). Their weights
convert from Hugging Face (`vspec.convert.from_hf`)."""

from . import modules, spec

MODULES = {
    spec.TokenEmbed: modules.TokenEmbed,
    spec.FirstTokenHead: modules.FirstTokenHead,
    spec.LastTokenHead: modules.LastTokenHead,
}
