"""The checks of every coding exercise: seeded float64 inputs, the library's
answer as the reference.

Each check names its input in the student's words; the edge cases are the
ones the library's own tests cover (a query row that may attend to nothing,
odd widths, L != S, a batch of one)."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tinyformer.models.attention import (
    MultiHeadAttention,
    _restrict_mask,
    causal_mask,
    scaled_dot_product_attention,
)
from tinyformer.models.encoder import EncoderLayer, PositionwiseFeedForward
from tinyformer.models.positional import (
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    relative_shift_matrix,
    sinusoidal_positional_encoding,
)
from tinyformer_exercises import EXERCISE_MODULES, EXERCISES
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    call,
    compare_bool,
    compare_close,
    describe,
    matches,
)
from tinyformer_exercises.checking import seeded_randn as _randn
from tinyformer_exercises.checks_context import CONTEXT_CHECKS
from tinyformer_exercises.checks_decoder import DECODER_CHECKS
from tinyformer_exercises.checks_flash import FLASH_CHECKS

__all__ = ["CHECKS"]

Functions = dict[str, Callable[..., Any]]
# A float32 result (the encoding table, a rotated float32 input, the ALiBi
# slopes and biases) passes the float64 comparison with this tolerance.
ENCODING_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _shapes(**tensors: Tensor) -> str:
    return ", ".join(
        f"{name} {tuple(t.shape)}" for name, t in tensors.items()
    )


def _precision_hint(got: object, want: Tensor) -> list[str]:
    """A line for a result that is right but for rounding: float32 angles
    lose about 1e-7 of every radian."""
    if (
        not isinstance(got, Tensor)
        or got.shape != want.shape
        or not got.dtype.is_floating_point
    ):
        return []
    gap = (got.detach().to(torch.float64).cpu() - want).abs().max().item()
    if 0 < gap < 1e-3:
        return [
            f"the largest difference is only {gap:.1e}: compute the angles in float64, as the library does "
            "(a float32 angle loses about 1e-7 of every radian; torch.arange(n) / d and .float() give float32)"
        ]
    return []


def _same_dtype(name: str, got: object, dtype: torch.dtype) -> None:
    if isinstance(got, Tensor) and got.dtype != dtype:
        raise CheckFailed(
            f"expected: {name} of dtype {dtype} (the dtype of x)",
            f"got:      {describe(got)}",
        )


def _pair(name: str, result: object) -> tuple[object, object]:
    if not isinstance(result, tuple) or len(result) != 2:
        kind = (
            f"a tuple of {len(result)}"
            if isinstance(result, tuple)
            else type(result).__name__
        )
        raise CheckFailed(
            f"expected: {name} to return a tuple (output, weights)",
            f"got:      {kind}",
        )
    return result


# -- causal-mask
# ------------------------------------------------------------------------------------------


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


# -- scaled-dot-product-attention
# ------------------------------------------------------------------------


def _attention(
    title: str,
    query_shape: tuple[int, ...],
    key_shape: tuple[int, ...],
    value_width: int,
    *,
    mask: Callable[[int, int], Tensor] | None = None,
    is_causal: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        query = _randn(*query_shape, seed=seed)
        key = _randn(*key_shape, seed=seed + 1)
        value = _randn(*key_shape[:-1], value_width, seed=seed + 2)
        attn_mask = (
            None if mask is None else mask(query_shape[-2], key_shape[-2])
        )
        kwargs: dict[str, Any] = {"is_causal": True} if is_causal else {}
        inputs = _shapes(query=query, key=key, value=value)
        if attn_mask is not None:
            inputs += (
                f", attn_mask {tuple(attn_mask.shape)} {attn_mask.dtype}"
            )
        text = f"scaled_dot_product_attention({inputs}{', is_causal=True' if is_causal else ''})"
        # the reference first: a solution that changes its inputs in place
        # cannot change what is expected
        want_output, want_weights = scaled_dot_product_attention(
            query, key, value, attn_mask, **kwargs
        )
        result = call(
            f["scaled_dot_product_attention"],
            text,
            query,
            key,
            value,
            attn_mask,
            **kwargs,
        )
        output, weights = _pair("scaled_dot_product_attention", result)
        try:
            compare_close(
                "weights", weights, want_weights, **FLOAT64_TOLERANCE
            )
            compare_close(
                "output", output, want_output, **FLOAT64_TOLERANCE
            )
        except CheckFailed as failed:
            mistakes = []
            width = query.size(-1)
            for factor, mistake in (
                (width**-0.5, SCALED_BY_D_K),
                (width**0.5, NOT_SCALED),
            ):
                slipped, _ = scaled_dot_product_attention(
                    query * factor, key, value, attn_mask, **kwargs
                )
                if matches(output, slipped):
                    mistakes.append(mistake)
            if is_causal:
                mistakes += _causal_mistakes(
                    output, query, key, value, attn_mask
                )
            raise failed.adding(
                f"input: {text}", mistakes=mistakes
            ) from None

    return Check(title, run)


BOTTOM_RIGHT = (
    "your causal mask is aligned at the bottom right (query i sees keys j <= i + S - L, as under a "
    "key-value cache); is_causal counts from the top-left corner, as F.scaled_dot_product_attention does"
)
CAUSAL_IGNORES_MASK = "with is_causal=True your function ignores attn_mask; both apply when both are given"


def _causal_mistakes(
    output: object,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
) -> list[str]:
    """The slips of ``is_causal`` that ``output`` matches."""
    seq_len_q, seq_len_k = query.size(-2), key.size(-2)
    bottom_right = torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril(
        seq_len_k - seq_len_q
    )
    shifted = _restrict_mask(attn_mask, bottom_right)
    mistakes = []
    if seq_len_q != seq_len_k:
        slipped, _ = scaled_dot_product_attention(
            query, key, value, shifted
        )
        if matches(output, slipped):
            mistakes.append(BOTTOM_RIGHT)
    if attn_mask is not None:
        slipped, _ = scaled_dot_product_attention(
            query, key, value, is_causal=True
        )
        if matches(output, slipped):
            mistakes.append(CAUSAL_IGNORES_MASK)
    return mistakes


SCALED_BY_D_K = "your scores are divided by d_k, the width of the queries and keys, not by its square root"
NOT_SCALED = "your scores are not scaled at all"


def _random_bool_mask(seq_len_q: int, seq_len_k: int) -> Tensor:
    allowed = (
        torch.rand(
            seq_len_q, seq_len_k, generator=torch.Generator().manual_seed(7)
        )
        < 0.6
    )
    allowed[:, 0] = True  # every query may attend to something
    return allowed


def _float_mask(seq_len_q: int, seq_len_k: int) -> Tensor:
    bias = _randn(seq_len_q, seq_len_k, seed=11)
    bias[:, -1] = float("-inf")  # the last key blocked for every query
    return bias


def _one_row_blocked(seq_len_q: int, seq_len_k: int) -> Tensor:
    allowed = _random_bool_mask(seq_len_q, seq_len_k)
    # query 1 may attend to nothing: zero weights, zero output, no NaN
    allowed[1] = False
    return allowed


# -- split-half-encoding, split-half-shift
# ------------------------------------------------------------------------


def _split_half_order(d_model: int) -> Tensor:
    """Column ``j`` of the split-half table is column ``order[j]`` of the
    interleaved one: the sines (even columns), then the cosines (odd)."""
    return torch.cat(
        (torch.arange(0, d_model, 2), torch.arange(1, d_model, 2))
    )


def split_half_table(
    seq_len: int, d_model: int, base: float = 10000.0
) -> Tensor:
    """The sinusoidal encoding with the sines of all pairs in the first
    ``ceil(E/2)`` columns and their cosines in the rest (float64), the
    library's interleaved table with its columns reordered."""
    table = sinusoidal_positional_encoding(
        seq_len, d_model, base=base, dtype=torch.float64
    )
    return table[:, _split_half_order(d_model)]


