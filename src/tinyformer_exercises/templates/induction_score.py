"""Coding exercise induction-score (chapter 9, "What attention learns:
induction heads").

Objective assessed: find an induction head from its attention weights on
repeated random tokens with the induction score.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises induction-score induction_score.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- induction-score path/to/induction_score.py

You may use torch (indexing, ``torch.arange``, ``Tensor.mean``, ...),
but not tinyformer's own function."""

import torch
from torch import Tensor


def induction_score(weights: Tensor, n: int) -> Tensor:
    """Each head's mean attention from position ``n + j`` to position
    ``j + 1``, over ``j = 1 .. n - 1`` and the batch, on rows
    ``[BOS, x_1 .. x_n, x_1 .. x_n]`` (Olsson et al., 2022).

    Position ``n + j`` holds the second ``x_j``; its first occurrence is
    at ``j``, and the token that followed it, ``x_{j+1}``, at ``j + 1``.

    Args:
        weights: ``(N, H, 2n + 1, 2n + 1)`` attention weights; row ``t``
            holds query ``t``'s weights over the keys.
        n: the tokens in one copy, >= 2.

    Returns:
        ``(H,)`` scores in [0, 1]: 1 for a perfect induction head.
    """
    raise NotImplementedError
