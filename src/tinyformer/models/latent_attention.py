"""Multi-head latent attention (MLA): the keys and values of every head
come up from one small latent per token, so a cache holds the latent and
one shared rotary key instead of every head's keys and values.

DeepSeek-AI (2024), "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", Sec. 2.1.2 (low-rank key-value joint
compression) and 2.1.3 (decoupled rotary position embedding); the layout
and names of Hugging Face's ``DeepseekV3Attention`` (transformers 5.23).

Per token, with ``d_c = kv_lora_rank``, ``d_h = qk_nope_head_dim``,
``d_h^R = qk_rope_head_dim``, ``d_v = v_head_dim``:

- the latent ``c = RMSNorm(W_DKV x)`` (width ``d_c``) and one rotary key
  ``k^R = RoPE(W_KR x)`` (width ``d_h^R``), shared by every head, are what
  the cache holds: ``d_c + d_h^R`` numbers per token and layer;
- head ``h``'s key is ``[W_UK_h c ; k^R]`` and its value ``W_UV_h c``;
  its query ``[q_h ; RoPE(q^R_h)]`` (from ``x``, or from a latent of
  width ``q_lora_rank``);
- the scores are scaled by ``1 / sqrt(d_h + d_h^R)``.

Rotary angles cannot be folded through a matrix product, which is why the
position is carried by the separate ``k^R`` (Sec. 2.1.3): the rest of the
key is ``W_UK_h c``, so ``q_h . W_UK_h c = (W_UK_h^T q_h) . c``, and a
query can meet the cached latent directly. ``absorbed=True`` computes the
layer that way: the key up-projection folded into the query, the value
up-projection into the output projection, and no head's key or value is
ever formed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tinyformer.models.attention import (
    fused_attention,
    scaled_dot_product_attention,
)

if TYPE_CHECKING:
    from tinyformer.models.cache import KVCache
    from tinyformer.models.decoder_config import DecoderConfig

__all__ = ["LATENT_NORM_EPS", "MultiHeadLatentAttention"]

#: The epsilon of the latents' RMSNorms (Hugging Face's
#: ``DeepseekV3RMSNorm`` default, whatever the model's ``rms_norm_eps``).
LATENT_NORM_EPS = 1e-6


def _attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor,
    dropout_p: float,
    need_weights: bool,
) -> tuple[Tensor, Tensor | None]:
    """Attention's output, and its weights when asked for (the explicit
    path; the fused kernel returns none)."""
    if need_weights:
        return scaled_dot_product_attention(
            q, k, v, attn_mask, dropout_p=dropout_p
        )
    return fused_attention(q, k, v, attn_mask, dropout_p=dropout_p), None


class MultiHeadLatentAttention(nn.Module):
    """Masked self-attention of a decoder layer through a key-value latent
    (DeepSeek-V2, Sec. 2.1).

    Its weights carry Hugging Face's names: ``q_proj`` (or ``q_a_proj``,
    ``q_a_layernorm`` and ``q_b_proj`` with a ``q_lora_rank``),
    ``kv_a_proj_with_mqa`` (``x`` to ``[c ; k^R]`` before the norm and
    rotation), ``kv_a_layernorm``, ``kv_b_proj`` (``c`` to every head's
    ``[k ; v]``) and ``o_proj``.

    Args:
        config: the decoder's config, with ``kv_lora_rank`` set.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.num_heads = config.num_heads
        self.kv_lora_rank = config.kv_lora_rank
        self.q_lora_rank = config.q_lora_rank
        self.qk_nope_head_dim = config.qk_nope_head_dim
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.v_head_dim = config.v_head_dim
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.dropout = config.dropout
        self.absorbed = config.mla_absorbed
        d_model, heads = config.d_model, config.num_heads
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(
                d_model, heads * self.qk_head_dim, bias=False
            )
            self.q_a_proj = self.q_a_layernorm = self.q_b_proj = None
        else:
            self.q_proj = None
            self.q_a_proj = nn.Linear(
                d_model, self.q_lora_rank, bias=config.bias
            )
            self.q_a_layernorm = nn.RMSNorm(
                self.q_lora_rank, eps=LATENT_NORM_EPS
            )
            self.q_b_proj = nn.Linear(
                self.q_lora_rank, heads * self.qk_head_dim, bias=False
            )
        self.kv_a_proj_with_mqa = nn.Linear(
            d_model,
            self.kv_lora_rank + self.qk_rope_head_dim,
            bias=config.bias,
        )
        self.kv_a_layernorm = nn.RMSNorm(
            self.kv_lora_rank, eps=LATENT_NORM_EPS
        )
        self.kv_b_proj = nn.Linear(
            self.kv_lora_rank,
            heads * (self.qk_nope_head_dim + self.v_head_dim),
            bias=False,
        )
        self.o_proj = nn.Linear(
            heads * self.v_head_dim, d_model, bias=config.bias
        )

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor,
        positions: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from the ``L`` new tokens to the cached and new latents.

        Args:
            x: ``(N, L, E)`` normalised inputs of the new tokens.
            attn_mask: bool ``(N, 1, L, S)`` with **True = may attend**.
            positions: ``(N, L)`` integer positions of the new tokens.
            cache: the :class:`~tinyformer.models.cache.KVCache` to read
                and extend (it holds ``(N, 1, S, d_c)`` latents as keys and
                ``(N, 1, S, d_h^R)`` rotary keys as values), or None.
            layer: this layer's index in the cache.
            need_weights: if True, return the ``(N, H, L, S)`` weights.

        Returns:
            ``(output, weights)``: ``(N, L, E)`` and the weights or None.
        """
        batch_size, seq_len, _ = x.shape
        heads = self.num_heads
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(batch_size, seq_len, heads, self.qk_head_dim).transpose(
            1, 2
        )  # (N, H, L, dh + dR)
        q_nope, q_rope = q.split(
            (self.qk_nope_head_dim, self.qk_rope_head_dim), dim=-1
        )
        latent, k_rope = self.kv_a_proj_with_mqa(x).split(
            (self.kv_lora_rank, self.qk_rope_head_dim), dim=-1
        )
        latent = self.kv_a_layernorm(latent)[:, None]  # (N, 1, L, d_c)
        k_rope = k_rope[
            :, None
        ]  # (N, 1, L, dR): one rotary key for every head
        scheme = self.config.positional_scheme
        q_rope, k_rope = scheme.rotate(
            q_rope, k_rope, positions[:, None, :], self.config
        )
        if cache is not None:
            latent, k_rope = cache.update(
                layer, latent, k_rope
            )  # (N, 1, S, d_c), (N, 1, S, dR)
        dropout_p = self.dropout if self.training else 0.0
        if self.absorbed:
            return self._absorbed(
                q_nope,
                q_rope,
                latent,
                k_rope,
                attn_mask,
                dropout_p,
                need_weights,
            )
        total = latent.size(2)
        # every head's key and value, up from the latent
        kv = self.kv_b_proj(latent[:, 0])  # (N, S, H * (dh + dv))
        kv = kv.view(batch_size, total, heads, -1).transpose(1, 2)
        k_nope, v = kv.split(
            (self.qk_nope_head_dim, self.v_head_dim), dim=-1
        )
        k = torch.cat(
            (k_nope, k_rope.expand(-1, heads, -1, -1)), dim=-1
        )  # (N, H, S, dh + dR)
        q = torch.cat((q_nope, q_rope), dim=-1)
        out, weights = _attend(
            q, k, v, attn_mask, dropout_p, need_weights
        )  # (N, H, L, dv)
        out = out.transpose(1, 2).reshape(
            batch_size, seq_len, heads * self.v_head_dim
        )
        return self.o_proj(out), weights

    def _absorbed(
        self,
        q_nope: Tensor,
        q_rope: Tensor,
        latent: Tensor,
        k_rope: Tensor,
        attn_mask: Tensor,
        dropout_p: float,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        """The same layer with ``W_UK`` folded into the query and ``W_UV``
        into the output projection (Sec. 2.1.2): each head's query meets
        the ``(N, 1, S, d_c)`` latents themselves."""
        heads = self.num_heads
        up = self.kv_b_proj.weight.view(
            heads,
            self.qk_nope_head_dim + self.v_head_dim,
            self.kv_lora_rank,
        )
        w_uk, w_uv = up.split(
            (self.qk_nope_head_dim, self.v_head_dim), dim=1
        )  # (H, dh, d_c), (H, dv, d_c)
        # q_h . (W_UK_h c) = (W_UK_h^T q_h) . c
        q_latent = torch.einsum(
            "nhld,hdc->nhlc", q_nope, w_uk
        )  # (N, H, L, d_c)
        q = torch.cat((q_latent, q_rope), dim=-1)  # (N, H, L, d_c + dR)
        k = torch.cat((latent, k_rope), dim=-1).expand(
            -1, heads, -1, -1
        )  # (N, H, S, d_c + dR)
        v = latent.expand(
            -1, heads, -1, -1
        )  # (N, H, S, d_c): the values' latents
        # the kernel scales by 1 / sqrt(d_c + dR); the heads' width is dh + dR
        q = q * math.sqrt(q.size(-1) / self.qk_head_dim)
        out, weights = _attend(
            q, k, v, attn_mask, dropout_p, need_weights
        )  # (N, H, L, d_c)
        # o_proj(concat_h W_UV_h o_h) = sum_h (W_O_h W_UV_h) o_h
        w_o = self.o_proj.weight.view(
            -1, heads, self.v_head_dim
        )  # (E, H, dv)
        w_ouv = torch.einsum("ehv,hvc->ehc", w_o, w_uv)  # (E, H, d_c)
        out = torch.einsum("nhlc,ehc->nle", out, w_ouv)  # (N, L, E)
        if self.o_proj.bias is not None:
            out = out + self.o_proj.bias
        return out, weights
