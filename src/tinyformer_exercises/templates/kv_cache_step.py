"""Coding exercise kv-cache-step (chapter 6, "Generating text: the causal
decoder and its cache").

Objective assessed: extend a key-value cache with new tokens and let them
attend causally to the cached and the new keys.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises kv-cache-step kv_cache_step.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- kv-cache-step path/to/kv_cache_step.py

You may use torch, including
``torch.nn.functional.scaled_dot_product_attention`` with an ``attn_mask``
(its ``is_causal=True`` is aligned at the top left: mind the cache), but not
tinyformer's KVCache or causal_block_mask."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def attend_with_cache(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    past_key: Tensor | None = None,
    past_value: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One decoding step under a key-value cache: append the new keys and
    values to the cached ones, then let the new queries attend causally.

    The ``L`` new tokens are positions ``P, ..., P + L - 1`` of the
    sequence; the ``P`` cached ones are positions ``0, ..., P - 1``. New
    query ``i`` may attend to keys ``j <= P + i``: the causal rule aligned
    at the bottom right of the ``(L, P + L)`` score matrix.

    Args:
        query: ``(N, H, L, D)`` queries of the L new tokens.
        key: ``(N, H, L, D)`` keys of the new tokens.
        value: ``(N, H, L, D)`` values of the new tokens.
        past_key: ``(N, H, P, D)`` cached keys, or None before the first
            step (P = 0).
        past_value: ``(N, H, P, D)`` cached values, or None.

    Returns:
        ``(output, keys, values)``: ``(N, H, L, D)`` attention output of the
        new queries, softmax(Q K^T / sqrt(D)) V over the keys they may see;
        ``(N, H, P + L, D)`` keys and values, the cached ones first, then
        the new ones (the cache for the next step).
    """
    raise NotImplementedError
