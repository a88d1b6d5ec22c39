"""Coding exercise scaled-dot-product-attention: write scaled dot-product
attention in matrix form, with boolean, additive and causal masks.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/scaled_dot_product_attention.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tinyformer.models.attention import (
    _restrict_mask,
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
    id="scaled-dot-product-attention",
    functions=("scaled_dot_product_attention",),
    template="scaled_dot_product_attention.py",
    chapter="attention",
    objective="write scaled dot-product attention in matrix form, with boolean, additive and causal masks",
    references=(
        "tinyformer.models.attention.scaled_dot_product_attention",
        "tinyformer.models.attention.MultiHeadAttention.forward",
        "tinyformer.models.attention._merge_masks",
        "tinyformer.models.attention._blocked_rows",
        "tinyformer.models.attention.fused_attention",
        "tinyformer.models.flash.flash_attention",
    ),
)


def _pair(name: str, result: object) -> tuple[object, object]:
    if not isinstance(result, tuple) or len(result) != 2:
        kind = (
            f"a tuple of {len(result)}"
            if isinstance(result, tuple)
            else type(result).__name__
        )
        raise CheckFailed(
            f"expected: {name} to return a tuple (output, weights)",
            f"got:      {kind}",
        )
    return result


@reseedable
def _attention(
    title: str,
    query_shape: tuple[int, ...],
    key_shape: tuple[int, ...],
    value_width: int,
    *,
    mask: Callable[[int, int], Tensor] | None = None,
    is_causal: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        query = _randn(*query_shape, seed=seed)
        key = _randn(*key_shape, seed=seed + 1)
        value = _randn(*key_shape[:-1], value_width, seed=seed + 2)
        attn_mask = (
            None if mask is None else mask(query_shape[-2], key_shape[-2])
        )
        kwargs: dict[str, Any] = {"is_causal": True} if is_causal else {}
        inputs = shapes(query=query, key=key, value=value)
        if attn_mask is not None:
            inputs += (
                f", attn_mask {tuple(attn_mask.shape)} {attn_mask.dtype}"
            )
        text = f"scaled_dot_product_attention({inputs}{', is_causal=True' if is_causal else ''})"
        # the reference first: a solution that changes its inputs in place
        # cannot change what is expected
        want_output, want_weights = scaled_dot_product_attention(
            query, key, value, attn_mask, **kwargs
        )
        result = call(
            f["scaled_dot_product_attention"],
            text,
            query,
            key,
            value,
            attn_mask,
            **kwargs,
        )
        output, weights = _pair("scaled_dot_product_attention", result)
        try:
            compare_close(
                "weights", weights, want_weights, **FLOAT64_TOLERANCE
            )
            compare_close(
                "output", output, want_output, **FLOAT64_TOLERANCE
            )
        except CheckFailed as failed:
            mistakes = []
            width = query.size(-1)
            for factor, mistake in (
                (width**-0.5, SCALED_BY_D_K),
                (width**0.5, NOT_SCALED),
            ):
                slipped, _ = scaled_dot_product_attention(
                    query * factor, key, value, attn_mask, **kwargs
                )
                if matches(output, slipped):
                    mistakes.append(mistake)
            if is_causal:
                mistakes += _causal_mistakes(
                    output, query, key, value, attn_mask
                )
            raise failed.adding(
                f"input: {text}", mistakes=mistakes
            ) from None

    return Check(title, run)


BOTTOM_RIGHT = (
    "your causal mask is aligned at the bottom right (query i sees keys j <= i + S - L, as under a "
    "key-value cache); is_causal counts from the top-left corner, as F.scaled_dot_product_attention does"
)

CAUSAL_IGNORES_MASK = "with is_causal=True your function ignores attn_mask; both apply when both are given"


def _causal_mistakes(
    output: object,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
) -> list[str]:
    """The slips of ``is_causal`` that ``output`` matches."""
    seq_len_q, seq_len_k = query.size(-2), key.size(-2)
    bottom_right = torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril(
        seq_len_k - seq_len_q
    )
    shifted = _restrict_mask(attn_mask, bottom_right)
    mistakes = []
    if seq_len_q != seq_len_k:
        slipped, _ = scaled_dot_product_attention(
            query, key, value, shifted
        )
        if matches(output, slipped):
            mistakes.append(BOTTOM_RIGHT)
    if attn_mask is not None:
        slipped, _ = scaled_dot_product_attention(
            query, key, value, is_causal=True
        )
        if matches(output, slipped):
            mistakes.append(CAUSAL_IGNORES_MASK)
    return mistakes


SCALED_BY_D_K = "your scores are divided by d_k, the width of the queries and keys, not by its square root"

NOT_SCALED = "your scores are not scaled at all"


def _float_mask(seq_len_q: int, seq_len_k: int) -> Tensor:
    bias = _randn(seq_len_q, seq_len_k, seed=11)
    bias[:, -1] = float("-inf")  # the last key blocked for every query
    return bias


def _one_row_blocked(seq_len_q: int, seq_len_k: int) -> Tensor:
    allowed = random_bool_mask(seq_len_q, seq_len_k)
    # query 1 may attend to nothing: zero weights, zero output, no NaN
    allowed[1] = False
    return allowed


CHECKS = [
    _attention(
        "no mask, batch of 2, 4 queries and 4 keys of width 8",
        (2, 4, 8),
        (2, 4, 8),
        8,
        seed=1,
    ),
    _attention(
        "L != S: 3 queries, 5 keys, values of width 6",
        (2, 3, 4),
        (2, 5, 4),
        6,
        seed=2,
    ),
    _attention(
        "a batch of one, odd width 5", (1, 5, 5), (1, 5, 5), 5, seed=3
    ),
    _attention(
        "boolean attn_mask (True = may attend)",
        (2, 4, 6),
        (2, 5, 6),
        6,
        mask=random_bool_mask,
        seed=4,
    ),
    _attention(
        "float attn_mask added to the scores (-inf blocks)",
        (2, 4, 6),
        (2, 5, 6),
        3,
        mask=_float_mask,
        seed=5,
    ),
    _attention(
        "is_causal=True: query i sees keys j <= i",
        (2, 5, 4),
        (2, 5, 4),
        4,
        is_causal=True,
        seed=6,
    ),
    _attention(
        "a query that may attend to nothing gets zero weights and zero output (not NaN)",
        (1, 3, 4),
        (1, 5, 4),
        4,
        mask=_one_row_blocked,
        seed=8,
    ),
    _attention(
        "is_causal=True with L != S: 3 queries, 5 keys, counted from the top-left corner",
        (2, 3, 4),
        (2, 5, 4),
        4,
        is_causal=True,
        seed=9,
    ),
    _attention(
        "is_causal=True and a boolean attn_mask: both apply",
        (2, 5, 6),
        (2, 5, 6),
        6,
        mask=random_bool_mask,
        is_causal=True,
        seed=10,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "missing square root: divides by d_k",
        [("math.sqrt(query.size(-1))", "query.size(-1)")],
        [
            "FAIL  1. no mask",
            "first differing entry: weights[0, 0, 0]",
            "tolerance: |got - expected| <= 1e-07",
            "What the failures point to:\n  - your scores are divided by d_k, the width of the queries and keys, not by its square root",
        ],
    ),
    (
        "mask of the wrong polarity (True = blocked)",
        [("masked_fill(~attn_mask,", "masked_fill(attn_mask,")],
        [
            "pass  1.",
            "FAIL  4. boolean attn_mask",
            "attn_mask (4, 5) torch.bool",
            "first differing entry: weights",
        ],
    ),
    (
        "softmax over the queries instead of the keys",
        [(".softmax(dim=-1)", ".softmax(dim=-2)")],
        ["FAIL  1.", "first differing entry: weights[0, 0, 0]"],
    ),
    (
        "a fully masked row left to the softmax (NaN)",
        [
            (
                ".masked_fill(blocked, 0.0)\n        .softmax(dim=-1)\n        .masked_fill(blocked, 0.0)",
                ".softmax(dim=-1)",
            )
        ],
        [
            "FAIL  7. a query that may attend to nothing",
            "weights[0, 1, 0]: expected 0, got nan",
        ],
    ),
    (
        "is_causal aligned at the bottom right, as under a cache",
        [(").tril()", ").tril(key.size(-2) - query.size(-2))")],
        [
            "pass  7.",
            "FAIL  8. is_causal=True with L != S",
            "aligned at the bottom right",
        ],
    ),
    (
        "is_causal replaces attn_mask instead of combining with it",
        [
            (
                "        if attn_mask is None:\n            attn_mask = causal",
                "        if True:\n            attn_mask = causal",
            )
        ],
        [
            "pass  8.",
            "FAIL  9. is_causal=True and a boolean attn_mask",
            "ignores attn_mask",
        ],
    ),
]
