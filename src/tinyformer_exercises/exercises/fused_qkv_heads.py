"""Coding exercise fused-qkv-heads: split a fused query-key-value projection
into heads, in the two layouts that models store it in.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/fused_qkv_heads.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.attention import MultiHeadAttention
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    describe,
    matches,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="fused-qkv-heads",
    functions=("split_fused_qkv",),
    template="fused_qkv_heads.py",
    chapter="multi-head-attention",
    objective="split a fused query-key-value projection into heads, in the two layouts that models store it in",
    references=(
        "tinyformer.models.attention.MultiHeadAttention.split_heads",
        "tinyformer.models.attention.MultiHeadAttention.merge_heads",
    ),
    variant_of=(
        "tinyformer.models.attention.MultiHeadAttention.split_heads",
        "tinyformer.models.attention.MultiHeadAttention.merge_heads",
    ),
    variant_differs="the chapter lists the split of one projection; the exercise splits the output of one fused projection of all three, in GPT-2's [q | k | v] layout and GPT-NeoX's per-head one",
)


QKV_LAYOUTS = ("gpt2", "per-head")

QKV_READING = (
    'layout="gpt2" is [q | k | v], each d_model wide and split into heads as split_heads does; '
    'layout="per-head" is head after head, [q_0 k_0 v_0 | q_1 k_1 v_1 | ...], 3 * head_dim features per head'
)


def _fused_rows(mha: MultiHeadAttention, layout: str) -> list[Tensor]:
    """The row indices of ``[q_proj; k_proj; v_proj]`` (stacked, 3E rows)
    in the order the fused projection of ``layout`` stores them."""
    d_model, head_dim = mha.d_model, mha.head_dim
    if layout == "gpt2":
        return [torch.arange(3 * d_model)]
    return [
        torch.arange(head_dim) + part * d_model + head * head_dim
        for head in range(mha.num_heads)
        for part in range(3)
    ]


@torch.no_grad()
def _fused_qkv(mha: MultiHeadAttention, x: Tensor, layout: str) -> Tensor:
    """``x`` through one ``nn.Linear(E, 3E)`` that holds ``mha``'s three
    projections in ``layout``: ``(N, L, 3E)``."""
    weight = torch.cat(
        [mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]
    )
    bias = torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias])
    rows = torch.cat(_fused_rows(mha, layout))
    return x @ weight[rows].T + bias[rows]


@torch.no_grad()
def _qkv_mistakes(
    got: object, mha: MultiHeadAttention, x: Tensor, layout: str
) -> list[str]:
    """The common mistakes ``got`` (a tuple) matches."""
    if not isinstance(got, tuple) or len(got) != 3:
        return []
    batch_size, seq_len, _ = x.shape
    qkv = _fused_qkv(mha, x, layout)
    other = QKV_LAYOUTS[1 - QKV_LAYOUTS.index(layout)]
    mistakes = []
    for name, wrong in (
        (
            f'you read the layout="{layout}" features as if they were laid out "{other}"',
            _expected_qkv(mha, qkv, other, from_fused=True),
        ),
        (
            "your heads come from reshaping (N, L, E) straight to (N, H, L, D), without the transpose: "
            "each head then holds features of several positions",
            tuple(
                part.reshape(
                    batch_size, mha.num_heads, seq_len, mha.head_dim
                )
                for part in _parts(qkv, mha, layout)
            ),
        ),
    ):
        if all(matches(g, w) for g, w in zip(got, wrong, strict=True)):
            mistakes.append(name)
    return mistakes


def _parts(
    qkv: Tensor, mha: MultiHeadAttention, layout: str
) -> tuple[Tensor, Tensor, Tensor]:
    """The query, key and value features ``(N, L, E)`` of a fused output."""
    if layout == "gpt2":
        return tuple(qkv.split(mha.d_model, dim=-1))
    batch_size, seq_len, _ = qkv.shape
    per_head = qkv.reshape(
        batch_size, seq_len, mha.num_heads, 3, mha.head_dim
    )
    return tuple(per_head[..., part, :].flatten(-2) for part in range(3))


def _expected_qkv(
    mha: MultiHeadAttention,
    x: Tensor,
    layout: str,
    *,
    from_fused: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """What the split gives: the library's split of each projection (or,
    with ``from_fused``, of the parts of ``x``, a fused output)."""
    if from_fused:
        return tuple(
            mha.split_heads(part).clone() for part in _parts(x, mha, layout)
        )
    return tuple(
        mha.split_heads(proj(x)).clone()
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj)
    )


@reseedable
def _fused(
    shape: tuple[int, int, int], num_heads: int, layout: str, seed: int
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        d_model = shape[-1]
        mha = MultiHeadAttention(d_model, num_heads).double()
        x = _randn(*shape, seed=seed)
        qkv = _fused_qkv(mha, x, layout)
        text = f'split_fused_qkv(qkv {tuple(qkv.shape)}, num_heads={num_heads}, layout="{layout}")'
        with torch.no_grad():
            want = _expected_qkv(mha, x, layout)
        got = call(
            f["split_fused_qkv"], text, qkv, num_heads, layout=layout
        )
        if not isinstance(got, tuple) or len(got) != 3:
            raise CheckFailed(
                f"input: {text}",
                "expected: a tuple (q, k, v) of three (N, H, L, D) tensors",
                f"got:      {describe(got)}",
            )
        for name, g, w in zip("qkv", got, want, strict=True):
            try:
                compare_close(name, g, w, **FLOAT64_TOLERANCE)
            except CheckFailed as failed:
                raise CheckFailed(
                    f"input: {text}",
                    f"(qkv = x @ W.T + b, with W the rows of q_proj, k_proj and v_proj of a layer of {num_heads} "
                    f'heads, laid out "{layout}"; {name} must be that layer\'s {name}, split into heads)',
                    *failed.lines,
                    mistakes=_qkv_mistakes(got, mha, x, layout),
                    reading=QKV_READING,
                ) from None

    heads = "1 head" if num_heads == 1 else f"{num_heads} heads"
    return Check(
        f'layout "{layout}": x {shape}, {heads}, (N, L, 3E) to three (N, H, L, D)',
        run,
    )


CHECKS = [
    _fused((2, 5, 12), 3, "gpt2", seed=1),
    _fused((1, 3, 8), 2, "gpt2", seed=2),
    _fused((2, 5, 12), 3, "per-head", seed=3),
    _fused((1, 4, 16), 4, "per-head", seed=4),
    _fused((2, 3, 6), 1, "per-head", seed=5),
    _fused((3, 4, 10), 5, "gpt2", seed=6),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "split by reshaping straight to (N, H, L, D), without the transpose",
        [
            (
                "part.reshape(\n                batch_size, seq_len, num_heads, head_dim\n            ).transpose(1, 2)",
                "part.reshape(batch_size, num_heads, seq_len, head_dim)",
            )
        ],
        [
            'FAIL  1. layout "gpt2"',
            "first differing entry: q[0, 0, 1, 0]",
            "without the transpose",
        ],
    ),
    (
        "the per-head layout read as [q | k | v]",
        [('if layout == "gpt2":', 'if layout in ("gpt2", "per-head"):')],
        [
            "pass  1.",
            'FAIL  3. layout "per-head"',
            'you read the layout="per-head" features as if they were laid out "gpt2"',
        ],
    ),
    (
        "the per-head layout split into q, k, v before the heads",
        [
            (
                "heads = qkv.reshape(\n            batch_size, seq_len, num_heads, 3 * head_dim\n        )\n        return heads.transpose(1, 2).split(head_dim, dim=-1)",
                "heads = qkv.reshape(batch_size, seq_len, 3, num_heads, head_dim)\n        return tuple(heads[:, :, i].transpose(1, 2) for i in range(3))",
            )
        ],
        ["pass  1.", "FAIL  3.", 'laid out "gpt2"'],
    ),
]