def split_half_shift(
    offset: int, d_model: int, base: float = 10000.0
) -> Tensor:
    """``R_k`` for the split-half table: the library's ``R_k`` with its rows
    and columns reordered as the table's columns are."""
    order = _split_half_order(d_model)
    return relative_shift_matrix(offset, d_model, base=base)[order][
        :, order
    ]


INTERLEAVED = (
    "your table interleaves sines and cosines (sin, cos, sin, ...), the paper's layout; this one puts the "
    "sines of all pairs first and their cosines after them"
)
SPLIT_HALF_READING = (
    "column i < ceil(E/2) is sin(pos * w_i) and column ceil(E/2) + i is cos(pos * w_i), with "
    "w_i = base^(-2i/d_model), the paper's speeds"
)


def _encoding(
    seq_len: int, d_model: int, base: float | None = None
) -> Check:
    def run(f: Functions) -> None:
        kwargs = {} if base is None else {"base": base}
        text = f"split_half_encoding({seq_len}, {d_model}{f', base={base:g}' if base else ''})"
        got = call(
            f["split_half_encoding"], text, seq_len, d_model, **kwargs
        )
        want = split_half_table(seq_len, d_model, **kwargs)
        try:
            compare_close("PE", got, want, **ENCODING_TOLERANCE)
        except CheckFailed as failed:
            interleaved = sinusoidal_positional_encoding(
                seq_len, d_model, dtype=torch.float64, **kwargs
            )
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=[INTERLEAVED]
                if d_model > 2 and matches(got, interleaved)
                else [],
                reading=SPLIT_HALF_READING,
            ) from None

    note = " (odd width: one more sine than cosines)" if d_model % 2 else ""
    return Check(
        f"{seq_len} positions, d_model = {d_model}, base {base or 10000.0:g}{note}",
        run,
    )


