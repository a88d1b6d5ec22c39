"""Rotary position embeddings: rotate queries and keys by their position (Su
et al., 2021, Sec. 3.2-3.4).

Shapes: ``L`` sequence length, ``D`` the width of the rotated vectors (a
head's width ``head_dim`` when applied to queries and keys); ``...`` any
leading dimensions (batch, heads)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tinyformer.models.positional.scaling import (
    RopeScaling,
    rotary_frequencies,
)
from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.models.positional.sinusoidal import check_base
from tinyformer.tools.checks import check_floating_tensor

__all__ = ["ROTARY", "apply_rotary", "rotary_angles"]


def rotary_angles(
    positions: Tensor,
    head_dim: int,
    *,
    base: float = 10000.0,
    scaling: RopeScaling | None = None,
    seq_len: int | None = None,
) -> Tensor:
    """Angle ``pos * base^(-2i/D)`` of pair ``i`` at each position, in
    radians, float64 (Su et al., 2024, Eq. 15).

    The speeds ``base^(-2i/D)`` are those of the sinusoidal table of width
    ``D`` (Vaswani et al., 2017, Sec. 3.5): pair ``i`` of a rotated vector
    turns exactly as pair ``i`` of that table does. A ``scaling`` rule
    changes the speeds (:func:`~tinyformer.models.positional.rotary_frequencies`).

    Args:
        positions: integer tensor of positions (tokens), any shape ``P``.
        head_dim: width D of the vectors to rotate, a positive even int.
        base: wavelength constant, > 1.
        scaling: a context-extension rule, or None.
        seq_len: the current length in tokens, for ``"dynamic"`` scaling;
            None means the largest position + 1.

    Returns:
        float64 tensor of shape ``(*P, D / 2)``.

    Raises:
        TypeError: if ``positions`` is not an integer tensor, ``head_dim``
            not an int or ``base`` not a number.
        ValueError: if ``head_dim`` is odd or < 2, or ``base <= 1``, naming
            the value.
    """
    if isinstance(head_dim, bool) or not isinstance(head_dim, int):
        raise TypeError(
            f"head_dim must be an int, got {type(head_dim).__name__} {head_dim!r}"
        )
    if head_dim < 2 or head_dim % 2:
        raise ValueError(
            f"head_dim={head_dim} must be a positive even number: rotary embeddings rotate pairs of features"
        )
    base = check_base(base)
    if (
        not isinstance(positions, Tensor)
        or positions.is_floating_point()
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        kind = (
            positions.dtype
            if isinstance(positions, Tensor)
            else type(positions).__name__
        )
        raise TypeError(f"positions must be an integer Tensor, got {kind}")
    if (
        scaling is not None
        and getattr(scaling, "rope_type", None) == "dynamic"
        and seq_len is None
        and positions.numel()
    ):
        seq_len = int(positions.max()) + 1
    inv_freq = rotary_frequencies(
        head_dim, base=base, scaling=scaling, seq_len=seq_len
    ).to(positions.device)  # (D/2,)
    # (*P, D/2), radians
    return positions.to(torch.float64).unsqueeze(-1) * inv_freq


def apply_rotary(
    x: Tensor,
    *,
    positions: Tensor | None = None,
    base: float = 10000.0,
    interleaved: bool = True,
    scaling: RopeScaling | None = None,
    seq_len: int | None = None,
) -> Tensor:
    """Rotate each pair of features of ``x`` by the angle
    ``pos * base^(-2i/D)`` (Su et al., 2024, Sec. 3.4, Eq. 34).

    Pair ``i`` at position ``pos`` is multiplied by the 2x2 rotation
    ``[[cos t, -sin t], [sin t, cos t]]`` with ``t = pos * base^(-2i/D)``
    radians. Applied to a query at position ``m`` and a key at position
    ``n``, it turns their dot product into ``q^T R(n - m) k``: a function of
    the offset ``n - m`` alone, whatever ``m`` (Su et al., 2024, Eq. 16).
    Two conventions for which features form pair ``i`` exist:

    * ``interleaved=True``: features ``(2i, 2i + 1)``, as in Su et al.
      (2021) and the sinusoidal table;
    * ``interleaved=False``: features ``(i, i + D/2)``, the "rotate half"
      layout of GPT-NeoX and of Hugging Face's Llama (Meta's reference
      code pairs neighbours).

    They compute the same thing up to a fixed permutation of the features
    (the one that moves feature ``2i`` to ``i`` and ``2i + 1`` to
    ``i + D/2``); a checkpoint trained in one layout gives wrong results in
    the other. The angles are computed in float64 and the result is cast to
    ``x``'s dtype at the end.

    Args:
        x: ``(..., L, D)`` floating tensor, D even.
        positions: integer tensor broadcastable to ``(..., L)``, the
            position of each row (tokens); defaults to ``0, 1, ..., L - 1``.
        base: wavelength constant, > 1.
        interleaved: the pairing of features, see above.
        scaling: a context-extension rule
            (:class:`~tinyformer.models.positional.RopeScaling`), or None;
            YaRN's attention factor multiplies the result.
        seq_len: the current length, for ``"dynamic"`` scaling; None means
            the largest position + 1.

    Returns:
        Tensor of ``x``'s shape and dtype; each pair keeps its Euclidean
        norm.

    Raises:
        TypeError: if ``x`` is not a floating tensor, ``positions`` not an
            integer tensor or ``base`` not a number.
        ValueError: if ``x`` has fewer than 2 dimensions, ``D`` is odd,
            ``positions`` does not broadcast to ``(..., L)`` or
            ``base <= 1``, naming the values.
    """
    check_floating_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(
            f"x must have shape (..., L, D), got {tuple(x.shape)}"
        )
    rows, head_dim = x.shape[-2:]
    if head_dim % 2:
        raise ValueError(
            f"the last size of x, D={head_dim}, must be even: rotary embeddings rotate pairs of features"
        )
    if positions is None:
        positions = torch.arange(rows, device=x.device)  # (L,)
    # (*P, D/2), float64
    angles = rotary_angles(
        positions, head_dim, base=base, scaling=scaling, seq_len=seq_len
    )
    try:
        shape = torch.broadcast_shapes(angles.shape[:-1], x.shape[:-1])
    except RuntimeError:
        shape = None
    if shape != x.shape[:-1]:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast to (..., L)={tuple(x.shape[:-1])}"
        )
    cos, sin = angles.cos(), angles.sin()  # (..., L, D/2)
    if scaling is not None and scaling.attention_scale != 1.0:
        # YaRN: queries and keys both scaled, so the scores by its square
        cos, sin = (
            cos * scaling.attention_scale,
            sin * scaling.attention_scale,
        )
    x64 = x.to(torch.float64)
    if interleaved:
        # (..., L, D/2): features 2i and 2i+1
        first, second = x64[..., 0::2], x64[..., 1::2]
    else:
        # features i and i + D/2
        first, second = x64[..., : head_dim // 2], x64[..., head_dim // 2 :]
    rotated_first = first * cos - second * sin
    rotated_second = first * sin + second * cos
    if interleaved:
        # (..., L, D), pairs interleaved
        out = torch.stack((rotated_first, rotated_second), dim=-1).flatten(
            -2
        )
    else:
        # (..., L, D), halves side by side
        out = torch.cat((rotated_first, rotated_second), dim=-1)
    return out.to(x.dtype)


class _RotaryScheme(PositionalScheme):
    name = "rotary"
    description = (
        "queries and keys rotated by their positions (Su et al., 2024)"
    )
    rotary = True

    def check(self, config: Any, *, causal: bool) -> None:
        if config.head_dim % 2:
            raise ValueError(
                f"positional='rotary' needs an even head_dim, got d_model={config.d_model}, "
                f"num_heads={config.num_heads}"
            )

    def rotate(
        self, q: Tensor, k: Tensor, positions: Tensor, config: Any
    ) -> tuple[Tensor, Tensor]:
        # dynamic scaling takes this pass's length, max position + 1
        options = {
            "positions": positions,
            "base": config.base,
            "interleaved": getattr(config, "rotary_interleaved", False),
            "scaling": getattr(config, "rope_scaling", None),
            "seq_len": int(positions.max()) + 1,
        }
        return apply_rotary(q, **options), apply_rotary(k, **options)


#: Rotary embeddings, the scheme ``"rotary"``.
ROTARY = _RotaryScheme()
