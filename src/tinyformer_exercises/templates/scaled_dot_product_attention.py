"""Coding exercise scaled-dot-product-attention (chapter 1, "Attention from
first principles").

Objective assessed: write scaled dot-product attention in matrix form, with
boolean, additive and causal masks.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises scaled-dot-product-attention scaled_dot_product_attention.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- scaled-dot-product-attention path/to/scaled_dot_product_attention.py

You may use torch (``torch.softmax``, ``Tensor.masked_fill``,
``Tensor.tril``, ...), but not
``torch.nn.functional.scaled_dot_product_attention`` or tinyformer's own
function."""

import math

import torch
from torch import Tensor


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, with its weights
    (Vaswani et al., 2017, Sec. 3.2.1, Eq. 1).

    Args:
        query: ``(..., L, E)`` queries.
        key: ``(..., S, E)`` keys; leading dimensions broadcast with
            ``query``'s.
        value: ``(..., S, Ev)`` values.
        attn_mask: ``None``; a bool tensor broadcastable to ``(..., L, S)``
            with **True = may attend**; or a tensor of ``query``'s dtype
            added to the scores (``-inf`` blocks).
        is_causal: if True, query i may also attend only to keys j <= i
            (top-left aligned when L != S), combined with ``attn_mask``.
        dropout_p: probability of zeroing a weight (the checker always
            passes 0; you may ignore it).

    Returns:
        ``(output, weights)``: ``(..., L, Ev)`` and ``(..., L, S)``. A query
        row that may attend to nothing gets zero weights and a zero output,
        never NaN.
    """
    raise NotImplementedError
