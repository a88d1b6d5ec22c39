"""The checks of the coding exercises of chapter "Generating text: the
causal decoder and its cache": grouped key/value heads, one step under a
key-value cache, ALiBi's bias for the newest queries.

As in :mod:`tinyformer_exercises.checks`: seeded float64 inputs, the
library's answer as the reference, the input named in the student's words;
where a result matches a known slip, a line says which."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.models.attention import (
    repeat_kv_heads,
    scaled_dot_product_attention,
)
from tinyformer.models.decoder import causal_block_mask
from tinyformer.models.positional import alibi_bias
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    call,
    compare_close,
    describe,
    matches,
)
from tinyformer_exercises.checking import seeded_randn as _randn

__all__ = ["DECODER_CHECKS"]

Functions = dict[str, Callable[..., Any]]
# ALiBi's biases may come back in float32, as the alibi-bias checks allow
# (checks.ENCODING_TOLERANCE).
BIAS_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _require(name: str, got: object, shape: tuple[int, ...]) -> Tensor:
    """``got`` if it is a floating tensor of ``shape``; a
    :class:`CheckFailed` says what came instead."""
    if (
        not isinstance(got, Tensor)
        or tuple(got.shape) != shape
        or not got.dtype.is_floating_point
    ):
        raise CheckFailed(
            f"expected: {name} as a floating tensor of shape {shape}",
            f"got:      {describe(got)}",
        )
    return got


# -- repeat-kv-heads
# ------------------------------------------------------------------------------------

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
            "head h reads h % H_kv: .repeat tiles the heads (0, 1, 0, 1, ...), where grouped-query "
            "attention gives each group of consecutive query heads one key/value head"
        )
    return lines


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
                got = _require(f"repeat_kv_heads({name})", got, shape)
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


# -- kv-cache-step
# --------------------------------------------------------------------------------------

CACHE_READING = (
    "keys = past_key then key along dim 2 (the cached positions 0, ..., P - 1 first); new query i is position "
    "P + i and may see keys j <= P + i: the causal block aligned at the bottom right of the (L, P + L) scores"
)


def _triple(result: object) -> tuple[object, object, object]:
    if not isinstance(result, tuple) or len(result) != 3:
        kind = (
            f"a tuple of {len(result)}"
            if isinstance(result, tuple)
            else type(result).__name__
        )
        raise CheckFailed(
            "expected: attend_with_cache to return a tuple (output, keys, values)",
            f"got:      {kind}",
        )
    return result


def _cache_hints(
    output: object,
    keys: object,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    past_key: Tensor | None,
    past_value: Tensor | None,
) -> list[str]:
    """A line for each known slip the result matches."""
    if past_key is None or past_value is None:
        past_key, past_value = key[:, :, :0], value[:, :, :0]
    past, new = past_key.size(2), key.size(2)
    if past and matches(
        keys, torch.cat((key, past_key), dim=2), BIAS_TOLERANCE
    ):
        return [
            f"your keys are the new ones first, then the cached ones: keys[:, :, :{past}] must be past_key and "
            f"keys[:, :, {past}:] the new key (the cache keeps the positions in order)"
        ]
    keys = torch.cat((past_key, key), dim=2)
    values = torch.cat((past_value, value), dim=2)
    lines = []
    top_left, _ = scaled_dot_product_attention(
        query, keys, values, is_causal=True
    )
    unmasked, _ = scaled_dot_product_attention(query, keys, values)
    new_only, _ = scaled_dot_product_attention(
        query, key, value, is_causal=True
    )
    if past and matches(output, top_left, BIAS_TOLERANCE):
        lines.append(
            f"new queries see only the first keys: the causal block must be aligned at the bottom right, "
            f"query i may see keys j <= {past} + i (tril({past}) on the ({new}, {past + new}) scores), not j <= i "
            "(tril(), or is_causal=True, is aligned at the top left)"
        )
    elif new > 1 and matches(output, unmasked, BIAS_TOLERANCE):
        seen = f"{past} + i" if past else "i"
        lines.append(
            f"your new queries saw the keys after them: query i may see keys j <= {seen} only"
        )
    elif past and matches(output, new_only, BIAS_TOLERANCE):
        lines.append(
            "your new queries attended only to the new keys: they must see the cached ones too"
        )
    return lines


def _cache_step(
    title: str,
    batch_size: int,
    num_heads: int,
    past: int,
    new: int,
    head_dim: int,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        shape = (batch_size, num_heads, new, head_dim)
        query = _randn(*shape, seed=seed)
        key = _randn(*shape, seed=seed + 1)
        value = _randn(*shape, seed=seed + 2)
        past_shape = (batch_size, num_heads, past, head_dim)
        past_key = _randn(*past_shape, seed=seed + 3) if past else None
        past_value = _randn(*past_shape, seed=seed + 4) if past else None
        cached = (
            f"past_key {past_shape}, past_value {past_shape}"
            if past
            else "past_key=None, past_value=None"
        )
        text = f"attend_with_cache(query {shape}, key {shape}, value {shape}, {cached})"
        # the reference first: a solution that changes its inputs in place
        # cannot change what is expected
        keys = key if past_key is None else torch.cat((past_key, key), 2)
        values = (
            value
            if past_value is None
            else torch.cat((past_value, value), 2)
        )
        want, _ = scaled_dot_product_attention(
            query, keys, values, causal_block_mask(new, past + new)
        )
        result = call(
            f["attend_with_cache"],
            text,
            query.clone(),
            key.clone(),
            value.clone(),
            None if past_key is None else past_key.clone(),
            None if past_value is None else past_value.clone(),
        )
        output, got_keys, got_values = _triple(result)
        try:
            compare_close("keys", got_keys, keys, **FLOAT64_TOLERANCE)
            compare_close("values", got_values, values, **FLOAT64_TOLERANCE)
            compare_close("output", output, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_cache_hints(
                    output,
                    got_keys,
                    query,
                    key,
                    value,
                    past_key,
                    past_value,
                ),
                reading=CACHE_READING,
            ) from None

    return Check(title, run)


def _prefill_then_decode(
    batch_size: int, num_heads: int, prompt: int, steps: int, head_dim: int
) -> Check:
    total = prompt + steps
    title = (
        f"a prompt of {prompt} tokens in one call, then {steps} tokens one call each, equals one causal pass "
        f"over all {total}"
    )

    def run(f: Functions) -> None:
        shape = (batch_size, num_heads, total, head_dim)
        query = _randn(*shape, seed=41)
        key = _randn(*shape, seed=42)
        value = _randn(*shape, seed=43)
        want, _ = scaled_dot_product_attention(
            query, key, value, is_causal=True
        )
        setup = (
            f"input: query, key and value {shape}; attend_with_cache on tokens 0, ..., {prompt - 1} with "
            f"past_key=None, then on one token at a time, each call given the keys and values the previous "
            f"call returned"
        )
        outputs: list[Tensor] = []
        keys = values = None
        chunks = [(0, prompt)] + [(t, t + 1) for t in range(prompt, total)]
        for start, end in chunks:
            part = f"[:, :, {start}:{end}]"
            cached = (
                "None, None" if keys is None else "keys, values (returned)"
            )
            text = f"attend_with_cache(query{part}, key{part}, value{part}, {cached})"
            result = call(
                f["attend_with_cache"],
                text,
                query[:, :, start:end].clone(),
                key[:, :, start:end].clone(),
                value[:, :, start:end].clone(),
                keys,
                values,
            )
            output, keys, values = _triple(result)
            try:
                new_shape = (batch_size, num_heads, end - start, head_dim)
                output = _require("output", output, new_shape)
                all_shape = (batch_size, num_heads, end, head_dim)
                keys = _require("keys", keys, all_shape)
                values = _require("values", values, all_shape)
            except CheckFailed as failed:
                raise CheckFailed(
                    setup, f"the call {text}:", *failed.lines
                ) from None
            outputs.append(output.detach().to(torch.float64))
        got = torch.cat(outputs, dim=2)
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            bad = ~torch.isclose(got, want, **FLOAT64_TOLERANCE)
            first = int(bad.nonzero()[:, 2].min())
            where = (
                f"the prompt's outputs are right; the first wrong one is token {first}, attended with "
                f"{first} tokens in the cache"
                if first >= prompt
                else f"token {first} of the prompt is already wrong (past_key=None)"
            )
            raise CheckFailed(
                setup,
                f"the outputs, concatenated along the length, must equal one causal pass over all {total} "
                "tokens (is_causal=True, computed by the library in float64)",
                *failed.lines[1:],
                where,
                reading=CACHE_READING,
            ) from None

    return Check(title, run)


# -- alibi-cache-bias
# -----------------------------------------------------------------------------------

ALIBI_READING = (
    "bias[h, i, j] = -m_h * ((S - L + i) - j) for key j <= S - L + i (query i sits at position S - L + i; "
    "slope m_h = alibi_slopes(H)[h]), -inf for key j > S - L + i, its future"
)


def _cache_bias(num_heads: int, seq_len_q: int, seq_len_k: int) -> Tensor:
    """The library's bias for the newest queries, the future blocked."""
    bias = alibi_bias(
        num_heads,
        seq_len_q,
        seq_len_k,
        query_offset=seq_len_k - seq_len_q,
        dtype=torch.float64,
    )
    # (H, L, S)
    return bias.masked_fill(
        ~causal_block_mask(seq_len_q, seq_len_k), float("-inf")
    )


