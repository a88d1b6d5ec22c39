"""Reference solution of coding exercise tile-update (chapter 8, "Attention
without the matrix: the online softmax and FlashAttention").

Objective assessed: update a query block's running maximum, running
sum and unnormalised output with one tile of scores, as
FlashAttention's forward does."""

import torch
from torch import Tensor


def tile_update(
    running_max: Tensor,
    running_sum: Tensor,
    acc: Tensor,
    scores: Tensor,
    value: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """One tile's step of FlashAttention's forward."""
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    # -inf - (-inf) is NaN: subtract 0 where nothing is finite
    safe = new_max.masked_fill(new_max == float("-inf"), 0.0)
    probs = torch.exp(scores - safe[..., None])  # (..., Bq, Bk)
    correction = torch.exp(running_max - safe)  # <= 1
    new_sum = correction * running_sum + probs.sum(dim=-1)
    new_acc = correction[..., None] * acc + probs @ value
    return new_max, new_sum, new_acc