SHIFT_READING = (
    "R_k takes each pair i's (sin, cos) at pos to its (sin, cos) at pos + k; in the split-half layout pair i "
    "sits in rows and columns i (the sine) and E/2 + i (the cosine): R_k @ PE[pos] == PE[pos + k] for every pos"
)
INTERLEAVED_SHIFT = (
    "your matrix is R_k of the interleaved table, block diagonal with 2x2 blocks in rows 2i and 2i+1; "
    "in the split-half table pair i is in rows i and E/2 + i"
)


def _shift(
    offset: int, d_model: int, base: float | None = None, *, note: str = ""
) -> Check:
    def run(f: Functions) -> None:
        kwargs = {} if base is None else {"base": base}
        text = f"split_half_shift_matrix({offset}, {d_model}{f', base={base:g}' if base else ''})"
        want = split_half_shift(offset, d_model, **kwargs)
        got = call(
            f["split_half_shift_matrix"], text, offset, d_model, **kwargs
        )
        try:
            compare_close("R", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            interleaved = relative_shift_matrix(offset, d_model, **kwargs)
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=[
                    *(
                        [INTERLEAVED_SHIFT]
                        if d_model > 2 and matches(got, interleaved)
                        else []
                    ),
                    *_precision_hint(got, want),
                ],
                reading=SHIFT_READING,
            ) from None

    return Check(
        f"offset {offset}, d_model = {d_model}, base {base or 10000.0:g}{note}",
        run,
    )


def _shift_property(offset: int, d_model: int, seq_len: int) -> Check:
    def run(f: Functions) -> None:
        text = f"split_half_shift_matrix({offset}, {d_model})"
        got = call(f["split_half_shift_matrix"], text, offset, d_model)
        if (
            not isinstance(got, Tensor)
            or got.shape != (d_model, d_model)
            or not got.dtype.is_floating_point
        ):
            raise CheckFailed(
                f"input: {text}",
                f"expected: a floating ({d_model}, {d_model}) tensor",
                f"got:      {describe(got)}",
            )
        table = split_half_table(seq_len + offset, d_model)  # (L + k, E)
        # row pos: R_k @ PE[pos]
        shifted = table[:seq_len] @ got.detach().to(torch.float64).T
        try:
            compare_close(
                "shifted", shifted, table[offset:], **FLOAT64_TOLERANCE
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}, applied to PE[pos] for pos = 0, ..., {seq_len - 1} (the split-half table, float64)",
                f"shifted[pos] = R_{offset} @ PE[pos] must equal PE[pos + {offset}], whatever pos",
                *failed.lines[2:],
            ) from None

    return Check(
        f"R_{offset} @ PE[pos] == PE[pos + {offset}] for pos = 0, ..., {seq_len - 1} (d_model = {d_model})",
        run,
    )


