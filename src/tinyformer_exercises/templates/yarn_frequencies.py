"""Coding exercise yarn-frequencies (chapter 7, "Long context: length
generalisation in a decoder, stretched rotary, windows and sinks").

Objective assessed: compute YaRN's blend of kept and interpolated rotary
speeds, the ramp over the pair index.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises yarn-frequencies yarn_frequencies.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- yarn-frequencies path/to/yarn_frequencies.py

Use only PyTorch and math; not ``tinyformer.models.positional``."""

import math

import torch
from torch import Tensor


def yarn_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_max_len: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> Tensor:
    """YaRN's rotary speeds (Peng et al., 2023, Eq. 17-20, as its reference
    code and Hugging Face compute them), float64 ``(D / 2,)``.

    Pair ``i`` turns at ``theta_i = base^(-2i/D)`` radians per token. Over
    the trained context ``L = original_max_len`` it makes
    ``L theta_i / (2 pi)`` turns; the fast pairs turn many times and need
    no change, the slow ones turn less than once and are interpolated.

    1. The pair index that turns ``n`` times over ``L`` is
       ``d(n) = D ln(L / (2 pi n)) / (2 ln base)``.
    2. ``low = max(floor(d(beta_fast)), 0)`` and
       ``high = min(ceil(d(beta_slow)), D - 1)``; if they are equal, add
       0.001 to ``high``.
    3. The ramp ``r_i = clamp((i - low) / (high - low), 0, 1)``: 0 for the
       fast pairs, 1 for the slow ones, linear in between.
    4. The speed ``(1 - r_i) theta_i + r_i theta_i / s``, with ``s =
       factor``.

    Args:
        head_dim: the rotated width D, a positive even int.
        base: the wavelength constant, > 1.
        factor: the stretch s > 0.
        original_max_len: L, the trained context in tokens.
        beta_fast: pairs that turn more often than this are kept.
        beta_slow: pairs that turn fewer times than this are interpolated.

    Returns:
        float64 tensor of shape ``(D / 2,)``.
    """
    raise NotImplementedError
