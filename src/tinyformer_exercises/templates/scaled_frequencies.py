"""Coding exercise scaled-frequencies (chapter 7, "Long context: length
generalisation in a decoder, stretched rotary, windows and sinks").

Objective assessed: compute the rotary speeds that position interpolation
and NTK-aware scaling give a model stretched past its trained context.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises scaled-frequencies scaled_frequencies.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- scaled-frequencies path/to/scaled_frequencies.py

Use only PyTorch; not ``tinyformer.models.positional``."""

import torch
from torch import Tensor


def scaled_frequencies(
    head_dim: int,
    base: float = 10000.0,
    rope_type: str | None = None,
    factor: float = 1.0,
) -> Tensor:
    """The speed ``theta_i`` of each rotated pair ``i = 0 .. D/2 - 1``, in
    radians per token, after stretching the context by ``factor`` s.

    * ``rope_type=None``: the trained speeds ``base^(-2i/D)``.
    * ``"linear"`` (position interpolation, Chen et al., 2023, Eq. 4):
      every speed divided by s, so that ``s`` times as many positions
      turn through the trained angles.
    * ``"ntk"`` (NTK-aware scaling; Peng et al., 2023, Sec. 3.1): the
      trained formula with the base ``base * s^(D / (D - 2))``, which keeps
      the fastest pair's speed and divides the slowest pair's by exactly
      s.

    Args:
        head_dim: the rotated width D, a positive even int.
        base: the wavelength constant, > 1.
        rope_type: None, ``"linear"`` or ``"ntk"``.
        factor: the stretch s > 0.

    Returns:
        float64 tensor of shape ``(D / 2,)``.
    """
    raise NotImplementedError
