"""Coding exercise tile-update (chapter 8, "Attention without the matrix: the
online softmax and FlashAttention").

Objective assessed: update a query block's running maximum, running sum
and unnormalised output with one tile of scores, as FlashAttention's
forward does.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises tile-update tile_update.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- tile-update path/to/tile_update.py

Use only PyTorch; not ``tinyformer.models.flash``."""

import torch
from torch import Tensor


def tile_update(
    running_max: Tensor,
    running_sum: Tensor,
    acc: Tensor,
    scores: Tensor,
    value: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """One tile's step of FlashAttention's forward for a block of query rows.

    Before the tile, for each row: ``running_max`` is the largest score
    seen so far (``-inf`` before the first tile), ``running_sum`` the sum
    of ``exp(s - running_max)`` over the keys seen so far, and ``acc`` the
    sum of ``exp(s - running_max) * v`` over them (the output before it is
    divided by the sum). After the last tile, ``acc / running_sum`` is
    attention's output.

    Args:
        running_max: ``(..., Bq)``.
        running_sum: ``(..., Bq)``.
        acc: ``(..., Bq, Dv)``.
        scores: ``(..., Bq, Bk)`` scaled, masked scores of this tile
            (``-inf`` where a pair may not attend).
        value: ``(..., Bk, Dv)`` the tile's values.

    Returns:
        ``(running_max, running_sum, acc)`` after the tile, the same
        shapes; a row that has seen only ``-inf`` keeps ``-inf``, 0 and 0.
    """
    raise NotImplementedError
