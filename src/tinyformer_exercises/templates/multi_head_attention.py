"""Coding exercise multi-head-from-heads (chapter 3, "Multi-head attention").

Objective assessed: assemble multi-head attention from H single heads, each
a learned projection of the whole embedding.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises multi-head-from-heads multi_head_attention.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- multi-head-from-heads path/to/multi_head_attention.py

Compute every head on its own, with tinyformer's single-head
``scaled_dot_product_attention``, then concatenate and project. Calling
``mha(...)`` itself is refused by the checker."""

import torch
from torch import Tensor

from tinyformer.models.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)


def multi_head_attention(
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    attn_mask: Tensor | None = None,
) -> Tensor:
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_h =
    Attention(Q W^Q_h, K W^K_h, V W^V_h) (Vaswani et al., 2017, Sec. 3.2.2).

    Use the weights of ``mha``: ``mha.q_proj``, ``mha.k_proj``,
    ``mha.v_proj`` and ``mha.out_proj`` are ``nn.Linear(d_model, d_model)``
    layers, and ``mha.num_heads``, ``mha.head_dim`` give H and D. An
    ``nn.Linear`` stores its matrix transposed:
    ``linear(x) == x @ linear.weight.T + linear.bias``, so head h's block of
    columns of W^Q is a block of ROWS of ``mha.q_proj.weight``.

    Args:
        mha: the layer whose weights to use.
        query: ``(N, L, E)``.
        key: ``(N, S, E)``.
        value: ``(N, S, E)``.
        attn_mask: None or a bool ``(L, S)`` mask with **True = may
            attend**, the same for every head.

    Returns:
        ``(N, L, E)`` output, equal to
        ``mha(query, key, value, attn_mask=attn_mask)[0]``.
    """
    raise NotImplementedError
