"""Coding exercise alibi-cache-bias (chapter 6, "Generating text: the causal
decoder and its cache").

Objective assessed: compute ALiBi's bias for the newest queries under a
key-value cache, with the future keys blocked.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises alibi-cache-bias alibi_cache_bias.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- alibi-cache-bias path/to/alibi_cache_bias.py

The slopes were exercise alibi-bias's: you may call
``tinyformer.models.positional.alibi_slopes`` (imported below), but not
``alibi_bias`` or ``causal_block_mask``."""

import torch
from torch import Tensor

from tinyformer.models.positional import alibi_slopes


def alibi_cache_bias(
    num_heads: int, seq_len_q: int, seq_len_k: int
) -> Tensor:
    """``bias[h, i, j] = -m_h * ((S - L + i) - j)`` for the keys a new query
    may see, ``-inf`` for the future ones (Press et al., 2022, Sec. 3,
    Eq. 1, in a causal decoder under a cache).

    The ``L`` queries are the newest of the ``S`` positions: query ``i``
    sits at position ``S - L + i`` (the first ``S - L`` keys are cached).
    Key ``j`` is in its past when ``j <= S - L + i`` and in its future
    otherwise.

    Args:
        num_heads: number of heads H, >= 1; head h uses slope
            ``alibi_slopes(H)[h]``.
        seq_len_q: number of new queries L, 0 <= L <= S.
        seq_len_k: number of keys S, cached and new.

    Returns:
        ``(H, L, S)`` float tensor, to be added to the scores: zero where
        key ``j`` is query ``i``'s own position, ``-m_h`` times the
        distance for the past keys, ``-inf`` for the future ones.
    """
    raise NotImplementedError
