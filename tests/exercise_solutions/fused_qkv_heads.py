"""Reference solution of coding exercise fused-qkv-heads (chapter 3,
"Multi-head attention").

Objective assessed: split a fused query-key-value projection into heads,
in the two layouts that models store it in.

Write the body of the function below, then check it (offline, from the
book's repository):

    nox -s check -- fused-qkv-heads fused_qkv_heads.py
"""

import torch
from torch import Tensor


def split_fused_qkv(
    qkv: Tensor, num_heads: int, *, layout: str = "gpt2"
) -> tuple[Tensor, Tensor, Tensor]:
    """The queries, keys and values of ``num_heads`` heads, from
    the output of one fused projection ``nn.Linear(E, 3E)``, laid
    out ``"gpt2"`` ([q | k | v]) or ``"per-head"`` ([q_h k_h v_h]
    head after head).

    Args:
        qkv: ``(N, L, 3E)`` output of the fused projection.
        num_heads: number of heads H; ``D = E // H``.
        layout: ``"gpt2"`` or ``"per-head"``.

    Returns:
        ``(q, k, v)``, each an ``(N, H, L, D)`` tensor.
    """
    batch_size, seq_len, width = qkv.shape
    d_model = width // 3
    head_dim = d_model // num_heads
    if layout == "gpt2":
        # three (N, L, E) parts; each to (N, L, H, D), then
        # heads before positions
        return tuple(
            part.reshape(
                batch_size, seq_len, num_heads, head_dim
            ).transpose(1, 2)
            for part in qkv.split(d_model, dim=-1)
        )
    if layout == "per-head":
        # (N, L, H, 3D): head h's [q_h k_h v_h]; (N, H, L, 3D)
        heads = qkv.reshape(
            batch_size, seq_len, num_heads, 3 * head_dim
        )
        return heads.transpose(1, 2).split(head_dim, dim=-1)
    raise ValueError(
        f"layout must be 'gpt2' or 'per-head', got {layout!r}"
    )
