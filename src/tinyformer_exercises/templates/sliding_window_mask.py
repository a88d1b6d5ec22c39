"""Coding exercise sliding-window-mask (chapter 7, "Long context: length
generalisation in a decoder, stretched rotary, windows and sinks").

Objective assessed: build the boolean mask of causal attention within a
sliding window, with attention sinks, for the newest queries under a
cache.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises sliding-window-mask sliding_window_mask.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- sliding-window-mask path/to/sliding_window_mask.py

Use only PyTorch; not ``tinyformer.models.decoder``."""

import torch
from torch import Tensor


def sliding_window_mask(
    seq_len_q: int,
    seq_len_k: int,
    window: int,
    num_sink_tokens: int = 0,
) -> Tensor:
    """Boolean ``(L, S)`` mask, True where new query ``i`` may attend to key
    ``j``.

    The ``L = seq_len_q`` queries are the newest of ``S = seq_len_k``
    positions: query ``i`` sits at position ``p = S - L + i``. It may see
    key ``j`` when ``j <= p`` (causal) and either ``p - j < window`` (the
    ``window`` newest keys, its own included) or ``j < num_sink_tokens``
    (the sinks: the first tokens of the text, Xiao et al., 2024).

    Args:
        seq_len_q: new queries L, 0 <= L <= S.
        seq_len_k: keys S, cached and new.
        window: keys in the window W, >= 1.
        num_sink_tokens: sinks k, >= 0.

    Returns:
        bool tensor of shape ``(L, S)``.
    """
    raise NotImplementedError
