"""Coding exercise alibi-cache-bias: compute ALiBi's bias for the newest
queries under a key-value cache, with the future keys blocked.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/alibi_cache_bias.py``.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from tinyformer.models.decoder import causal_block_mask
from tinyformer.models.positional import alibi_bias
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT32_TOLERANCE,
    FRESH_CASES,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_close,
    matches,
    require_floating,
)

EXERCISE = Exercise(
    id="alibi-cache-bias",
    functions=("alibi_cache_bias",),
    template="alibi_cache_bias.py",
    chapter="decoder",
    objective="compute ALiBi's bias for the newest queries under a key-value cache, with the future keys blocked",
    references=(
        "tinyformer.models.positional.alibi_bias",
        "tinyformer.models.positional.alibi.ALiBiBias.forward",
        "tinyformer.models.positional.alibi._bias_at",
    ),
)


ALIBI_READING = (
    "bias[h, i, j] = -m_h * ((S - L + i) - j) for key j <= S - L + i (query i sits at position S - L + i; "
    "slope m_h = alibi_slopes(H)[h]), -inf for key j > S - L + i, its future"
)


def _cache_bias(num_heads: int, seq_len_q: int, seq_len_k: int) -> Tensor:
    """The library's bias for the newest queries, the future blocked."""
    bias = alibi_bias(
        num_heads,
        seq_len_q,
        seq_len_k,
        query_offset=seq_len_k - seq_len_q,
        dtype=torch.float64,
    )
    # (H, L, S)
    return bias.masked_fill(
        ~causal_block_mask(seq_len_q, seq_len_k), float("-inf")
    )


def _bias_hints(
    got: object, num_heads: int, seq_len_q: int, seq_len_k: int
) -> list[str]:
    want = _cache_bias(num_heads, seq_len_q, seq_len_k)
    if (
        not isinstance(got, Tensor)
        or got.shape != want.shape
        or not got.dtype.is_floating_point
    ):
        return []
    got = got.detach().to(torch.float64).cpu()
    past = seq_len_k - seq_len_q
    # the top-left form: queries counted from 0, future j > i blocked
    from_zero = alibi_bias(
        num_heads, seq_len_q, seq_len_k, dtype=torch.float64
    ).masked_fill(
        ~torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril(),
        float("-inf"),
    )
    if past and matches(got, from_zero, FLOAT32_TOLERANCE):
        return [
            f"you counted the new queries from position 0: under a cache the first {past} keys are cached, "
            f"so query i sits at position S - L + i = {past} + i and its bias is -m_h * (({past} + i) - j)"
        ]
    lines = []
    if (torch.isneginf(want) & torch.isfinite(got)).any():
        lines.append(
            "your bias leaves keys in the queries' future (j > S - L + i) open, where this bias must "
            "block them itself"
        )
    symmetric = alibi_bias(
        num_heads,
        seq_len_q,
        seq_len_k,
        query_offset=past,
        dtype=torch.float64,
    )
    if matches(got, symmetric, FLOAT32_TOLERANCE):
        lines.append(
            "yours is the symmetric -m_h * |(S - L + i) - j|, the encoder's form, which penalises the "
            "future keys instead of blocking them"
        )
    if (torch.isfinite(want) & torch.isneginf(got)).any():
        lines.append(
            "your bias blocks keys that are not in the future: the cached keys, or the query's own"
        )
    return lines


def _alibi_cache(
    num_heads: int, seq_len_q: int, seq_len_k: int, note: str
) -> Check:
    text = f"alibi_cache_bias({num_heads}, {seq_len_q}, {seq_len_k})"

    def run(f: Functions) -> None:
        want = _cache_bias(num_heads, seq_len_q, seq_len_k)
        got = call(
            f["alibi_cache_bias"], text, num_heads, seq_len_q, seq_len_k
        )
        try:
            compare_close(
                "bias", got, want, **FLOAT32_TOLERANCE, dtype=None
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_bias_hints(got, num_heads, seq_len_q, seq_len_k),
                reading=ALIBI_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def _alibi_last_rows(
    num_heads: int, seq_len_q: int, seq_len_k: int
) -> Check:
    full_text = f"alibi_cache_bias({num_heads}, {seq_len_k}, {seq_len_k})"
    text = f"alibi_cache_bias({num_heads}, {seq_len_q}, {seq_len_k})"
    title = (
        f"the last {seq_len_q} rows of {full_text} (no cache) equal {text}: a query's bias depends on "
        "its position only"
    )

    def run(f: Functions) -> None:
        full = call(
            f["alibi_cache_bias"],
            full_text,
            num_heads,
            seq_len_k,
            seq_len_k,
        )
        try:
            full = require_floating(
                full_text, full, (num_heads, seq_len_k, seq_len_k)
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {full_text}", *failed.lines
            ) from None
        got = call(
            f["alibi_cache_bias"], text, num_heads, seq_len_q, seq_len_k
        )
        rows = full.detach().to(torch.float64)[:, seq_len_k - seq_len_q :]
        try:
            compare_close(
                "bias", got, rows, **FLOAT32_TOLERANCE, dtype=None
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text} against rows {seq_len_k - seq_len_q}, ..., {seq_len_k - 1} of your {full_text}",
                f"expected: bias equal to those rows of your {full_text}",
                *failed.lines[1:],
                mistakes=_bias_hints(got, num_heads, seq_len_q, seq_len_k),
                reading=ALIBI_READING,
            ) from None

    return Check(title, run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Head counts, new queries and cached keys drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = []
    for _ in range(FRESH_CASES):
        heads, queries, cached = (
            rng.randint(1, 16),
            rng.randint(1, 8),
            rng.randint(0, 12),
        )
        drawn.append(
            _alibi_cache(
                heads,
                queries,
                queries + cached,
                f"{queries} new queries after {cached} cached",
            )
        )
    return as_fresh(drawn)


CHECKS = [
    _alibi_cache(8, 5, 5, "no cache (L = S): the causal ALiBi bias"),
    _alibi_cache(
        8,
        1,
        6,
        "one new query after 5 cached: its row is -m_h * (5 - j), no -inf",
    ),
    _alibi_cache(4, 3, 7, "3 new queries after 4 cached"),
    _alibi_cache(6, 2, 5, "6 heads, not a power of two"),
    _alibi_last_rows(4, 2, 6),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "new queries counted from position 0 (no offset S - L)",
        [(" + past\n", "\n")],
        [
            "pass  1. alibi_cache_bias(8, 5, 5)",
            "FAIL  2. alibi_cache_bias(8, 1, 6)",
            "first differing entry: bias[0, 0, 0]: expected -2.5, got -0",
            "you counted the new queries from position 0",
            "query i sits at position S - L + i = 5 + i",
            "FAIL  5. the last 2 rows of alibi_cache_bias(4, 6, 6)",
        ],
    ),
    (
        "the symmetric -m_h * |i - j| without -inf for the future",
        [
            (
                "distance = query_pos - key_pos",
                "distance = (query_pos - key_pos).abs()",
            )
        ],
        [
            "FAIL  1. alibi_cache_bias(8, 5, 5)",
            "first differing entry: bias[0, 0, 1]: expected -inf, got -0.5",
            "your bias leaves keys in the queries' future (j > S - L + i) open",
            "yours is the symmetric -m_h * |(S - L + i) - j|",
            "pass  2. alibi_cache_bias(8, 1, 6)",
        ],
    ),
]
