"""Coding exercise repeat-kv-heads (chapter 6, "Generating text: the causal
decoder and its cache").

Objective assessed: share each key/value head among a group of query heads,
as grouped-query and multi-query attention do.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises repeat-kv-heads repeat_kv_heads.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- repeat-kv-heads path/to/repeat_kv_heads.py

You may use torch (``Tensor.repeat_interleave``, ``Tensor.expand``,
``Tensor.reshape``, ...), but not tinyformer's own function."""

import torch
from torch import Tensor


def repeat_kv_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(N, H_kv, S, D)`` to ``(N, H, S, D)``: each of the ``H_kv`` key or
    value heads serves ``H / H_kv`` consecutive query heads (Ainslie et al.,
    2023, Sec. 2.2; ``H_kv = 1`` is multi-query attention, Shazeer, 2019).

    Query head ``h`` reads key/value head ``h // (H / H_kv)``: for 4 query
    heads and 2 key/value heads, heads 0 and 1 read key/value head 0, heads
    2 and 3 read key/value head 1.

    Args:
        x: ``(N, H_kv, S, D)`` keys or values.
        num_heads: the number of query heads H, a multiple of ``H_kv``.

    Returns:
        ``(N, H, S, D)`` tensor whose head ``h`` is
        ``x[:, h // (H / H_kv)]`` (``x``'s values when ``H == H_kv``).
    """
    raise NotImplementedError
