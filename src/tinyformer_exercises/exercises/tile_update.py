"""Coding exercise tile-update: update a query block's running maximum,
running sum and unnormalised output with one tile of scores, as
FlashAttention's forward does.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/tile_update.py``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tinyformer.models.flash import _finite_or_zero
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    reseedable,
    seeded_randn,
)

EXERCISE = Exercise(
    id="tile-update",
    functions=("tile_update",),
    template="tile_update.py",
    chapter="flash-attention",
    objective="update a query block's running maximum, running sum and unnormalised output with one tile of scores, as FlashAttention's forward does",
    references=(
        "tinyformer.models.flash.flash_attention",
        "tinyformer.models.flash._FlashAttention.forward",
    ),
)


TILE_READING = (
    "m' = max(m, rowmax S); P = exp(S - m'); c = exp(m - m'); l' = c l + rowsum P; O' = c O + P V; "
    "read -inf - (-inf) as 0 (a row that has seen only -inf keeps m' = -inf, l' = 0, O' = 0)"
)


def _tile_reference(
    running_max: Tensor,
    running_sum: Tensor,
    acc: Tensor,
    scores: Tensor,
    value: Tensor,
    slip: str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    new_max = torch.maximum(running_max, scores.amax(-1))
    safe = _finite_or_zero(new_max)
    probs = torch.exp(scores - safe[..., None])
    correction = torch.exp(running_max - safe)
    if slip == "inverted":
        correction = torch.exp(safe - _finite_or_zero(running_max))
    acc_correction = (
        torch.ones_like(correction) if slip == "acc" else correction
    )
    return (
        new_max,
        correction * running_sum + probs.sum(-1),
        acc_correction[..., None] * acc + probs @ value,
    )


def _tile_hints(got: object, args: tuple[Tensor, ...]) -> list[str]:
    if not isinstance(got, tuple) or len(got) != 3:
        return []
    lines = []
    if matches(got[2], _tile_reference(*args, slip="acc")[2]):
        lines.append(
            "your output was not rescaled when the maximum grew, as the running sum was"
        )
    if matches(got[1], _tile_reference(*args, slip="inverted")[1]):
        lines.append(
            "you rescaled by exp(m' - m), a factor above 1: the inverse of the rescaling"
        )
    if any(
        isinstance(t, Tensor)
        and t.is_floating_point()
        and torch.isnan(t).any()
        for t in got
    ):
        lines.append(
            "NaN in your result where the running maximum is still -inf (the first tile, or a row masked "
            "so far): -inf - (-inf) is NaN"
        )
    return lines


def _state(
    batch: tuple[int, ...],
    rows: int,
    value_dim: int,
    seed: int,
    fresh: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    if fresh:
        return (
            torch.full((*batch, rows), -math.inf, dtype=torch.float64),
            torch.zeros(*batch, rows, dtype=torch.float64),
            torch.zeros(*batch, rows, value_dim, dtype=torch.float64),
        )
    running_max = seeded_randn(*batch, rows, seed=seed)
    running_sum = 1 + seeded_randn(*batch, rows, seed=seed + 1).abs()
    acc = seeded_randn(*batch, rows, value_dim, seed=seed + 2)
    return running_max, running_sum, acc


def _compare_state(
    got: object, want: tuple[Tensor, Tensor, Tensor]
) -> None:
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailed(
            "expected: a tuple (new running_max, new running_sum, new acc)",
            f"got:      {type(got).__name__}",
        )
    for name, a, b in zip(
        ("running_max", "running_sum", "acc"), got, want, strict=True
    ):
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            finite = ~torch.isneginf(b)
            if torch.isneginf(b).any():
                if not torch.equal(
                    torch.isneginf(a.detach().cpu()), ~finite
                ):
                    raise CheckFailed(
                        f"expected: {name} -inf exactly where no finite score has been seen",
                        f"got:      {name} = {a.detach().cpu().tolist()}",
                    )
                a, b = (
                    a.masked_fill(~finite, 0.0),
                    b.masked_fill(~finite, 0.0),
                )
        compare_close(name, a, b, **FLOAT64_TOLERANCE)


@reseedable
def _tile_check(
    rows: int,
    keys: int,
    note: str,
    *,
    seed: int,
    fresh: bool = False,
    masked_rows: tuple[int, ...] = (),
    spread: float = 1.0,
) -> Check:
    text = f"tile_update(state of {rows} rows, scores ({rows}, {keys}), value ({keys}, 3))"

    def run(f: Functions) -> None:
        state = _state((2,), rows, 3, seed, fresh)
        scores = seeded_randn(2, rows, keys, seed=seed + 3) * spread
        for row in masked_rows:
            scores[:, row] = -math.inf
        value = seeded_randn(2, keys, 3, seed=seed + 4)
        args = (*state, scores, value)
        want = _tile_reference(*args)
        got = call(f["tile_update"], text, *(t.clone() for t in args))
        try:
            _compare_state(got, want)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_tile_hints(got, args),
                reading=TILE_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def _tile_chain_check(seq_len: int, block_size: int) -> Check:
    text = (
        f"your tile_update chained over the {math.ceil(seq_len / block_size)} key blocks of "
        f"{seq_len} keys, then O / l"
    )

    def run(f: Functions) -> None:
        query = seeded_randn(2, 5, 4, seed=21)
        key = seeded_randn(2, seq_len, 4, seed=22)
        value = seeded_randn(2, seq_len, 3, seed=23)
        scores = query @ key.transpose(-2, -1) / 2.0
        state = _state((2,), 5, 3, 0, fresh=True)
        for start in range(0, seq_len, block_size):
            stop = start + block_size
            state = call(
                f["tile_update"],
                f"tile_update(..., scores[:, :, {start}:{stop}], value[:, {start}:{stop}])",
                *state,
                scores[..., start:stop],
                value[:, start:stop],
            )
            if not isinstance(state, tuple) or len(state) != 3:
                raise CheckFailed(
                    "expected: a tuple (new running_max, new running_sum, new acc)",
                    f"got:      {type(state).__name__}",
                )
        out = state[2] / state[1][..., None]
        compare_close(
            "attention",
            out,
            torch.softmax(scores, dim=-1) @ value,
            **FLOAT64_TOLERANCE,
        )

    return Check(f"{text}: equals softmax(S) V", run)


CHECKS = [
    _tile_check(
        4,
        5,
        "the first tile, from m = -inf, l = 0, O = 0",
        seed=1,
        fresh=True,
    ),
    _tile_check(
        4,
        5,
        "a later tile, whose scores raise some rows' maximum",
        seed=2,
        spread=3.0,
    ),
    _tile_check(
        3,
        2,
        "a tile with small scores: the maximum stays",
        seed=3,
        spread=0.1,
    ),
    _tile_check(
        4,
        3,
        "the first tile with row 2 fully masked (-inf)",
        seed=4,
        fresh=True,
        masked_rows=(2,),
    ),
    _tile_chain_check(11, 4),
    _tile_chain_check(6, 1),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the output not rescaled",
        [
            (
                "    new_acc = correction[..., None] * acc + probs @ value",
                "    new_acc = acc + probs @ value",
            )
        ],
        [
            "pass  1. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "FAIL  2. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "your output was not rescaled",
            "FAIL  5. your tile_update chained over the 3 key blocks of 11 keys",
        ],
    ),
    (
        "the rescaling factor inverted",
        [
            (
                "torch.exp(running_max - safe)",
                "torch.exp(safe - running_max)",
            )
        ],
        [
            "FAIL  1. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "NaN in your result where the running maximum is still -inf",
            "you rescaled by exp(m' - m), a factor above 1",
        ],
    ),
]
