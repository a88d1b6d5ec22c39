"""Coding exercise apply-rotary (chapter 5, "Position beyond sinusoids").

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
    raise NotImplementedError