def _bias_hints(
    got: object, num_heads: int, seq_len_q: int, seq_len_k: int
) -> list[str]:
    want = _cache_bias(num_heads, seq_len_q, seq_len_k)
    if (
        not isinstance(got, Tensor)
        or got.shape != want.shape
        or not got.dtype.is_floating_point
    ):
        return []
    got = got.detach().to(torch.float64).cpu()
    past = seq_len_k - seq_len_q
    # the top-left form: queries counted from 0, future j > i blocked
    from_zero = alibi_bias(
        num_heads, seq_len_q, seq_len_k, dtype=torch.float64
    ).masked_fill(
        ~torch.ones(seq_len_q, seq_len_k, dtype=torch.bool).tril(),
        float("-inf"),
    )
    if past and matches(got, from_zero, BIAS_TOLERANCE):
        return [
            f"you counted the new queries from position 0: under a cache the first {past} keys are cached, "
            f"so query i sits at position S - L + i = {past} + i and its bias is -m_h * (({past} + i) - j)"
        ]
    lines = []
    if (torch.isneginf(want) & torch.isfinite(got)).any():
        lines.append(
            "your bias leaves keys in the queries' future (j > S - L + i) open, where this bias must "
            "block them itself"
        )
    symmetric = alibi_bias(
        num_heads,
        seq_len_q,
        seq_len_k,
        query_offset=past,
        dtype=torch.float64,
    )
    if matches(got, symmetric, BIAS_TOLERANCE):
        lines.append(
            "yours is the symmetric -m_h * |(S - L + i) - j|, the encoder's form, which penalises the "
            "future keys instead of blocking them"
        )
    if (torch.isfinite(want) & torch.isneginf(got)).any():
        lines.append(
            "your bias blocks keys that are not in the future: the cached keys, or the query's own"
        )
    return lines


