"""Coding exercise kv-cache-step: extend a key-value cache with new tokens
and let them attend causally to the cached and the new keys.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/kv_cache_step.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.attention import scaled_dot_product_attention
from tinyformer.models.decoder import causal_block_mask
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT32_TOLERANCE,
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    require_floating,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="kv-cache-step",
    functions=("attend_with_cache",),
    template="kv_cache_step.py",
    chapter="decoder",
    objective="extend a key-value cache with new tokens and let them attend causally to the cached and the new keys",
    references=(
        "tinyformer.models.cache.causal_block_mask",
        "tinyformer.models.cache.KVCache.update",
        "tinyformer.models.decoder.CausalSelfAttention.forward",
    ),
)


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
        keys, torch.cat((key, past_key), dim=2), FLOAT32_TOLERANCE
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
    if past and matches(output, top_left, FLOAT32_TOLERANCE):
        lines.append(
            f"new queries see only the first keys: the causal block must be aligned at the bottom right, "
            f"query i may see keys j <= {past} + i (tril({past}) on the ({new}, {past + new}) scores), not j <= i "
            "(tril(), or is_causal=True, is aligned at the top left)"
        )
    elif new > 1 and matches(output, unmasked, FLOAT32_TOLERANCE):
        seen = f"{past} + i" if past else "i"
        lines.append(
            f"your new queries saw the keys after them: query i may see keys j <= {seen} only"
        )
    elif past and matches(output, new_only, FLOAT32_TOLERANCE):
        lines.append(
            "your new queries attended only to the new keys: they must see the cached ones too"
        )
    return lines


@reseedable
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
                output = require_floating("output", output, new_shape)
                all_shape = (batch_size, num_heads, end, head_dim)
                keys = require_floating("keys", keys, all_shape)
                values = require_floating("values", values, all_shape)
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


CHECKS = [
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
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "causal mask aligned at the top left (tril() instead of tril(P))",
        [(".tril(past)", ".tril()")],
        [
            "pass  1. no cache yet",
            "FAIL  2. one new token (L = 1) after P = 5 cached",
            "first differing entry: output[0, 0, 0, 0]",
            "new queries see only the first keys: the causal block must be aligned at the bottom right",
            "query i may see keys j <= 5 + i (tril(5) on the (1, 6) scores)",
            "FAIL  5. a prompt of 3 tokens",
            "the first wrong one is token 3, attended with 3 tokens in the cache",
        ],
    ),
    (
        "new keys and values concatenated before the cached ones",
        [
            ("cat((past_key, key)", "cat((key, past_key)"),
            ("cat((past_value, value)", "cat((value, past_value)"),
        ],
        [
            "pass  1. no cache yet",
            "FAIL  2.",
            "first differing entry: keys[0, 0, 0, 0]",
            "your keys are the new ones first, then the cached ones: keys[:, :, :5] must be past_key",
        ],
    ),
    (
        "no causal mask at all",
        [("attn_mask=allowed", "attn_mask=None")],
        [
            "FAIL  1. no cache yet",
            "your new queries saw the keys after them: query i may see keys j <= i only",
            "pass  2. one new token (L = 1) after P = 5 cached",
            "token 0 of the prompt is already wrong",
        ],
    ),
]
