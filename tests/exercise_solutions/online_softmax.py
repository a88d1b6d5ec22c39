"""Coding exercise online-softmax.

Objective assessed: compute a softmax with its maximum and normaliser
found in one pass over blocks of a row, a running maximum and a running
sum.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises online-softmax online_softmax.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- online-softmax path/to/online_softmax.py

Use only PyTorch; not ``tinyformer.models.flash``."""

import torch
from torch import Tensor


def online_softmax(scores: Tensor, block_size: int) -> Tensor:
    """softmax(scores) along the last dimension, reading the row in blocks
    of ``block_size`` entries (the last block may be shorter) and keeping
    only a running maximum ``m`` and a running sum ``l`` of ``exp(x - m)``
    per row; a second pass divides ``exp(x - m)`` by ``l``. No max, sum or
    softmax may cover more than ``block_size`` entries of a row at once: the
    checker watches how the row is read, not only the result.

    A row of ``-inf`` (a query that may see no key) gives zeros, not NaN.

    Args:
        scores: ``(..., S)`` float tensor.
        block_size: entries per block, >= 1.

    Returns:
        ``(..., S)`` tensor whose rows sum to 1 (0 for rows of ``-inf``).
    """
    # BEGIN SOLUTION
    shape = scores.shape[:-1]
    m = scores.new_full(shape, float("-inf"))  # running maximum
    norm = scores.new_zeros(shape)  # running sum of exp(x - m)
    for start in range(0, scores.size(-1), block_size):
        block = scores[..., start : start + block_size]
        new_m = torch.maximum(m, block.amax(dim=-1))
        # -inf - (-inf) is NaN: subtract 0 where nothing is finite
        safe = new_m.masked_fill(new_m == float("-inf"), 0.0)
        norm = norm * torch.exp(m - safe)
        norm = norm + torch.exp(block - safe[..., None]).sum(dim=-1)
        m = new_m
    safe = m.masked_fill(m == float("-inf"), 0.0)[..., None]
    norm = norm.clamp_min(1e-300)[
        ..., None
    ]  # rows of -inf: 0 / tiny
    return torch.exp(scores - safe) / norm
    # END SOLUTION
