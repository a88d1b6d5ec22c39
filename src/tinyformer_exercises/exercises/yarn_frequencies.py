"""Coding exercise yarn-frequencies: compute YaRN's blend of kept and
interpolated rotary speeds, the ramp over the pair index.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/yarn_frequencies.py``.
"""

from __future__ import annotations

import random

from torch import Tensor

from tinyformer.models.positional import RopeScaling, rotary_frequencies
from tinyformer.models.positional.scaling import _yarn_ramp
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    FRESH_CASES,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_close,
    matches,
)
from tinyformer_exercises.exercises.scaled_frequencies import (
    trained_frequencies,
)

EXERCISE = Exercise(
    id="yarn-frequencies",
    functions=("yarn_frequencies",),
    template="yarn_frequencies.py",
    chapter="long-context",
    objective="compute YaRN's blend of kept and interpolated rotary speeds, the ramp over the pair index",
    references=(
        "tinyformer.models.positional.rotary_frequencies",
        "tinyformer.models.positional.scaling._yarn_ramp",
    ),
)


YARN_READING = (
    "d(n) = D ln(L / (2 pi n)) / (2 ln base); low = max(floor(d(beta_fast)), 0), high = min(ceil(d(beta_slow)), "
    "D - 1); r_i = clamp((i - low) / (high - low), 0, 1); speed (1 - r_i) theta_i + r_i theta_i / s"
)


def _yarn(
    head_dim: int,
    base: float,
    factor: float,
    length: int,
    beta_fast: float,
    beta_slow: float,
    *,
    truncate: bool = True,
) -> Tensor:
    scaling = RopeScaling(
        "yarn",
        factor,
        original_max_len=length,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        truncate=truncate,
    )
    return rotary_frequencies(head_dim, base=base, scaling=scaling)


def _yarn_hints(
    got: object,
    head_dim: int,
    base: float,
    factor: float,
    length: int,
    beta_fast: float,
    beta_slow: float,
) -> list[str]:
    if not isinstance(got, Tensor) or got.shape != (head_dim // 2,):
        return []
    trained = trained_frequencies(head_dim, base)
    want = _yarn(head_dim, base, factor, length, beta_fast, beta_slow)
    lines = []
    scaling = RopeScaling(
        "yarn",
        factor,
        original_max_len=length,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
    )
    ramp = _yarn_ramp(
        scaling, head_dim // 2, base
    )  # 0 keep .. 1 interpolate
    reversed_ramp = ramp * trained + (1 - ramp) * trained / factor
    if matches(got, reversed_ramp):
        lines.append(
            "your ramp runs the wrong way round: it interpolates the fast pairs and keeps the slow ones"
        )
    untruncated = _yarn(
        head_dim, base, factor, length, beta_fast, beta_slow, truncate=False
    )
    if not matches(want, untruncated) and matches(got, untruncated):
        lines.append(
            "you kept the ramp's ends as real numbers, where YaRN rounds them to whole pairs"
        )
    if matches(got, trained / factor):
        lines.append(
            "you interpolated every pair (that is linear scaling); YaRN keeps the fast pairs"
        )
    return lines


def _yarn_check(
    head_dim: int,
    base: float,
    factor: float,
    length: int,
    note: str,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> Check:
    betas = (
        ""
        if (beta_fast, beta_slow) == (32.0, 1.0)
        else f", beta_fast={beta_fast:g}, beta_slow={beta_slow:g}"
    )
    text = f"yarn_frequencies({head_dim}, {base:g}, {factor:g}, {length}{betas})"

    def run(f: Functions) -> None:
        want = _yarn(head_dim, base, factor, length, beta_fast, beta_slow)
        got = call(
            f["yarn_frequencies"],
            text,
            head_dim,
            base,
            factor,
            length,
            beta_fast=beta_fast,
            beta_slow=beta_slow,
        )
        try:
            compare_close("theta", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_yarn_hints(
                    got,
                    head_dim,
                    base,
                    factor,
                    length,
                    beta_fast,
                    beta_slow,
                ),
                reading=YARN_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Widths, bases, factors and trained contexts drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = []
    for _ in range(FRESH_CASES):
        head_dim = 2 * rng.randint(4, 64)
        base = rng.choice([10000.0, 500000.0])
        factor = rng.choice([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
        length = rng.choice([12, 256, 512, 2048, 4096, 8192])
        drawn.append(
            _yarn_check(head_dim, base, factor, length, "drawn sizes")
        )
    return as_fresh(drawn)


CHECKS = [
    _yarn_check(
        64,
        10000.0,
        4.0,
        2048,
        "Llama 2's width, base and context, stretched 4 times",
    ),
    _yarn_check(
        16,
        10000.0,
        2.0,
        12,
        "the chapter's lab: a 12-token context, where no pair turns 32 times",
    ),
    _yarn_check(
        128, 500000.0, 8.0, 8192, "Llama 3's width, base and context"
    ),
    _yarn_check(
        64,
        10000.0,
        16.0,
        4096,
        "other ends of the ramp",
        beta_fast=4.0,
        beta_slow=0.5,
    ),
    _yarn_check(
        32, 10000.0, 1.0, 512, "s = 1 leaves every speed as trained"
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the ramp reversed: fast pairs interpolated, slow ones kept",
        [
            (
                "return (1 - ramp) * theta + ramp * theta / factor",
                "return ramp * theta + (1 - ramp) * theta / factor",
            )
        ],
        [
            "FAIL  2. yarn_frequencies(16, 10000, 2, 12)",
            "first differing entry: theta[0]: expected 1, got 0.5",
            "your ramp runs the wrong way",
            "pass  5. yarn_frequencies(32, 10000, 1, 512)",
        ],
    ),
    (
        "the ramp's ends not rounded to whole pairs",
        [
            (
                "math.floor(pair_turning(beta_fast))",
                "pair_turning(beta_fast)",
            ),
            (
                "math.ceil(pair_turning(beta_slow))",
                "pair_turning(beta_slow)",
            ),
        ],
        [
            "FAIL  1. yarn_frequencies(64, 10000, 4, 2048)",
            "first differing entry: theta[9]",
            "you kept the ramp's ends as real numbers",
            "pass  2. yarn_frequencies(16, 10000, 2, 12)",
        ],
    ),
]
