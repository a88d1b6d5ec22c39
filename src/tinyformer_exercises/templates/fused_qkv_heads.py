"""Coding exercise fused-qkv-heads (chapter 3, "Multi-head attention").

Objective assessed: split a fused query-key-value projection into heads,
in the two layouts that models store it in.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises fused-qkv-heads fused_qkv_heads.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- fused-qkv-heads path/to/fused_qkv_heads.py

Calling the library's ``MultiHeadAttention.split_heads`` is refused by the
checker: write the split yourself.
"""

import torch
from torch import Tensor


def split_fused_qkv(
    qkv: Tensor, num_heads: int, *, layout: str = "gpt2"
) -> tuple[Tensor, Tensor, Tensor]:
    """The queries, keys and values of ``num_heads`` heads, from the output
    of one fused projection ``nn.Linear(E, 3E)``.

    Many models compute the three projections of a layer with one linear
    layer and split its output. Its 3E features come in one of two layouts:

    - ``layout="gpt2"`` (GPT-2, nanoGPT): all the query features, then all
      the key features, then all the value features, ``[q | k | v]``, each
      E wide; each part is then split into heads as chapter 3 splits a
      projection (head h takes features h*D to (h+1)*D - 1 of its part);
    - ``layout="per-head"`` (GPT-NeoX, Pythia): head after head,
      ``[q_0 k_0 v_0 | q_1 k_1 v_1 | ...]``, 3D features per head: head h's
      query features are 3hD to 3hD + D - 1, its key features the next D,
      its value features the D after those.

    Args:
        qkv: ``(N, L, 3E)`` output of the fused projection; ``E = d_model``
            divisible by ``num_heads``.
        num_heads: number of heads H; the head width is ``D = E // H``.
        layout: ``"gpt2"`` or ``"per-head"``.

    Returns:
        ``(q, k, v)``, each an ``(N, H, L, D)`` tensor.
    """
    raise NotImplementedError
