"""Reference solution of coding exercise online-softmax (chapter 8, "Attention
without the matrix: the online softmax and FlashAttention").

Objective assessed: compute a softmax with its maximum and
normaliser found in one pass over blocks of a row, a running
maximum and a running sum."""

import torch
from torch import Tensor


def online_softmax(scores: Tensor, block_size: int) -> Tensor:
    """softmax(scores) along the last dimension, in blocks."""
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
