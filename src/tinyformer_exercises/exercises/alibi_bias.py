"""Coding exercise alibi-bias: compute ALiBi's slopes for any number of
heads and its distance biases.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/alibi_bias.py``.
"""

from __future__ import annotations

import math
import random

import torch
from torch import Tensor

from tinyformer.models.positional import alibi_bias, alibi_slopes
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT32_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_close,
)

EXERCISE = Exercise(
    id="alibi-bias",
    functions=("alibi_slopes", "alibi_bias"),
    template="alibi_bias.py",
    chapter="beyond-sinusoids",
    objective="compute ALiBi's slopes for any number of heads and its distance biases",
    references=(
        "tinyformer.models.positional.alibi_slopes",
        "tinyformer.models.positional.alibi_bias",
        "tinyformer.models.positional.alibi._geometric_slopes",
        "tinyformer.models.positional.alibi.ALiBiBias.forward",
        "tinyformer.models.positional.alibi._bias_at",
    ),
)


def _powers_of_two(slopes: Tensor) -> str:
    return ", ".join(
        f"2^{math.log2(s):.4g}" if s > 0 else f"{s:.4g}"
        for s in slopes.tolist()
    )


def _slopes(num_heads: int, note: str) -> Check:
    def run(f: Functions) -> None:
        text = f"alibi_slopes({num_heads})"
        want = alibi_slopes(num_heads)
        got = call(f["alibi_slopes"], text, num_heads)
        try:
            compare_close(
                "slopes", got, want, **FLOAT32_TOLERANCE, dtype=None
            )
        except CheckFailed as failed:
            lines = [
                f"input: {text}",
                *failed.lines,
                f"expected slopes: {_powers_of_two(want)}",
            ]
            if (
                isinstance(got, Tensor)
                and got.shape == want.shape
                and got.dtype.is_floating_point
            ):
                lines.append(
                    f"your slopes:     {_powers_of_two(got.detach().to(torch.float64).cpu())}"
                )
            raise CheckFailed(*lines) from None

    return Check(f"alibi_slopes({num_heads}): {note}", run)


def _alibi(
    num_heads: int, seq_len_q: int, seq_len_k: int | None, note: str
) -> Check:
    args = (
        (num_heads, seq_len_q)
        if seq_len_k is None
        else (num_heads, seq_len_q, seq_len_k)
    )
    text = f"alibi_bias({', '.join(str(a) for a in args)})"

    def run(f: Functions) -> None:
        want = alibi_bias(*args, dtype=torch.float64)
        got = call(f["alibi_bias"], text, *args)
        try:
            compare_close(
                "bias", got, want, **FLOAT32_TOLERANCE, dtype=None
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                "bias[h, i, j] = -m_h * |i - j| for head h (slope m_h = alibi_slopes(H)[h]), query i, key j: "
                "zero where i == j, negative elsewhere, the same for a key i - d and a key i + d",
            ) from None

    return Check(f"{text}: {note}", run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Head counts, lengths and key counts drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = [_slopes(rng.randint(2, 40), "a drawn number of heads")]
    for _ in range(2):
        heads, queries = rng.randint(1, 24), rng.randint(1, 12)
        keys = rng.choice([None, rng.randint(1, 12)])
        drawn.append(_alibi(heads, queries, keys, "drawn sizes"))
    return as_fresh(drawn)


CHECKS = [
    _slopes(8, "2^-1, 2^-2, ..., 2^-8"),
    _slopes(6, "6 heads, not a power of two"),
    _slopes(12, "12 heads, not a power of two"),
    _slopes(1, "one head"),
    _alibi(
        8,
        5,
        None,
        "8 heads, 5 queries, 5 keys (seq_len_k defaults to seq_len_q)",
    ),
    _alibi(6, 3, 5, "L != S: 6 heads, 3 queries, 5 keys"),
    _alibi(12, 6, 2, "L != S: 12 heads, 6 queries, 2 keys"),
    _alibi(1, 4, None, "one head"),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "slopes 2^(-8h/H) for every H, ignoring the rule for H not a power of two",
        [
            (
                "closest = 2 ** math.floor(math.log2(num_heads))",
                "closest = num_heads",
            )
        ],
        [
            "pass  1. alibi_slopes(8)",
            "FAIL  2. alibi_slopes(6)",
            "expected slopes: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3",
            "your slopes:     2^-1.333, 2^-2.667",
            "pass  5. alibi_bias(8, 5)",
            "FAIL  6. alibi_bias(6, 3, 5)",
        ],
    ),
    (
        "bias with the wrong sign (a reward for distance)",
        [
            (
                "return -slopes[:, None, None] * distance",
                "return slopes[:, None, None] * distance",
            )
        ],
        [
            "pass  4.",
            "FAIL  5. alibi_bias(8, 5)",
            "first differing entry: bias[0, 0, 1]: expected -0.5, got 0.5",
        ],
    ),
    (
        "j - i instead of |i - j|",
        [("(query_pos - key_pos).abs()", "key_pos - query_pos")],
        [
            "FAIL  5.",
            "first differing entry: bias[0, 1, 0]: expected -0.5, got 0.5",
            "-m_h * |i - j|",
        ],
    ),
]
