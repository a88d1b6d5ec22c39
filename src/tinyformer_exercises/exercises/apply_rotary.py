"""Coding exercise apply-rotary: rotate queries and keys by their position,
with the interleaved and the split-half pairing.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/apply_rotary.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tinyformer.models.positional import apply_rotary
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT32_TOLERANCE,
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    describe,
    matches,
    precision_hint,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="apply-rotary",
    functions=("apply_rotary",),
    template="apply_rotary.py",
    chapter="beyond-sinusoids",
    objective="rotate queries and keys by their position, with the interleaved and the split-half pairing",
    references=(
        "tinyformer.models.positional.apply_rotary",
        "tinyformer.models.positional.rotary.rotary_angles",
    ),
)


def _same_dtype(name: str, got: object, dtype: torch.dtype) -> None:
    if isinstance(got, Tensor) and got.dtype != dtype:
        raise CheckFailed(
            f"expected: {name} of dtype {dtype} (the dtype of x)",
            f"got:      {describe(got)}",
        )


ROTARY_READING = (
    "pair i is features (2i, 2i+1) when interleaved=True, (i, i + D/2) when interleaved=False; at position pos "
    "it turns by t = pos * base^(-2i/D) radians: (a, b) -> (a cos t - b sin t, a sin t + b cos t)"
)

OTHER_PAIRING = (
    "your result pairs the features the other way: interleaved=True and interleaved=False pair "
    "different features"
)

REVERSED_ROTATION = "your pairs turn the reverse way, by -t instead of t"


def _rotary_mistakes(
    got: object, x: Tensor, kwargs: dict[str, Any]
) -> list[str]:
    """The common mistakes ``got`` matches: the other pairing, the reverse
    rotation (computed by the library in float64)."""
    x = x.to(torch.float64)
    interleaved = kwargs.get("interleaved", True)
    positions = kwargs.get("positions")
    if positions is None:
        positions = torch.arange(x.size(-2))
    others = {
        OTHER_PAIRING: {**kwargs, "interleaved": not interleaved},
        REVERSED_ROTATION: {**kwargs, "positions": -positions},
    }
    tolerance = FLOAT32_TOLERANCE
    return [
        mistake
        for mistake, changed in others.items()
        if x.size(-1) > 2 or mistake == REVERSED_ROTATION
        if matches(got, apply_rotary(x, **changed), tolerance)
    ]


@reseedable
def _rotary(
    title: str,
    shape: tuple[int, ...],
    *,
    positions: Tensor | None = None,
    interleaved: bool | None = None,
    base: float | None = None,
    dtype: torch.dtype = torch.float64,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        x = _randn(*shape, seed=seed).to(dtype)
        kwargs: dict[str, Any] = {}
        text = f"apply_rotary(x {shape} {dtype}"
        if positions is not None:
            kwargs["positions"] = positions.clone()
            shown = (
                positions.tolist()
                if positions.dim() == 1
                else f"{tuple(positions.shape)} tensor {positions.tolist()}"
            )
            text += f", positions={shown}"
        if base is not None:
            kwargs["base"] = base
            text += f", base={base:g}"
        if interleaved is not None:
            kwargs["interleaved"] = interleaved
            text += f", interleaved={interleaved}"
        text += ")"
        # the reference first: a solution that changes its inputs in place
        # cannot change what is expected rotated in float64, then cast
        want = apply_rotary(x.to(torch.float64), **kwargs).to(dtype)
        got = call(f["apply_rotary"], text, x, **kwargs)
        tolerance = (
            FLOAT64_TOLERANCE
            if dtype == torch.float64
            else FLOAT32_TOLERANCE
        )
        try:
            _same_dtype("output", got, dtype)
            compare_close("output", got, want, **tolerance)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=[
                    *_rotary_mistakes(got, x, kwargs),
                    *precision_hint(got, want),
                ],
                reading=ROTARY_READING,
            ) from None

    return Check(title, run)


CHECKS = [
    _rotary(
        "interleaved pairs (the default), default positions 0, ..., L-1, x (2, 5, 8)",
        (2, 5, 8),
        seed=1,
    ),
    _rotary(
        "split-half pairs (interleaved=False), x (2, 5, 8)",
        (2, 5, 8),
        interleaved=False,
        seed=2,
    ),
    _rotary(
        "explicit positions, batch and head dimensions, x (2, 3, 5, 8)",
        (2, 3, 5, 8),
        positions=torch.tensor([3, 0, 7, 100, 2]),
        seed=3,
    ),
    _rotary(
        "explicit positions, split-half pairs, x (2, 3, 5, 8)",
        (2, 3, 5, 8),
        positions=torch.tensor([3, 0, 7, 100, 2]),
        interleaved=False,
        seed=4,
    ),
    _rotary(
        "positions per sequence, (2, 1, 4), broadcast over the heads of x (2, 3, 4, 6)",
        (2, 3, 4, 6),
        positions=torch.tensor([[[0, 1, 2, 3]], [[10, 11, 12, 13]]]),
        seed=5,
    ),
    _rotary(
        "float32 x: a float32 result of the same values, x (1, 6, 4)",
        (1, 6, 4),
        dtype=torch.float32,
        seed=6,
    ),
    _rotary(
        "a 2-d x (L, D) with a single pair, base 100, x (7, 2)",
        (7, 2),
        base=100.0,
        seed=7,
    ),
    _rotary(
        "far positions (up to 10,000 tokens): the angles need float64, x (4, 16)",
        (4, 16),
        positions=torch.tensor([0, 1, 1000, 10_000]),
        seed=8,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the two pairings swapped (split halves by default)",
        [("if interleaved:", "if not interleaved:")],
        [
            "FAIL  1. interleaved pairs",
            "FAIL  2. split-half pairs",
            "first differing entry: output[0, 1, 0]",
            "What the failures point to:\n  - your result pairs the features the other way",
        ],
    ),
    (
        "the angle's sign flipped (rotation the wrong way)",
        [
            (
                "first * cos - second * sin,\n        first * sin + second * cos,",
                "first * cos + second * sin,\n        -first * sin + second * cos,",
            )
        ],
        [
            "FAIL  1.",
            "first differing entry: output[0, 1, 0]",
            "(a, b) -> (a cos t - b sin t, a sin t + b cos t)",
            "What the failures point to:\n  - your pairs turn the reverse way, by -t instead of t\n",
        ],
    ),
    (
        "exponent i/D instead of 2i/D",
        [("pair / head_dim", "pair / 2 / head_dim")],
        [
            "FAIL  1.",
            "first differing entry: output[0, 1, 2]",
            "pass  7. a 2-d x (L, D) with a single pair",
        ],
    ),
    (
        "explicit positions ignored",
        [("if positions is None:", "if True:")],
        [
            "pass  1.",
            "pass  2.",
            "FAIL  3. explicit positions",
            "positions=[3, 0, 7, 100, 2]",
        ],
    ),
    (
        "angles in float32 (torch.arange without a dtype)",
        [
            (
                "torch.arange(0, head_dim, 2, dtype=torch.float64)",
                "torch.arange(0, head_dim, 2)",
            )
        ],
        [
            "pass  1.",
            "FAIL  8. far positions",
            "the largest difference is only",
            "compute the angles in float64",
        ],
    ),
    (
        "a float64 result whatever the dtype of x",
        [(".to(x.dtype)", "")],
        [
            "pass  5.",
            "FAIL  6. float32 x",
            "expected: output of dtype torch.float32 (the dtype of x)",
        ],
    ),
]