# -- fused-qkv-heads
# --------------------------------------------------------------------------------------

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


# -- modules the student must not simply call (their forward is a reference of
# the exercise: tinyformer_exercises.EXERCISES, and it refuses to run in the
# child process)
# ---------------------------------------------------------------


SCALED_BY_D_MODEL = (
    "your scores are divided by the square root of d_model, the width of the whole embedding, "
    "not of the queries and keys a head compares"
)
NO_OUTPUT_PROJECTION = "your output is the heads side by side, without the output projection W^O"


@torch.no_grad()
def _multi_head_mistakes(
    got: object,
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
) -> list[str]:
    """The common mistakes ``got`` matches, recomputed from ``mha``'s
    weights with the library."""
    q, k, v = (
        mha.split_heads(proj(x))
        for proj, x in (
            (mha.q_proj, query),
            (mha.k_proj, key),
            (mha.v_proj, value),
        )
    )
    mistakes = []
    if mha.num_heads > 1:
        # softmax(q k^T / sqrt(d_model)) = softmax((q sqrt(D / E)) k^T / sqrt(D))
        shrink = (mha.head_dim / mha.d_model) ** 0.5
        heads, _ = scaled_dot_product_attention(q * shrink, k, v, attn_mask)
        if matches(got, mha.out_proj(mha.merge_heads(heads))):
            mistakes.append(SCALED_BY_D_MODEL)
    heads, _ = scaled_dot_product_attention(q, k, v, attn_mask)
    if matches(got, mha.merge_heads(heads)):
        mistakes.append(NO_OUTPUT_PROJECTION)
    return mistakes


