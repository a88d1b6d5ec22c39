"""Coding exercise sliding-window-mask: build the boolean mask of causal
attention within a sliding window, with attention sinks, for the newest
queries under a cache.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/sliding_window_mask.py``.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from tinyformer.models.decoder import sliding_window_mask
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FRESH_CASES,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_bool,
    matches,
)

EXERCISE = Exercise(
    id="sliding-window-mask",
    functions=("sliding_window_mask",),
    template="sliding_window_mask.py",
    chapter="long-context",
    objective="build the boolean mask of causal attention within a sliding window, with attention sinks, for the newest queries under a cache",
    references=("tinyformer.models.cache.sliding_window_mask",),
)


WINDOW_READING = "query i sits at p = S - L + i and sees key j when j <= p and (p - j < window or j < num_sink_tokens)"


def _window_hints(
    got: object, seq_len_q: int, seq_len_k: int, window: int, sinks: int
) -> list[str]:
    want = sliding_window_mask(
        seq_len_q, seq_len_k, window, num_sink_tokens=sinks
    )
    if (
        not isinstance(got, Tensor)
        or got.shape != want.shape
        or got.dtype != torch.bool
    ):
        return []
    got = got.cpu()
    lines = []
    if matches(
        got,
        sliding_window_mask(
            seq_len_q, seq_len_k, window + 1, num_sink_tokens=sinks
        ),
    ):
        lines.append(
            f"your queries see {window + 1} keys, one more than the window W = {window} holds (the query's "
            "own key counts among them)"
        )
    if window > 1 and matches(
        got,
        sliding_window_mask(
            seq_len_q, seq_len_k, window - 1, num_sink_tokens=sinks
        ),
    ):
        lines.append(
            f"your queries see {window - 1} keys, one fewer than the window W = {window} holds (the "
            "query's own key counts among them)"
        )
    past = seq_len_k - seq_len_q
    if past:
        query = torch.arange(seq_len_q)[:, None]
        key = torch.arange(seq_len_k)[None, :]
        from_zero = (key <= query) & (
            (query - key < window) | (key < sinks)
        )
        if matches(got, from_zero):
            lines.append(
                f"you counted the new queries from position 0, as if nothing were cached ({past} keys are)"
            )
    future = got & ~torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril(
        past
    )
    if future.any():
        i, j = (int(v) for v in future.nonzero()[0])
        seen = (
            f"query {i} (position {past + i}) sees key {j}, in its future"
        )
        all_future = ~torch.ones(
            seq_len_q, seq_len_k, dtype=torch.bool
        ).tril(past)
        keys = torch.arange(seq_len_k)[None, :].expand_as(all_future)
        sinks_only = bool((future.nonzero()[:, 1] < sinks).all())
        # only a future key past the sinks, left out, tells sinks that
        # escape from a window that does too
        if sinks_only and bool((all_future & (keys >= sinks)).any()):
            lines.append(f"{seen}: your sinks escape the causal rule")
        elif sinks_only and sinks:
            lines.append(
                f"{seen}: every key a query sees, in the window or among the sinks, needs j <= p"
            )
        else:
            lines.append(
                f"{seen}: the window needs the causal rule j <= p as well (p - j < W holds for every j > p)"
            )
    return lines


def _window_check(
    seq_len_q: int, seq_len_k: int, window: int, sinks: int, note: str
) -> Check:
    text = f"sliding_window_mask({seq_len_q}, {seq_len_k}, {window}" + (
        f", {sinks})" if sinks else ")"
    )

    def run(f: Functions) -> None:
        want = sliding_window_mask(
            seq_len_q, seq_len_k, window, num_sink_tokens=sinks
        )
        args = (seq_len_q, seq_len_k, window) + ((sinks,) if sinks else ())
        got = call(f["sliding_window_mask"], text, *args)
        try:
            compare_bool("mask", got, want)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_window_hints(
                    got, seq_len_q, seq_len_k, window, sinks
                ),
                reading=WINDOW_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Queries, cached keys, windows and sinks drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = []
    for _ in range(FRESH_CASES):
        queries, cached = rng.randint(1, 10), rng.randint(0, 12)
        window, sinks = rng.randint(1, 8), rng.randint(0, 3)
        drawn.append(
            _window_check(
                queries, queries + cached, window, sinks, "drawn sizes"
            )
        )
    return as_fresh(drawn)


CHECKS = [
    _window_check(6, 6, 3, 0, "no cache, a window of 3"),
    _window_check(5, 5, 1, 0, "a window of 1: each query sees only itself"),
    _window_check(2, 9, 4, 0, "2 new queries after 7 cached"),
    _window_check(8, 8, 3, 2, "a window of 3 and 2 sinks"),
    _window_check(
        3, 3, 2, 4, "more sinks than queries: the sinks stay causal"
    ),
    _window_check(
        1,
        12,
        4,
        1,
        "one decoding step after 11 cached, a window of 4 and 1 sink",
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "a window one key too wide (p - j <= W)",
        [("near = back < window", "near = back <= window")],
        [
            "FAIL  1. sliding_window_mask(6, 6, 3)",
            "first differing entry: mask[3, 0]: expected False, got True",
            "your queries see 4 keys, one more than the window W = 3 holds",
            "pass  5. sliding_window_mask(3, 3, 2, 4)",
        ],
    ),
    (
        "sinks that ignore causality",
        [
            (
                "return (back >= 0) & (near | sink)",
                "return ((back >= 0) & near) | sink",
            )
        ],
        [
            "pass  3. sliding_window_mask(2, 9, 4)",
            "FAIL  4. sliding_window_mask(8, 8, 3, 2)",
            "query 0 (position 0) sees key 1, in its future: your sinks escape the causal rule",
            "FAIL  5. sliding_window_mask(3, 3, 2, 4)",
        ],
    ),
    (
        "a window without the causal part (no sinks: not the sinks' fault)",
        [("return (back >= 0) & (near | sink)", "return near | sink")],
        [
            "FAIL  1. sliding_window_mask(6, 6, 3)",
            "query 0 (position 0) sees key 1, in its future: the window needs the causal rule j <= p as well",
        ],
    ),
]
