"""The checks of the coding exercises of chapter "Long context": the rotary
speeds of position interpolation and NTK-aware scaling, YaRN's ramp, and a
sliding-window mask with attention sinks.

As in :mod:`tinyformer_exercises.checks`: float64 inputs, the library's
answer as the reference, the input named in the student's words; where a
result matches a known slip, a line says which."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tinyformer.models.decoder import sliding_window_mask
from tinyformer.models.positional import RopeScaling, rotary_frequencies
from tinyformer.models.positional.scaling import _yarn_ramp
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    call,
    compare_bool,
    compare_close,
    matches,
)

__all__ = ["CONTEXT_CHECKS"]

Functions = dict[str, Callable[..., Any]]


# -- scaled-frequencies
# ------------------------------------------------------------------------------------

SCALED_READING = (
    "theta_i = base^(-2i/D) for i = 0 .. D/2 - 1; linear: theta_i / s; ntk: the same formula with the base "
    "base * s^(D / (D - 2))"
)


def _trained(head_dim: int, base: float) -> Tensor:
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
    trained = _trained(head_dim, base)
    lines = []
    if rope_type == "linear" and matches(got, trained * factor):
        lines.append(
            "you multiplied the speeds by s: interpolation slows every pair, so that s times as many "
            "positions turn through the trained angles"
        )
    if rope_type == "ntk" and matches(
        got, _trained(head_dim, base * factor)
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
        want = _trained(head_dim, base)
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


# -- yarn-frequencies
# ----------------------------------------------------------------------------------------

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
    trained = _trained(head_dim, base)
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


# -- sliding-window-mask
# -------------------------------------------------------------------------------------

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
        lines.append(
            f"query {i} (position {past + i}) sees key {j}, in its future: your sinks escape the causal rule"
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


CONTEXT_CHECKS: dict[str, list[Check]] = {
    "scaled-frequencies": [
        _scaled_check(
            8, 10000.0, None, 1.0, "the trained speeds, 1, 0.1, 0.01, 0.001"
        ),
        _scaled_check(
            8, 10000.0, "linear", 4.0, "position interpolation by 4"
        ),
        _scaled_check(8, 10000.0, "ntk", 4.0, "NTK-aware scaling by 4"),
        _scaled_check(
            64,
            500000.0,
            "ntk",
            8.0,
            "Llama 3's width and base, stretched 8 times",
        ),
        _ntk_ends(16, 10000.0, 3.0),
    ],
    "yarn-frequencies": [
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
    ],
    "sliding-window-mask": [
        _window_check(6, 6, 3, 0, "no cache, a window of 3"),
        _window_check(
            5, 5, 1, 0, "a window of 1: each query sees only itself"
        ),
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
    ],
}