def _alibi_cache(
    num_heads: int, seq_len_q: int, seq_len_k: int, note: str
) -> Check:
    text = f"alibi_cache_bias({num_heads}, {seq_len_q}, {seq_len_k})"

    def run(f: Functions) -> None:
        want = _cache_bias(num_heads, seq_len_q, seq_len_k)
        got = call(
            f["alibi_cache_bias"], text, num_heads, seq_len_q, seq_len_k
        )
        try:
            compare_close("bias", got, want, **BIAS_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}",
                *failed.lines,
                mistakes=_bias_hints(got, num_heads, seq_len_q, seq_len_k),
                reading=ALIBI_READING,
            ) from None

    return Check(f"{text}: {note}", run)


def _alibi_last_rows(
    num_heads: int, seq_len_q: int, seq_len_k: int
) -> Check:
    full_text = f"alibi_cache_bias({num_heads}, {seq_len_k}, {seq_len_k})"
    text = f"alibi_cache_bias({num_heads}, {seq_len_q}, {seq_len_k})"
    title = (
        f"the last {seq_len_q} rows of {full_text} (no cache) equal {text}: a query's bias depends on "
        "its position only"
    )

    def run(f: Functions) -> None:
        full = call(
            f["alibi_cache_bias"],
            full_text,
            num_heads,
            seq_len_k,
            seq_len_k,
        )
        try:
            full = _require(
                full_text, full, (num_heads, seq_len_k, seq_len_k)
            )
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {full_text}", *failed.lines
            ) from None
        got = call(
            f["alibi_cache_bias"], text, num_heads, seq_len_q, seq_len_k
        )
        rows = full.detach().to(torch.float64)[:, seq_len_k - seq_len_q :]
        try:
            compare_close("bias", got, rows, **BIAS_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text} against rows {seq_len_k - seq_len_q}, ..., {seq_len_k - 1} of your {full_text}",
                f"expected: bias equal to those rows of your {full_text}",
                *failed.lines[1:],
                mistakes=_bias_hints(got, num_heads, seq_len_q, seq_len_k),
                reading=ALIBI_READING,
            ) from None

    return Check(title, run)


DECODER_CHECKS: dict[str, list[Check]] = {
    "repeat-kv-heads": [
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
    ],
    "kv-cache-step": [
        _cache_step(
            "no cache yet (past_key=None): plain causal attention over 4 new tokens, batch of 2",
            2,
            2,
            0,
            4,
            8,
            seed=1,
        ),
        _cache_step(
            "one new token (L = 1) after P = 5 cached: it sees all 6 keys",
            1,
            2,
            5,
            1,
            4,
            seed=2,
        ),
        _cache_step(
            "a chunk of L = 3 new tokens after P = 4 cached: query i sees keys j <= 4 + i",
            1,
            2,
            4,
            3,
            4,
            seed=3,
        ),
        _cache_step(
            "batch of 3, 4 heads, L = 2 new tokens after P = 3 cached",
            3,
            4,
            3,
            2,
            6,
            seed=4,
        ),
        _prefill_then_decode(2, 2, 3, 3, 4),
    ],
    "alibi-cache-bias": [
        _alibi_cache(8, 5, 5, "no cache (L = S): the causal ALiBi bias"),
        _alibi_cache(
            8,
            1,
            6,
            "one new query after 5 cached: its row is -m_h * (5 - j), no -inf",
        ),
        _alibi_cache(4, 3, 7, "3 new queries after 4 cached"),
        _alibi_cache(6, 2, 5, "6 heads, not a power of two"),
        _alibi_last_rows(4, 2, 6),
    ],
}
