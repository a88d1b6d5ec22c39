"""Coding exercise multi-head-from-heads: assemble multi-head attention from
H single heads, each a learned projection of the whole embedding.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/multi_head_attention.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    random_bool_mask,
    reseedable,
    shapes,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="multi-head-from-heads",
    functions=("multi_head_attention",),
    template="multi_head_attention.py",
    chapter="multi-head-attention",
    objective="assemble multi-head attention from H single heads, each a learned projection of the whole embedding",
    references=("tinyformer.models.attention.MultiHeadAttention.forward",),
    variant_of=("tinyformer.models.attention.MultiHeadAttention.forward",),
    variant_differs="the chapter lists the layer's forward, which projects once and splits; the exercise computes each head on its own from its block of rows of the projection weights, with the single-head attention of chapter 1",
)


SCALED_BY_D_MODEL = (
    "your scores are divided by the square root of d_model, the width of the whole embedding, "
    "not of the queries and keys a head compares"
)

NO_OUTPUT_PROJECTION = "your output is the heads side by side, without the output projection W^O"


@torch.no_grad()
def _multi_head_mistakes(
    got: object,
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
) -> list[str]:
    """The common mistakes ``got`` matches, recomputed from ``mha``'s
    weights with the library."""
    q, k, v = (
        mha.split_heads(proj(x))
        for proj, x in (
            (mha.q_proj, query),
            (mha.k_proj, key),
            (mha.v_proj, value),
        )
    )
    mistakes = []
    if mha.num_heads > 1:
        # softmax(q k^T / sqrt(d_model)) = softmax((q sqrt(D / E)) k^T / sqrt(D))
        shrink = (mha.head_dim / mha.d_model) ** 0.5
        heads, _ = scaled_dot_product_attention(q * shrink, k, v, attn_mask)
        if matches(got, mha.out_proj(mha.merge_heads(heads))):
            mistakes.append(SCALED_BY_D_MODEL)
    heads, _ = scaled_dot_product_attention(q, k, v, attn_mask)
    if matches(got, mha.merge_heads(heads)):
        mistakes.append(NO_OUTPUT_PROJECTION)
    return mistakes


@reseedable
def _multi_head(
    title: str,
    d_model: int,
    num_heads: int,
    batch_size: int,
    seq_len_q: int,
    seq_len_k: int | None = None,
    *,
    masked: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        mha = MultiHeadAttention(d_model, num_heads).double().eval()
        query = _randn(batch_size, seq_len_q, d_model, seed=seed)
        key = (
            query
            if seq_len_k is None
            else _randn(batch_size, seq_len_k, d_model, seed=seed + 1)
        )
        value = (
            key
            if seq_len_k is None
            else _randn(batch_size, seq_len_k, d_model, seed=seed + 2)
        )
        attn_mask = (
            random_bool_mask(query.size(1), key.size(1)) if masked else None
        )
        text = f"multi_head_attention(MultiHeadAttention({d_model}, {num_heads}), {shapes(query=query, key=key, value=value)}"
        text += (
            f", attn_mask {tuple(attn_mask.shape)} bool)" if masked else ")"
        )
        with torch.no_grad():
            want, _ = mha(query, key, value, attn_mask=attn_mask)
        got = call(
            f["multi_head_attention"],
            text,
            mha,
            query,
            key,
            value,
            attn_mask=attn_mask,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=_multi_head_mistakes(
                    got, mha, query, key, value, attn_mask
                ),
            ) from None

    return Check(title, run)


CHECKS = [
    _multi_head(
        "self-attention, d_model 12, 3 heads, batch of 2",
        12,
        3,
        2,
        4,
        seed=1,
    ),
    _multi_head(
        "cross-attention, L != S: 3 queries, 5 keys",
        8,
        2,
        2,
        3,
        5,
        seed=2,
    ),
    _multi_head(
        "a batch of one, odd head width 5 (d_model 10, 2 heads)",
        10,
        2,
        1,
        4,
        seed=3,
    ),
    _multi_head("one head", 6, 1, 2, 3, seed=4),
    _multi_head(
        "boolean attn_mask (True = may attend)",
        8,
        4,
        2,
        4,
        5,
        masked=True,
        seed=5,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "columns of nn.Linear.weight taken as W^Q_h (it stores W transposed)",
        [
            (
                f"mha.{p}_proj.weight[rows].T",
                f"mha.{p}_proj.weight[:, rows]",
            )
            for p in "qkv"
        ],
        [
            "FAIL  1. self-attention",
            "first differing entry: output[0, 0, 0]",
        ],
    ),
    (
        "scores scaled by sqrt(d_model) instead of sqrt(head_dim)",
        [
            (
                "scaled_dot_product_attention(q, k,",
                "scaled_dot_product_attention(q * (mha.head_dim / mha.d_model) ** 0.5, k,",
            )
        ],
        [
            "FAIL  1. self-attention",
            "pass  4. one head",
            "first differing entry: output",
            "  - your scores are divided by the square root of d_model",
        ],
    ),
    (
        "no output projection",
        [
            (
                "return mha.out_proj(torch.cat(heads, dim=-1))",
                "return torch.cat(heads, dim=-1)",
            )
        ],
        [
            "FAIL  1.",
            "first differing entry: output[0, 0, 0]",
            "  - your output is the heads side by side, without the output projection",
        ],
    ),
    (
        "calls the module instead of building it",
        [
            (
                "    heads = []\n",
                "    return mha(query, key, value, attn_mask=attn_mask)[0]\n",
            )
        ],
        [
            "called the library's own tinyformer.models.attention.MultiHeadAttention.forward (the exercise asks you to write it yourself), at multi_head_attention.py, line"
        ],
    ),
]
