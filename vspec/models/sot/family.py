"""SoT's table entries: the module of each of its kinds (`vspec.compiler`) and the converters of the released
code (`vspec.convert.from_official`), named by dotted path: reading the table imports no conversion."""

import math

from . import modules, spec

__all__ = ["CONVERTERS", "FVCORE_HANDLES", "MODULES"]

MODULES = {
    spec.SoTEmbed: modules.SoTEmbed,
    spec.SecondOrderHead: modules.SecondOrderHead,
    spec.GAPPool: modules.GAPPool,
    spec.GCP: modules.GCP,
    spec.MGCrP: modules.MGCrP,
    spec.SvPN: modules.SvPN,
    spec.EPN: modules.EPN,
    spec.LearnableScale: modules.LearnableScale,
    spec.ReprLayerNorm: modules.ReprLayerNorm,
    spec.NoNorm: modules.NoNorm,
}
CONVERTERS = {"sot": "vspec.models.sot.convert:SOT",
              "sot_text": "vspec.models.sot.convert_text:from_official_sot_text"}


def _svpn_exact(inputs: list, outputs: list) -> int:
    """The exact svPN (ops.svpn_exact, an autograd Function fvcore sees as one op): the SVD counts 0, as fvcore's
    linalg_svd; U f(S) V^T is counted. `inputs`: the op's values in the traced graph (fvcore's handle contract)."""
    *batch, m, n = inputs[0].type().sizes()
    return math.prod(batch) * m * min(m, n) * n


FVCORE_HANDLES = {"prim::PythonOp._SvPN": _svpn_exact}
