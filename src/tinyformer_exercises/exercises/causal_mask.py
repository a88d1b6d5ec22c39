"""Coding exercise causal-mask: build a causal mask and state its polarity
(True = may attend).

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/causal_mask.py``.
"""

from __future__ import annotations

import random

from tinyformer.models.attention import causal_mask
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FRESH_CASES,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_bool,
)

EXERCISE = Exercise(
    id="causal-mask",
    functions=("causal_mask",),
    template="causal_mask.py",
    chapter="attention",
    objective="build a causal mask and state its polarity (True = may attend)",
    references=(
        "tinyformer.models.attention.causal_mask",
        "tinyformer.models.cache.causal_block_mask",
        "tinyformer.models.cache.sliding_window_mask",
    ),
)


def _causal(seq_len: int) -> Check:
    def run(f: Functions) -> None:
        got = call(f["causal_mask"], f"causal_mask({seq_len})", seq_len)
        try:
            compare_bool(
                f"causal_mask({seq_len})", got, causal_mask(seq_len)
            )
        except CheckFailed as failed:
            reading = "entry [i, j] is query i's row, key j's column; True = query i may attend to key j"
            raise CheckFailed(*failed.lines, reading=reading) from None

    return Check(
        f"causal_mask({seq_len}): True where key j <= query i (True = may attend)",
        run,
    )


def fresh_checks(rng: random.Random) -> list[Check]:
    """Three lengths drawn anew at every run (checker.checks.fresh_checks)."""
    return as_fresh(
        [_causal(rng.randint(2, 40)) for _ in range(FRESH_CASES)]
    )


CHECKS = [_causal(1), _causal(4), _causal(7)]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "wrong polarity (upper triangle)",
        [(".tril()", ".triu()")],
        [
            "FAIL  2.",
            "first differing entry: causal_mask(4)[0, 1]: expected False, got True",
        ],
    ),
    (
        "off by one: the diagonal blocked",
        [(".tril()", ".tril(-1)")],
        ["FAIL  1.", "causal_mask(1)[0, 0]: expected True, got False"],
    ),
    (
        "a float mask instead of a bool one",
        [("dtype=torch.bool", "dtype=torch.float32")],
        [
            "expected: causal_mask(1) with dtype torch.bool",
            "got:      (1, 1) torch.float32 tensor",
        ],
    ),
]
