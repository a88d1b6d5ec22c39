"""Coding exercise repeat-kv-heads: share each key/value head among a group
of query heads, as grouped-query and multi-query attention do.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/repeat_kv_heads.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.models.attention import repeat_kv_heads
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    require_floating,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="repeat-kv-heads",
    functions=("repeat_kv_heads",),
    template="repeat_kv_heads.py",
    chapter="decoder",
    objective="share each key/value head among a group of query heads, as grouped-query and multi-query attention do",
    references=("tinyformer.models.attention.repeat_kv_heads",),
)


HEADS_READING = (
    "out[:, h] is x[:, h // (H / H_kv)]: each key/value head serves H / H_kv consecutive query heads, "
    "so for H = 4, H_kv = 2 the query heads read key/value heads 0, 0, 1, 1"
)


def _heads_read(got: object, x: Tensor) -> list[int] | None:
    """Which head of ``x`` each head of ``got`` equals, or None where one
    equals none."""
    if (
        not isinstance(got, Tensor)
        or got.dim() != 4
        or got.shape[0] != x.shape[0]
        or got.shape[2:] != x.shape[2:]
        or not got.dtype.is_floating_point
    ):
        return None
    got = got.detach().to(torch.float64).cpu()
    read = []
    for h in range(got.size(1)):
        match = [
            k
            for k in range(x.size(1))
            if torch.allclose(got[:, h], x[:, k], **FLOAT64_TOLERANCE)
        ]
        if not match:
            return None
        read.append(match[0])
    return read


def _heads_hint(got: object, x: Tensor, num_heads: int) -> list[str]:
    num_kv_heads = x.size(1)
    groups = num_heads // num_kv_heads
    want = [h // groups for h in range(num_heads)]
    if isinstance(got, Tensor) and got.shape != (
        *x.shape[:1],
        num_heads,
        *x.shape[2:],
    ):
        if got.numel() == x.numel() * groups:
            return [
                f"the result has the right number of entries but the shape {tuple(got.shape)}: you repeated "
                "along the length or the width of x (N, H_kv, S, D), not along its heads"
            ]
        return []
    read = _heads_read(got, x)
    if read is None or read == want:
        return []
    lines = [
        f"your query heads 0, ..., {num_heads - 1} read key/value heads {read}; they must read {want}"
    ]
    if read == [h % num_kv_heads for h in range(num_heads)]:
        lines.append(
            "head h reads h % H_kv: the heads come out tiled (0, 1, 0, 1, ...), as .repeat gives, or an "
            "expand over a new dimension put before the heads; grouped-query attention gives each group of "
            "consecutive query heads one key/value head (the new dimension after the heads: 0, 0, 1, 1, ...)"
        )
    return lines


@reseedable
def _repeat(
    shape: tuple[int, int, int, int], num_heads: int, note: str, seed: int
) -> Check:
    text = f"repeat_kv_heads(x {shape}, num_heads={num_heads})"

    def run(f: Functions) -> None:
        x = _randn(*shape, seed=seed)
        want = repeat_kv_heads(x, num_heads).clone()
        got = call(f["repeat_kv_heads"], text, x.clone(), num_heads)
        try:
            compare_close("out", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_heads_hint(got, x, num_heads),
                reading=HEADS_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def _gqa_reference(
    query: Tensor, key: Tensor, value: Tensor, *, is_causal: bool
) -> Tensor:
    """PyTorch's own grouped-query attention (``enable_gqa``, torch >= 2.5;
    before it, query head h given key/value head h // (H / H_kv) by
    indexing)."""
    try:
        return F.scaled_dot_product_attention(
            query, key, value, is_causal=is_causal, enable_gqa=True
        )
    except TypeError:
        groups = query.size(1) // key.size(1)
        heads = torch.arange(query.size(1)) // groups
        return F.scaled_dot_product_attention(
            query, key[:, heads], value[:, heads], is_causal=is_causal
        )


@reseedable
def _grouped_attention(
    batch_size: int,
    num_heads: int,
    num_kv_heads: int,
    seq_len: int,
    head_dim: int,
    seed: int,
) -> Check:
    kv_shape = (batch_size, num_kv_heads, seq_len, head_dim)
    title = (
        f"causal attention of {num_heads} query heads over {num_kv_heads} key/value heads with your repeated keys "
        f"and values equals F.scaled_dot_product_attention(..., enable_gqa=True)"
    )

    def run(f: Functions) -> None:
        query = _randn(batch_size, num_heads, seq_len, head_dim, seed=seed)
        key = _randn(*kv_shape, seed=seed + 1)
        value = _randn(*kv_shape, seed=seed + 2)
        want = _gqa_reference(query, key, value, is_causal=True)
        shape = (batch_size, num_heads, seq_len, head_dim)
        repeated = []
        for name, x in (("key", key), ("value", value)):
            text = (
                f"repeat_kv_heads({name} {kv_shape}, num_heads={num_heads})"
            )
            got = call(f["repeat_kv_heads"], text, x.clone(), num_heads)
            try:
                got = require_floating(
                    f"repeat_kv_heads({name})", got, shape
                )
            except CheckFailed as failed:
                raise CheckFailed(
                    f"input: {text}",
                    *failed.lines,
                    mistakes=_heads_hint(got, x, num_heads),
                ) from None
            repeated.append(got.detach().to(torch.float64))
        output = F.scaled_dot_product_attention(
            query, *repeated, is_causal=True
        )
        try:
            compare_close("output", output, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: query {tuple(query.shape)}, key and value {kv_shape}; "
                f"output = F.scaled_dot_product_attention(query, repeat_kv_heads(key, {num_heads}), "
                f"repeat_kv_heads(value, {num_heads}), is_causal=True)",
                "expected: output (computed by PyTorch with enable_gqa=True, in float64)",
                *failed.lines[1:],
                mistakes=_heads_hint(repeated[0], key, num_heads),
                reading=HEADS_READING,
            ) from None

    return Check(title, run)


CHECKS = [
    _repeat(
        (2, 2, 5, 4),
        6,
        "2 key/value heads, each serving 3 query heads",
        seed=1,
    ),
    _repeat(
        (1, 1, 3, 5),
        4,
        "one key/value head for all 4 query heads (multi-query attention)",
        seed=2,
    ),
    _repeat(
        (2, 3, 4, 2),
        3,
        "H_kv = H: every query head has its own key/value head, x unchanged",
        seed=3,
    ),
    _repeat(
        (3, 4, 2, 3),
        8,
        "4 key/value heads, each serving 2 query heads, batch of 3",
        seed=4,
    ),
    _grouped_attention(2, 6, 2, 5, 4, seed=5),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "heads tiled with .repeat (head h reads h % H_kv) instead of repeated in place",
        [
            (
                "x.repeat_interleave(groups, dim=1)",
                "x.repeat(1, groups, 1, 1)",
            )
        ],
        [
            "FAIL  1.",
            "pass  2. repeat_kv_heads(x (1, 1, 3, 5), num_heads=4)",
            "first differing entry: out[0, 1, 0, 0]",
            "your query heads 0, ..., 5 read key/value heads [0, 1, 0, 1, 0, 1]; they must read [0, 0, 0, 1, 1, 1]",
            "head h reads h % H_kv: the heads come out tiled (0, 1, 0, 1, ...), as .repeat gives",
            "FAIL  5. causal attention of 6 query heads",
        ],
    ),
    (
        "an expand over a new dimension before the heads (tiles them, as .repeat does)",
        [
            (
                "x.repeat_interleave(groups, dim=1)",
                "x[:, None].expand(x.size(0), groups, *x.shape[1:]).reshape(x.size(0), -1, *x.shape[2:])",
            )
        ],
        [
            "FAIL  1.",
            "your query heads 0, ..., 5 read key/value heads [0, 1, 0, 1, 0, 1]",
            "or an expand over a new dimension put before the heads",
        ],
    ),
    (
        "repeated along the length (dim 2) instead of the heads",
        [("dim=1)", "dim=2)")],
        [
            "FAIL  1.",
            "expected: out of shape (2, 6, 5, 4)",
            "got:      out of shape (2, 2, 15, 4)",
            "you repeated along the length or the width of x (N, H_kv, S, D), not along its heads",
            "pass  3. repeat_kv_heads(x (2, 3, 4, 2), num_heads=3)",
        ],
    ),
    (
        "the heads repeated in float32 (the checks give float64 keys)",
        [
            (
                "x.repeat_interleave(groups, dim=1)",
                "x.float().repeat_interleave(groups, dim=1)",
            )
        ],
        [
            "FAIL  1. repeat_kv_heads(x (2, 2, 5, 4), num_heads=6)",
            "expected: out with dtype torch.float64",
            "got:      out with dtype torch.float32",
        ],
    ),
]
