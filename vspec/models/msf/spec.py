"""MSF (Kobayashi, "Mean-shift feature transformer"): mean-shift attention, Eq. 12 and its variants.

The projection roles, their tying (Tables 1-2) and grouping (Sec. 2.3, Table 4) are a `Projections`
value (vit.py), which the generic `MHSA` takes too.
"""

from typing import ClassVar, Literal

from attrs import field, frozen

from ...spec.errors import SpecError, check
from ...spec.layout import Tokens
from ...spec.swin import WindowMHSA
from ...spec.vit import PROJECTION_ROLES, UNPROBED_ROLES, MultiHead, Projections

__all__ = ["MeanShiftAttention", "WindowMeanShiftAttention"]

FORMS = ("eq12", "eq14", "gauss_orig")


class MeanShiftForm:
    """What the mean-shift kinds share beside their fields `form` and `projections`: the roles a form
    uses, and Eq. 14's own P~."""

    __slots__ = ()

    @property
    def roles(self) -> str:
        """The roles the form uses (gauss_orig has no probe)."""
        return UNPROBED_ROLES if self.form == "gauss_orig" else PROJECTION_ROLES

    def probe_width(self, dim: int) -> int | None:
        """dim for eq14 (its own dim x dim P~), else None."""
        return dim if self.form == "eq14" else None  # Eq. 14's P~ is dim x dim

    def check(self, tokens: Tokens) -> None:
        """The base checks, then eq14's P~ as a probe of its own."""
        super().check(tokens)
        letters = self.projections.letters(self.roles)
        if self.form == "eq14" and (letters[3] != "P" or letters.count("P") > 1):
            raise SpecError("projections.roles", f"eq14's P~ is a dim x dim matrix of its own: PROBE must be 'P' "
                                                 f"and used by no other role, got {letters!r}")


@frozen
class MeanShiftAttention(MeanShiftForm, MultiHead):
    """Mean-shift attention over all tokens. Per head h, with q = Q_h^T x, k_i = K_h^T x_i, v_i = V_h^T x_i:
    a_i = softmax_i((q.k_i - 1/2 |k_i|^2) * scale), the Gaussian kernel softmax_i(-1/2 |k_i - q|^2 * scale)
    (the |q|^2 term is one per query; `scale` defaults to head_dim ** -0.5, as the released code does).

    `form`: eq12 (MSF, Eq. 12): sum_h W_h [sum_i a_i v_i - P_h^T x], roles QKVPW |
    eq14 (Eq. 14, the residual form): sum_h W_h sum_i a_i v_i - P~ x with one dim x dim matrix P~ (its
    PROBE letter names P~, which no other role may share) | gauss_orig (Table 3: the Gaussian kernel in
    the original attention, no probe): sum_h W_h sum_i a_i v_i, roles QKVW.

    `projections` ties and groups the roles (None: every role its own matrix, dense). `qkv_bias` gives
    the input roles biases, `proj_bias` the output; the other fields are MHSA's (MultiHead)."""

    kind: ClassVar[str] = "mean_shift"
    any_grid: ClassVar[bool] = True
    attends_all: ClassVar[bool] = True
    masks: ClassVar[bool] = True  # through SDPA's mask on the widened q', k' (ops.gaussian_attention)
    causal: ClassVar[bool] = True
    form: Literal["eq12", "eq14", "gauss_orig"] = field(default="eq12", validator=check(str, choices=FORMS))
    projections: Projections = field(default=Projections(), validator=check(Projections))



@frozen
class WindowMeanShiftAttention(MeanShiftForm, WindowMHSA):
    """Mean-shift attention within Swin's (shifted) windows: MeanShiftAttention's `form` and
    `projections`, WindowMHSA's windows, shift and relative position bias B, added to the Gaussian
    scores: softmax_i((q.k_i - 1/2 |k_i|^2) * scale + B_i). The released MSF code has no Swin; this is
    vspec's construction for the paper's Swin rows (Table 6)."""

    kind: ClassVar[str] = "window_mean_shift"
    form: Literal["eq12", "eq14", "gauss_orig"] = field(default="eq12", validator=check(str, choices=FORMS))
    projections: Projections = field(default=Projections(), validator=check(Projections))

