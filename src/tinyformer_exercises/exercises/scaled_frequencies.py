"""Coding exercise scaled-frequencies: compute the rotary speeds that
position interpolation and NTK-aware scaling give a model stretched past its
trained context.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/scaled_frequencies.py``.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from tinyformer.models.positional import RopeScaling, rotary_frequencies
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    as_fresh,
    call,
    compare_close,
    matches,
)

EXERCISE = Exercise(
    id="scaled-frequencies",
    functions=("scaled_frequencies",),
    template="scaled_frequencies.py",
    chapter="long-context",
    objective="compute the rotary speeds that position interpolation and NTK-aware scaling give a model stretched past its trained context",
    references=("tinyformer.models.positional.rotary_frequencies",),
)


SCALED_READING = (
    "theta_i = base^(-2i/D) for i = 0 .. D/2 - 1; linear: theta_i / s; ntk: the same formula with the base "
    "base * s^(D / (D - 2))"
)


def trained_frequencies(head_dim: int, base: float) -> Tensor:
    return rotary_frequencies(head_dim, base=base)


def _scaled(
    head_dim: int, base: float, rope_type: str | None, factor: float
) -> Tensor:
    scaling = None if rope_type is None else RopeScaling(rope_type, factor)
    return rotary_frequencies(head_dim, base=base, scaling=scaling)


def _scaled_hints(
    got: object,
    head_dim: int,
    base: float,
    rope_type: str | None,
    factor: float,
) -> list[str]:
    if isinstance(got, Tensor) and got.shape == (head_dim,):
        return [
            f"you gave one speed per feature ({head_dim} for D = {head_dim}): there is one per pair of features"
        ]
    trained = trained_frequencies(head_dim, base)
    lines = []
    if rope_type == "linear" and matches(got, trained * factor):
        lines.append(
            "you multiplied the speeds by s: interpolation slows every pair, so that s times as many "
            "positions turn through the trained angles"
        )
    if rope_type == "ntk" and matches(
        got, trained_frequencies(head_dim, base * factor)
    ):
        lines.append(
            "you multiplied the base by s: then the slowest pair slows by s^((D - 2) / D), not by s"
        )
    if rope_type == "ntk" and matches(got, trained / factor):
        lines.append(
            "you divided every speed by s, which is position interpolation (linear); NTK-aware scaling "
            "changes the base and keeps the fastest pair's speed"
        )
    if rope_type is not None and matches(got, trained):
        lines.append(
            f"these are the trained speeds: rope_type={rope_type!r} with s = {factor:g} changes them"
        )
    return lines


def _scaled_check(
    head_dim: int,
    base: float,
    rope_type: str | None,
    factor: float,
    note: str,
) -> Check:
    text = f"scaled_frequencies({head_dim}, {base:g}, {rope_type!r}, {factor:g})"

    def run(f: Functions) -> None:
        want = _scaled(head_dim, base, rope_type, factor)
        got = call(
            f["scaled_frequencies"], text, head_dim, base, rope_type, factor
        )
        try:
            compare_close("theta", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_scaled_hints(
                    got, head_dim, base, rope_type, factor
                ),
                reading=SCALED_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def _ntk_ends(head_dim: int, base: float, factor: float) -> Check:
    text = f"scaled_frequencies({head_dim}, {base:g}, 'ntk', {factor:g})"
    title = (
        f"{text}: the fastest pair keeps its speed and the slowest is slowed by exactly s = {factor:g}, "
        "against your own trained speeds"
    )

    def run(f: Functions) -> None:
        trained = call(
            f["scaled_frequencies"],
            f"scaled_frequencies({head_dim}, {base:g})",
            head_dim,
            base,
        )
        got = call(
            f["scaled_frequencies"], text, head_dim, base, "ntk", factor
        )
        want = trained_frequencies(head_dim, base)
        try:
            compare_close(
                "your trained theta", trained, want, **FLOAT64_TOLERANCE
            )
            compare_close(
                "theta",
                got,
                _scaled(head_dim, base, "ntk", factor),
                **FLOAT64_TOLERANCE,
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_scaled_hints(got, head_dim, base, "ntk", factor),
                reading=SCALED_READING,
            ) from None
        ends = (
            got.detach().to(torch.float64)[[0, -1]]
            / trained.detach().to(torch.float64)[[0, -1]]
        )
        if not torch.allclose(
            ends, torch.tensor([1.0, 1.0 / factor], dtype=torch.float64)
        ):
            raise CheckFailed(
                f"input: {text}",
                f"expected: the ratios to your trained speeds 1 and 1/{factor:g} at the two ends",
                f"got:      {ends[0].item():.6g} and {ends[1].item():.6g}",
            )

    return Check(title, run)


def fresh_checks(rng: random.Random) -> list[Check]:
    """Widths, bases, rules and factors drawn anew at every run
    (checker.checks.fresh_checks)."""
    drawn = []
    for rope_type in rng.sample([None, "linear", "ntk"], 3):
        head_dim = 2 * rng.randint(2, 64)
        base = rng.choice([100.0, 10000.0, 500000.0]) * rng.choice(
            [1.0, 1.5]
        )
        factor = (
            1.0
            if rope_type is None
            else rng.choice([1.5, 2.0, 3.0, 4.0, 8.0, 16.0])
        )
        drawn.append(
            _scaled_check(head_dim, base, rope_type, factor, "drawn sizes")
        )
    return as_fresh(drawn)


CHECKS = [
    _scaled_check(
        8, 10000.0, None, 1.0, "the trained speeds, 1, 0.1, 0.01, 0.001"
    ),
    _scaled_check(8, 10000.0, "linear", 4.0, "position interpolation by 4"),
    _scaled_check(8, 10000.0, "ntk", 4.0, "NTK-aware scaling by 4"),
    _scaled_check(
        64,
        500000.0,
        "ntk",
        8.0,
        "Llama 3's width and base, stretched 8 times",
    ),
    _ntk_ends(16, 10000.0, 3.0),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "interpolation multiplies the speeds by s",
        [("theta = theta / factor", "theta = theta * factor")],
        [
            "pass  1. scaled_frequencies(8, 10000, None, 1)",
            "FAIL  2. scaled_frequencies(8, 10000, 'linear', 4)",
            "first differing entry: theta[0]: expected 0.25, got 4",
            "you multiplied the speeds by s: interpolation slows every pair",
            "pass  3.",
        ],
    ),
    (
        "NTK base multiplied by s, without the exponent D / (D - 2)",
        [
            (
                "base = base * factor ** (head_dim / (head_dim - 2))",
                "base = base * factor",
            )
        ],
        [
            "pass  2. scaled_frequencies(8, 10000, 'linear', 4)",
            "FAIL  3. scaled_frequencies(8, 10000, 'ntk', 4)",
            "first differing entry: theta[1]: expected 0.06299605249, got 0.07071067812",
            "you multiplied the base by s: then the slowest pair slows by s^((D - 2) / D), not by s",
            "FAIL  5.",
        ],
    ),
    (
        "the speeds returned in float32 (the docstring asks for float64)",
        [("    return theta\n", "    return theta.float()\n")],
        [
            "FAIL  1. scaled_frequencies(8, 10000, None, 1)",
            "expected: theta with dtype torch.float64, the dtype the library returns for these inputs",
            "got:      theta with dtype torch.float32",
        ],
    ),
]
