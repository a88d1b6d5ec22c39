"""Coding exercise apply-rotary.

Objective assessed: rotate queries and keys by their position, with the
interleaved and the split-half pairing.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises apply-rotary apply_rotary.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- apply-rotary path/to/apply_rotary.py
"""

import math

import torch
from torch import Tensor


def apply_rotary(
    x: Tensor,
    *,
    positions: Tensor | None = None,
    base: float = 10000.0,
    interleaved: bool = True,
) -> Tensor:
    """Rotate each pair of features of ``x`` by the angle
    ``pos * base^(-2i/D)`` (Su et al., 2024, Sec. 3.4, Eq. 34).

    Pair ``i`` at position ``pos`` is multiplied by the 2x2 rotation
    ``[[cos t, -sin t], [sin t, cos t]]`` with ``t = pos * base^(-2i/D)``
    radians: ``(a, b)`` becomes ``(a cos t - b sin t, a sin t + b cos t)``.
    Which features form pair ``i`` is a convention:

    * ``interleaved=True``: features ``(2i, 2i + 1)``, as in Su et al.
      (2024) and the sinusoidal table;
    * ``interleaved=False``: features ``(i, i + D/2)``, the "rotate half"
      layout of GPT-NeoX and Llama.

    Args:
        x: ``(..., L, D)`` floating tensor (float32 or float64), D even.
        positions: integer tensor broadcastable to ``(..., L)``, the
            position of each row (tokens); defaults to ``0, 1, ..., L - 1``.
        base: wavelength constant, > 1.
        interleaved: the pairing of features, see above.

    Returns:
        Tensor of ``x``'s shape and dtype; each pair keeps its Euclidean
        norm.
    """
    # BEGIN SOLUTION
    seq_len, head_dim = x.shape[-2:]
    if positions is None:
        positions = torch.arange(seq_len)  # (L,)
    # the even feature indices 2i
    pair = torch.arange(0, head_dim, 2, dtype=torch.float64)
    # (..., L, D/2), radians
    angle = positions.to(torch.float64).unsqueeze(-1) / base ** (
        pair / head_dim
    )
    cos, sin = angle.cos(), angle.sin()
    x64 = x.to(torch.float64)  # rotate in float64, return x's dtype
    if interleaved:
        # features 2i and 2i + 1
        first, second = x64[..., 0::2], x64[..., 1::2]
    else:
        # features i and i + D/2
        first, second = (
            x64[..., : head_dim // 2],
            x64[..., head_dim // 2 :],
        )
    rotated = (
        first * cos - second * sin,
        first * sin + second * cos,
    )
    if interleaved:
        # (..., L, D): back to 2i, 2i + 1
        return torch.stack(rotated, dim=-1).flatten(-2).to(x.dtype)
    # (..., L, D): the two halves side by side
    return torch.cat(rotated, dim=-1).to(x.dtype)
    # END SOLUTION
