"""The checks of the coding exercises of chapter "Attention without the
matrix": the online softmax, one tile's update of FlashAttention's forward,
and a tile's score gradient in its backward.

As in :mod:`tinyformer_exercises.checks`: float64 inputs, the library's
answer (or exact attention) as the reference, the input named in the
student's words; where a result matches a known slip, a line says which."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tinyformer.models.flash import _finite_or_zero, online_softmax
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    call,
    compare_close,
    matches,
    seeded_randn,
)

__all__ = ["FLASH_CHECKS"]

Functions = dict[str, Callable[..., Any]]


# -- online-softmax
# -------------------------------------------------------------------------------------------

SOFTMAX_READING = (
    "per block: m' = max(m, max of the block), l' = l exp(m - m') + sum exp(x - m') over the block; "
    "at the end exp(x - m) / l; start from m = -inf, l = 0, and read -inf - (-inf) as 0 (a row of -inf gives zeros)"
)


def _online_slip(x: Tensor, block_size: int, slip: str) -> Tensor:
    """The online softmax with one known slip, to name it when a student's
    result equals it."""
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    s = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new = torch.maximum(m, block.amax(-1))
        safe = _finite_or_zero(new)
        if slip == "no-rescale":
            s = s + torch.exp(block - safe[..., None]).sum(-1)
        m = new
    return torch.exp(x - _finite_or_zero(m)[..., None]) / s[..., None]


def _softmax_hints(got: object, x: Tensor, block_size: int) -> list[str]:
    lines = []
    if isinstance(got, Tensor) and got.is_floating_point():
        if torch.isnan(got).any() and not torch.isnan(x).any():
            lines.append(
                "your result has NaN: an exp of a score overflowed, or an infinite factor met a zero "
                "(before the first block the running maximum is -inf)"
            )
        if matches(got, _online_slip(x, block_size, "no-rescale")):
            lines.append(
                "your running sum was not rescaled when the maximum grew"
            )
    return lines


def _softmax_check(
    shape: tuple[int, ...],
    block_size: int,
    note: str,
    *,
    seed: int,
    spread: float = 1.0,
    blocked_rows: tuple[int, ...] = (),
) -> Check:
    text = f"online_softmax(scores {shape}, block_size={block_size})"

    def run(f: Functions) -> None:
        x = seeded_randn(*shape, seed=seed) * spread
        for row in blocked_rows:
            x[row] = -math.inf
        want = online_softmax(x, block_size=block_size)
        got = call(
            f["online_softmax"], text, x.clone(), block_size=block_size
        )
        try:
            compare_close("softmax", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, scores of spread {spread:g}",
                *failed.lines,
                mistakes=_softmax_hints(got, x, block_size),
                reading=SOFTMAX_READING,
            ) from None

    return Check(f"{text}: {note}", run)


# -- tile-update
# ----------------------------------------------------------------------------------------------

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


# -- tile-score-gradient
# ----------------------------------------------------------------------------------------------

GRADIENT_READING = (
    "dS = P * (dP - delta) with delta = rowsum(dO * O) (the papers' D), one number per query row, from the "
    "whole row's output and its gradient: a tile sees only some of the keys, so rowsum(P * dP) over the "
    "tile is not delta"
)


def _gradient_hints(
    got: object, probs: Tensor, grad_probs: Tensor, want: Tensor
) -> list[str]:
    lines = []
    if matches(
        got,
        probs * (grad_probs - (probs * grad_probs).sum(-1, keepdim=True)),
    ):
        lines.append(
            "you computed delta from this tile alone, rowsum(P * dP) over its keys: that is delta only when "
            "the tile holds every key of the row"
        )
    if matches(got, probs * grad_probs):
        lines.append("you left out delta")
    if matches(got, -want):
        lines.append("your sign is reversed")
    return lines


def _gradient_check(
    seq_len_k: int, k_start: int, k_stop: int, note: str, *, seed: int
) -> Check:
    text = (
        f"tile_score_gradient for keys {k_start}:{k_stop} of {seq_len_k} "
        f"(probs (2, 4, {k_stop - k_start}), out (2, 4, 3))"
    )

    def run(f: Functions) -> None:
        query = seeded_randn(2, 4, 5, seed=seed)
        key = seeded_randn(2, seq_len_k, 5, seed=seed + 1)
        value = seeded_randn(2, seq_len_k, 3, seed=seed + 2)
        grad_out = seeded_randn(2, 4, 3, seed=seed + 3)
        scores = (
            query @ key.transpose(-2, -1) / math.sqrt(5)
        ).requires_grad_()
        out = torch.softmax(scores, dim=-1) @ value
        (grad_scores,) = torch.autograd.grad(out, scores, grad_out)  # exact
        with torch.no_grad():
            probs = torch.softmax(scores, dim=-1)[..., k_start:k_stop]
            grad_probs = grad_out @ value[:, k_start:k_stop].transpose(
                -2, -1
            )
            out = out.detach()
        want = grad_scores[..., k_start:k_stop]
        got = call(
            f["tile_score_gradient"],
            text,
            probs.clone(),
            grad_probs.clone(),
            out.clone(),
            grad_out.clone(),
        )
        try:
            compare_close("dS", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}; expected is autograd's gradient of the scores",
                *failed.lines,
                mistakes=_gradient_hints(got, probs, grad_probs, want),
                reading=GRADIENT_READING,
            ) from None

    return Check(f"{text}: {note}", run)


FLASH_CHECKS: dict[str, list[Check]] = {
    "online-softmax": [
        _softmax_check((3, 8), 4, "two blocks of 4", seed=1),
        _softmax_check(
            (2, 3, 10), 3, "blocks of 3: the last one shorter", seed=2
        ),
        _softmax_check(
            (4, 7), 1, "one entry at a time, as a stream", seed=3
        ),
        _softmax_check((2, 5), 16, "one block longer than the row", seed=4),
        _softmax_check(
            (3, 12),
            4,
            "scores in the thousands, where exp(x) overflows",
            seed=5,
            spread=1000.0,
        ),
        _softmax_check(
            (3, 6),
            2,
            "a row of -inf (a query that may see no key) gives zeros",
            seed=6,
            blocked_rows=(1,),
        ),
    ],
    "tile-update": [
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
    ],
    "tile-score-gradient": [
        _gradient_check(6, 0, 6, "one tile that holds every key", seed=1),
        _gradient_check(
            10, 3, 7, "keys 3 to 6 of 10: a tile in the middle", seed=2
        ),
        _gradient_check(9, 8, 9, "the last key alone", seed=3),
        _gradient_check(12, 0, 4, "the first of three tiles", seed=4),
    ],
}
