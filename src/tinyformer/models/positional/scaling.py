"""Rotary context extension: the frequency rules that stretch a rotary
model trained on ``L_orig`` tokens to ``s`` times as many.

The rules, their sources and their formulas are listed under
:class:`~tinyformer.models.positional.RopeScaling`.

Shapes: ``D`` the rotated width (``head_dim``); frequencies are
``(D / 2,)``, in radians per token."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tinyformer.models.positional.sinusoidal import check_base
from tinyformer.tools.checks import check_int, check_number

__all__ = ["ROPE_SCALING_TYPES", "RopeScaling", "rotary_frequencies"]

#: The context-extension rules of :class:`RopeScaling`.
ROPE_SCALING_TYPES: tuple[str, ...] = (
    "linear",
    "ntk",
    "dynamic",
    "yarn",
    "llama3",
)


@dataclass(frozen=True)
class RopeScaling:
    """How rotary frequencies are stretched past the trained context.

    A rotary model turns pair ``i`` of a query or key by ``pos * theta_i``
    radians, ``theta_i = base^(-2i/D)`` (:func:`rotary_frequencies` without
    scaling). Past ``L_orig`` the slow pairs reach angles never seen in
    training. Each rule changes the ``theta_i``:

    * ``"linear"``, position interpolation (Chen et al., 2023, Eq. 4):
      ``theta_i / s``, so ``s * L_orig`` positions fill the trained range of
      angles.
    * ``"ntk"``, NTK-aware scaling (bloc97, 2023; Peng et al., 2023,
      Sec. 3.1): the base becomes ``base * s^(D / (D - 2))``; the fastest pair
      keeps its speed and the slowest is slowed by ``s``.
    * ``"dynamic"``, dynamic NTK (emozilla, 2023; Peng et al., 2023,
      Sec. 3.3): the same with ``s`` chosen from the current length ``L``; the
      base is ``base * (s L / L_orig - (s - 1))^(D / (D - 2))`` for
      ``L > L_orig`` and unchanged below.
    * ``"yarn"``, YaRN (Peng et al., 2023, Sec. 3.2-3.4): pairs that turn more
      than ``beta_fast`` times over ``L_orig`` keep their speed, pairs that
      turn less than ``beta_slow`` times are interpolated (``theta_i / s``),
      and a ramp linear in the pair index blends the two in between; the
      rotated queries and keys are also multiplied by the attention factor
      ``0.1 ln s + 1`` (so the scores by its square, the paper's
      ``1 / t``).
    * ``"llama3"``, Llama 3.1's rule (Dubey et al., 2024): wavelengths
      ``2 pi / theta_i`` shorter than ``L_orig / high_freq_factor`` are kept,
      longer than ``L_orig / low_freq_factor`` are divided by ``s``, and in
      between the frequency is blended smoothly.

    The formulas are those of Hugging Face ``transformers``'
    ``modeling_rope_utils`` (``rope_type`` ``"linear"``, ``"dynamic"``,
    ``"yarn"``, ``"llama3"``), computed here in float64; ``"ntk"`` is the static
    rule, which ``transformers`` does not name.

    Attributes:
        rope_type: ``"linear"``, ``"ntk"``, ``"dynamic"``, ``"yarn"`` or
            ``"llama3"``.
        factor: the stretch ``s`` > 0 (the new context is about
            ``s * original_max_len`` tokens); 1 changes nothing.
        original_max_len: ``L_orig``, the context the model was trained
            on, in tokens; needed by ``"dynamic"``, ``"yarn"`` and
            ``"llama3"``, ignored by ``"linear"`` and ``"ntk"``.
        beta_fast: YaRN: pairs turning more than this many times over
            ``L_orig`` are left alone (Peng et al.'s ``beta``, 32).
        beta_slow: YaRN: pairs turning fewer times are interpolated
            (Peng et al.'s ``alpha``, 1).
        attention_factor: YaRN: the factor on the rotated queries and
            keys; None means ``0.1 ln s + 1`` (1 for ``s <= 1``). Other
            rules use 1.
        truncate: YaRN: round the ramp's ends to whole pair indices, as
            the reference code does.
        low_freq_factor: Llama 3: wavelengths above
            ``L_orig / low_freq_factor`` are interpolated (1 in Llama
            3.1).
        high_freq_factor: Llama 3: wavelengths below
            ``L_orig / high_freq_factor`` are kept (4 in Llama 3.1).

    Raises:
        TypeError: if ``original_max_len`` is not an int or ``truncate``
            not a bool.
        ValueError: for an unknown ``rope_type``, a missing
            ``original_max_len``, or a number out of range, naming the
            field and its value.
    """

    rope_type: str
    factor: float
    original_max_len: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    truncate: bool = True
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_SCALING_TYPES:
            raise ValueError(
                f"rope_type={self.rope_type!r} must be one of {list(ROPE_SCALING_TYPES)}"
            )
        check_number("factor", self.factor, 0.0)
        for name in ("beta_fast", "beta_slow", "low_freq_factor"):
            check_number(name, getattr(self, name), 0.0)
        if self.attention_factor is not None:
            check_number("attention_factor", self.attention_factor, 0.0)
        if not isinstance(self.truncate, bool):
            raise TypeError(
                f"truncate must be a bool, got {self.truncate!r}"
            )
        check_number(
            "high_freq_factor",
            self.high_freq_factor,
            float(self.low_freq_factor),
        )
        if self.original_max_len is not None:
            check_int("original_max_len", self.original_max_len, minimum=1)
        elif self.rope_type in ("dynamic", "yarn", "llama3"):
            raise ValueError(
                f"rope_type={self.rope_type!r} needs original_max_len, the trained context in tokens"
            )

    @property
    def attention_scale(self) -> float:
        """The factor that multiplies the rotated queries and keys, YaRN's
        ``attention_factor`` (by default ``0.1 ln s + 1``), and 1 for the
        other rules."""
        if self.rope_type != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.factor <= 1:
            return 1.0
        return 0.1 * math.log(self.factor) + 1.0


def _yarn_ramp(scaling: RopeScaling, half: int, base: float) -> Tensor:
    """YaRN's blend per pair, ``(D/2,)`` float64: 0 keeps the original
    speed, 1 interpolates (Peng et al., 2023, Eq. 18-19, as in the
    reference code: linear in the pair index between the pairs that turn
    ``beta_fast`` and ``beta_slow`` times over ``L_orig``)."""
    dim, length = 2 * half, scaling.original_max_len

    def pair_turning(turns: float) -> float:
        # the pair index whose angle turns `turns` times over L_orig
        return (dim * math.log(length / (turns * 2 * math.pi))) / (
            2 * math.log(base)
        )

    low, high = (
        pair_turning(scaling.beta_fast),
        pair_turning(scaling.beta_slow),
    )
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as the reference code, against a zero width
    index = torch.arange(half, dtype=torch.float64)
    return ((index - low) / (high - low)).clamp(0.0, 1.0)


def rotary_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    seq_len: int | None = None,
) -> Tensor:
    """The speed ``theta_i`` of each rotated pair, in radians per token,
    float64 ``(D / 2,)``: ``base^(-2i/D)``, changed by ``scaling``.

    Args:
        head_dim: the rotated width D, a positive even int.
        base: wavelength constant, > 1.
        scaling: a :class:`RopeScaling`, or None for the trained speeds.
        seq_len: the current length in tokens (``"dynamic"`` only; None
            means ``original_max_len``).

    Returns:
        float64 tensor of shape ``(D / 2,)``.

    Raises:
        TypeError: if ``head_dim`` or ``seq_len`` is not an int, or
            ``scaling`` not a :class:`RopeScaling`.
        ValueError: if ``head_dim`` is odd or < 2, ``base <= 1`` or
            ``seq_len < 1``.
    """
    check_int("head_dim", head_dim, minimum=2)
    if head_dim % 2:
        raise ValueError(
            f"head_dim={head_dim} must be a positive even number: rotary embeddings rotate pairs of features"
        )
    base = check_base(base)
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise TypeError(
            f"scaling must be a RopeScaling or None, got {type(scaling).__name__}"
        )
    if seq_len is not None:
        check_int("seq_len", seq_len, minimum=1)
    half = head_dim // 2
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    kind = None if scaling is None else scaling.rope_type
    if kind == "ntk":
        base = base * scaling.factor ** (head_dim / (head_dim - 2))
    elif kind == "dynamic":
        original = scaling.original_max_len
        length = max(original if seq_len is None else seq_len, original)
        stretch = scaling.factor * length / original - (scaling.factor - 1)
        base = base * stretch ** (head_dim / (head_dim - 2))
    theta = 1.0 / base**exponent  # (D/2,)
    if kind == "linear":
        return theta / scaling.factor
    if kind == "yarn":
        ramp = _yarn_ramp(scaling, half, base)  # 0 keep .. 1 interpolate
        return theta * (1 - ramp) + theta / scaling.factor * ramp
    if kind == "llama3":
        original = scaling.original_max_len
        low, high = scaling.low_freq_factor, scaling.high_freq_factor
        wavelength = 2 * math.pi / theta
        scaled = torch.where(
            wavelength > original / low, theta / scaling.factor, theta
        )
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = (wavelength >= original / high) & (
            wavelength <= original / low
        )
        return torch.where(medium, blended, scaled)
    return theta