def _multi_head(
    title: str,
    d_model: int,
    num_heads: int,
    batch_size: int,
    seq_len_q: int,
    seq_len_k: int | None = None,
    *,
    masked: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        mha = MultiHeadAttention(d_model, num_heads).double().eval()
        query = _randn(batch_size, seq_len_q, d_model, seed=seed)
        key = (
            query
            if seq_len_k is None
            else _randn(batch_size, seq_len_k, d_model, seed=seed + 1)
        )
        value = (
            key
            if seq_len_k is None
            else _randn(batch_size, seq_len_k, d_model, seed=seed + 2)
        )
        attn_mask = (
            _random_bool_mask(query.size(1), key.size(1))
            if masked
            else None
        )
        text = f"multi_head_attention(MultiHeadAttention({d_model}, {num_heads}), {_shapes(query=query, key=key, value=value)}"
        text += (
            f", attn_mask {tuple(attn_mask.shape)} bool)" if masked else ")"
        )
        with torch.no_grad():
            want, _ = mha(query, key, value, attn_mask=attn_mask)
        got = call(
            f["multi_head_attention"],
            text,
            mha,
            query,
            key,
            value,
            attn_mask=attn_mask,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=_multi_head_mistakes(
                    got, mha, query, key, value, attn_mask
                ),
            ) from None

    return Check(title, run)


def _feed_forward(
    title: str,
    d_model: int,
    d_ff: int,
    shape: tuple[int, ...],
    activation: str,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        ffn = (
            PositionwiseFeedForward(d_model, d_ff, activation=activation)
            .double()
            .eval()
        )
        x = _randn(*shape, seed=seed)
        text = f"position_wise_feed_forward(PositionwiseFeedForward({d_model}, {d_ff}, activation={activation!r}), x {shape})"
        with torch.no_grad():
            want = ffn(x)
        got = call(
            f["position_wise_feed_forward"],
            text,
            ffn,
            x,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(f"input: {text}", *failed.lines) from None

    return Check(title, run)


def _encoder(
    title: str,
    d_model: int,
    num_heads: int,
    d_ff: int,
    shape: tuple[int, int],
    *,
    norm_first: bool,
    padded: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        layer = (
            EncoderLayer(d_model, num_heads, d_ff, norm_first=norm_first)
            .double()
            .eval()
        )
        # LayerNorm starts as the identity map; give it weights that show
        with torch.no_grad():
            for norm in (layer.norm1, layer.norm2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)
        x = _randn(*shape, d_model, seed=seed)
        key_padding_mask = None
        if padded:
            key_padding_mask = torch.zeros(shape, dtype=torch.bool)
            # the last two positions of the first sequence are padding
            key_padding_mask[0, -2:] = True
        text = f"encoder_layer(EncoderLayer({d_model}, {num_heads}, {d_ff}, norm_first={norm_first}), x {(*shape, d_model)}"
        text += (
            ", key_padding_mask with the last 2 keys of sequence 0 = padding)"
            if padded
            else ")"
        )
        with torch.no_grad():
            want, _ = layer(x, key_padding_mask=key_padding_mask)
        got = call(
            f["encoder_layer"],
            text,
            layer,
            x,
            key_padding_mask=key_padding_mask,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=_encoder_mistakes(got, layer, x, key_padding_mask),
            ) from None

    return Check(title, run)


FLIPPED_PADDING = "your layer reads key_padding_mask with the opposite polarity: the keys it blocks are the real tokens"
NORMALISED_STREAM = (
    "your pre-LN layer normalises the residual stream itself: the stream that is added to must stay "
    "un-normalised, only each branch's input is normalised"
)
NORMS_SWAPPED = "your layer places its norms as the other variant does (post-LN for pre-LN or the reverse)"


@torch.no_grad()
def _encoder_mistakes(
    got: object,
    layer: EncoderLayer,
    x: Tensor,
    key_padding_mask: Tensor | None,
) -> list[str]:
    """The common mistakes ``got`` matches, recomputed from ``layer``'s
    parts with the library."""
    mistakes = []
    if key_padding_mask is not None:
        flipped, _ = layer(x, key_padding_mask=~key_padding_mask)
        if matches(got, flipped):
            mistakes.append(FLIPPED_PADDING)

    def attend(h: Tensor) -> Tensor:
        return layer.self_attn(h, h, h, key_padding_mask=key_padding_mask)[
            0
        ]

    if layer.norm_first:
        h = layer.norm1(x)
        h = h + attend(h)
        h = layer.norm2(h)
        if matches(got, h + layer.ffn(h)):
            mistakes.append(NORMALISED_STREAM)
    layer.norm_first = not layer.norm_first
    try:
        other, _ = layer(x, key_padding_mask=key_padding_mask)
    finally:
        layer.norm_first = not layer.norm_first
    if matches(got, other):
        mistakes.append(NORMS_SWAPPED)
    return mistakes


# -- apply-rotary
# ----------------------------------------------------------------------------------------------

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
    tolerance = ENCODING_TOLERANCE
    return [
        mistake
        for mistake, changed in others.items()
        if x.size(-1) > 2 or mistake == REVERSED_ROTATION
        if matches(got, apply_rotary(x, **changed), tolerance)
    ]


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
            else ENCODING_TOLERANCE
        )
        try:
            _same_dtype("output", got, dtype)
            compare_close("output", got, want, **tolerance)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=[
                    *_rotary_mistakes(got, x, kwargs),
                    *_precision_hint(got, want),
                ],
                reading=ROTARY_READING,
            ) from None

    return Check(title, run)


# -- alibi-bias
# ------------------------------------------------------------------------------------------------


def _powers_of_two(slopes: Tensor) -> str:
    return ", ".join(
        f"2^{math.log2(s):.4g}" if s > 0 else f"{s:.4g}"
        for s in slopes.tolist()
    )


def _slopes(num_heads: int, note: str) -> Check:
    def run(f: Functions) -> None:
        text = f"alibi_slopes({num_heads})"
        want = alibi_slopes(num_heads)
        got = call(f["alibi_slopes"], text, num_heads)
        try:
            compare_close("slopes", got, want, **ENCODING_TOLERANCE)
        except CheckFailed as failed:
            lines = [
                f"input: {text}",
                *failed.lines,
                f"expected slopes: {_powers_of_two(want)}",
            ]
            if (
                isinstance(got, Tensor)
                and got.shape == want.shape
                and got.dtype.is_floating_point
            ):
                lines.append(
                    f"your slopes:     {_powers_of_two(got.detach().to(torch.float64).cpu())}"
                )
            raise CheckFailed(*lines) from None

    return Check(f"alibi_slopes({num_heads}): {note}", run)


def _alibi(
    num_heads: int, seq_len_q: int, seq_len_k: int | None, note: str
) -> Check:
    args = (
        (num_heads, seq_len_q)
        if seq_len_k is None
        else (num_heads, seq_len_q, seq_len_k)
    )
    text = f"alibi_bias({', '.join(str(a) for a in args)})"

    def run(f: Functions) -> None:
        want = alibi_bias(*args, dtype=torch.float64)
        got = call(f["alibi_bias"], text, *args)
        try:
            compare_close("bias", got, want, **ENCODING_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                "bias[h, i, j] = -m_h * |i - j| for head h (slope m_h = alibi_slopes(H)[h]), query i, key j: "
                "zero where i == j, negative elsewhere, the same for a key i - d and a key i + d",
            ) from None

    return Check(f"{text}: {note}", run)


CHECKS: dict[str, list[Check]] = {
    "causal-mask": [_causal(1), _causal(4), _causal(7)],
    "scaled-dot-product-attention": [
        _attention(
            "no mask, batch of 2, 4 queries and 4 keys of width 8",
            (2, 4, 8),
            (2, 4, 8),
            8,
            seed=1,
        ),
        _attention(
            "L != S: 3 queries, 5 keys, values of width 6",
            (2, 3, 4),
            (2, 5, 4),
            6,
            seed=2,
        ),
        _attention(
            "a batch of one, odd width 5", (1, 5, 5), (1, 5, 5), 5, seed=3
        ),
        _attention(
            "boolean attn_mask (True = may attend)",
            (2, 4, 6),
            (2, 5, 6),
            6,
            mask=_random_bool_mask,
            seed=4,
        ),
        _attention(
            "float attn_mask added to the scores (-inf blocks)",
            (2, 4, 6),
            (2, 5, 6),
            3,
            mask=_float_mask,
            seed=5,
        ),
        _attention(
            "is_causal=True: query i sees keys j <= i",
            (2, 5, 4),
            (2, 5, 4),
            4,
            is_causal=True,
            seed=6,
        ),
        _attention(
            "a query that may attend to nothing gets zero weights and zero output (not NaN)",
            (1, 3, 4),
            (1, 5, 4),
            4,
            mask=_one_row_blocked,
            seed=8,
        ),
        _attention(
            "is_causal=True with L != S: 3 queries, 5 keys, counted from the top-left corner",
            (2, 3, 4),
            (2, 5, 4),
            4,
            is_causal=True,
            seed=9,
        ),
        _attention(
            "is_causal=True and a boolean attn_mask: both apply",
            (2, 5, 6),
            (2, 5, 6),
            6,
            mask=_random_bool_mask,
            is_causal=True,
            seed=10,
        ),
    ],
    "split-half-encoding": [
        _encoding(50, 16),
        _encoding(10, 7),
        _encoding(20, 8, base=100.0),
        _encoding(1, 2),
        _encoding(0, 4),
    ],
    "split-half-shift": [
        _shift(0, 8, note=": R_0 is the identity"),
        _shift(3, 16),
        _shift(-5, 8, note=" (a negative offset: a shift back)"),
        _shift(1, 2, note=" (a single pair)"),
        _shift(7, 12, base=100.0),
        _shift(1000, 64, note=" (a long shift)"),
        _shift_property(4, 10, 50),
    ],
    "fused-qkv-heads": [
        _fused((2, 5, 12), 3, "gpt2", seed=1),
        _fused((1, 3, 8), 2, "gpt2", seed=2),
        _fused((2, 5, 12), 3, "per-head", seed=3),
        _fused((1, 4, 16), 4, "per-head", seed=4),
        _fused((2, 3, 6), 1, "per-head", seed=5),
        _fused((3, 4, 10), 5, "gpt2", seed=6),
    ],
    "multi-head-from-heads": [
        _multi_head(
            "self-attention, d_model 12, 3 heads, batch of 2",
            12,
            3,
            2,
            4,
            seed=1,
        ),
        _multi_head(
            "cross-attention, L != S: 3 queries, 5 keys",
            8,
            2,
            2,
            3,
            5,
            seed=2,
        ),
        _multi_head(
            "a batch of one, odd head width 5 (d_model 10, 2 heads)",
            10,
            2,
            1,
            4,
            seed=3,
        ),
        _multi_head("one head", 6, 1, 2, 3, seed=4),
        _multi_head(
            "boolean attn_mask (True = may attend)",
            8,
            4,
            2,
            4,
            5,
            masked=True,
            seed=5,
        ),
    ],
    "feed-forward": [
        _feed_forward(
            "ReLU, batch of 2, 5 positions, d_model 8, d_ff 32",
            8,
            32,
            (2, 5, 8),
            "relu",
            seed=1,
        ),
        _feed_forward("GELU activation", 8, 16, (2, 3, 8), "gelu", seed=2),
        _feed_forward(
            "a batch of one, odd widths d_model 5, d_ff 7",
            5,
            7,
            (1, 4, 5),
            "relu",
            seed=3,
        ),
        _feed_forward(
            "a 2-d input (positions, d_model): positions never mix",
            6,
            12,
            (7, 6),
            "relu",
            seed=4,
        ),
    ],
    "encoder-layer": [
        _encoder(
            "post-LN (the paper), batch of 2",
            8,
            2,
            16,
            (2, 5),
            norm_first=False,
            seed=1,
        ),
        _encoder(
            "pre-LN (norm_first=True)",
            8,
            2,
            16,
            (2, 5),
            norm_first=True,
            seed=2,
        ),
        _encoder(
            "post-LN with padding",
            6,
            3,
            10,
            (2, 4),
            norm_first=False,
            padded=True,
            seed=3,
        ),
        _encoder(
            "pre-LN with padding",
            6,
            3,
            10,
            (2, 4),
            norm_first=True,
            padded=True,
            seed=4,
        ),
        _encoder(
            "a batch of one", 4, 1, 8, (1, 3), norm_first=False, seed=5
        ),
    ],
    "apply-rotary": [
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
    ],
    "alibi-bias": [
        _slopes(8, "2^-1, 2^-2, ..., 2^-8"),
        _slopes(6, "6 heads, not a power of two"),
        _slopes(12, "12 heads, not a power of two"),
        _slopes(1, "one head"),
        _alibi(
            8,
            5,
            None,
            "8 heads, 5 queries, 5 keys (seq_len_k defaults to seq_len_q)",
        ),
        _alibi(6, 3, 5, "L != S: 6 heads, 3 queries, 5 keys"),
        _alibi(12, 6, 2, "L != S: 12 heads, 6 queries, 2 keys"),
        _alibi(1, 4, None, "one head"),
    ],
    # chapter "Generating text": tinyformer_exercises.checks_decoder
    **DECODER_CHECKS,
    # chapter "Long context": tinyformer_exercises.checks_context
    **CONTEXT_CHECKS,
    # chapter "Attention without the matrix": tinyformer_exercises.checks_flash
    **FLASH_CHECKS,
}
# The exercises that live in one module each (tinyformer_exercises.exercises): their CHECKS.
CHECKS |= {
    exercise.id: importlib.import_module(
        f"tinyformer_exercises.exercises.{Path(exercise.template).stem}"
    ).CHECKS
    for exercise in EXERCISES.values()
    if (EXERCISE_MODULES / exercise.template).is_file()
}
