"""Coding exercise position-from-encoding.

Objective assessed: read positions back from their sinusoidal encodings,
the slow pairs giving the range and the fast pairs the precision.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises position-from-encoding position_from_encoding.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- position-from-encoding path/to/position_from_encoding.py

Calling the library's ``position_from_encoding`` is refused by the checker:
read the positions yourself.
"""

import math

import torch
from torch import Tensor


def position_from_encoding(
    encoding: Tensor, *, base: float = 10000.0
) -> Tensor:
    """The positions whose sinusoidal encodings are the rows of ``encoding``.

    Each row is a row of the paper's interleaved table (chapter 2's
    ``sinusoidal_positional_encoding``): column ``2i`` holds
    ``sin(pos * w_i)`` and column ``2i + 1`` holds ``cos(pos * w_i)``, with
    ``w_i = base^(-2i/d_model)``, possibly with every entry moved by a small
    error (up to 0.02). The positions are whole numbers with
    ``0 <= pos < pi * base^((E-2)/E)``, half the slowest pair's wavelength.

    Args:
        encoding: ``(N, E)`` floating tensor, ``E`` even, >= 2.
        base: wavelength constant the table was made with, > 1.

    Returns:
        ``(N,)`` int64 tensor of positions.
    """
    # BEGIN SOLUTION
    d_model = encoding.shape[1]
    rows = encoding.to(torch.float64)
    # (N, E/2): pos * w_i, up to whole turns, in (-pi, pi]
    angle = torch.atan2(rows[:, 0::2], rows[:, 1::2])
    # (E/2,): w_i, radians per token, fastest first
    speed = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    # the slowest pair has not yet turned half a turn: no whole turns
    estimate = angle[:, -1] / speed[-1]  # (N,), tokens
    for i in range(d_model // 2 - 2, -1, -1):
        # whole turns of pair i that the estimate so far implies ...
        turns = torch.round(
            (estimate * speed[i] - angle[:, i]) / (2 * math.pi)
        )
        # ... plus pair i's own fraction of a turn, finer
        estimate = (angle[:, i] + 2 * math.pi * turns) / speed[i]
    return torch.round(estimate).to(torch.int64)  # (N,)
    # END SOLUTION
