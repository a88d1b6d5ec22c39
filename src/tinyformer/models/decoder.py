"""A causal decoder-only language model (Radford et al., 2019; Touvron et
al., 2023): its layers, the model and generation. The model's recipe is
:mod:`tinyformer.models.decoder_config`; the key-value cache and the masks
are :mod:`tinyformer.models.cache` (all re-exported here).

Shapes: ``N`` batch size, ``L`` number of new tokens in a forward pass,
``P`` number of cached positions, ``S = P + L`` number of keys, ``E`` model
width ``d_model``, ``H`` query heads ``num_heads``, ``H_kv`` key/value heads
``num_kv_heads``, ``D`` head width ``head_dim = E // H``, ``V`` vocabulary
size ``vocab_size``.

Masks: ``attention_mask`` is the Hugging Face-style ``(N, S)`` tensor with
**1 = real token, 0 = padding**, at the model's boundary only; inside, the
layers take an ``attn_mask`` with **True = may attend**, as everywhere in
:mod:`tinyformer.models.attention`. Positions count real tokens only, so a
left-padded row's first real token sits at position 0.

Under a cache, query ``i`` of the ``L`` new tokens is the ``P + i``-th key:
it may attend to keys ``j <= P + i``. The causal block is aligned at the
bottom right of the ``(L, S)`` score matrix (``torch.ones(L, S).tril(P)``),
not at the top left as ``is_causal`` is.
"""

from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinyformer.models.attention import (
    MultiHeadAttention,
    fused_attention,
    repeat_kv_heads,
    scaled_dot_product_attention,
)
from tinyformer.models.cache import (  # noqa: F401
    KVCache,
    causal_block_mask,
    kv_cache_bytes,
    sliding_window_mask,
)
from tinyformer.models.decoder_config import (  # noqa: F401
    DECODER_ACTIVATIONS,
    DECODER_NORMS,
    DECODER_POSITIONAL_SCHEMES,
    DecoderConfig,
)
from tinyformer.models.latent_attention import MultiHeadLatentAttention
from tinyformer.models.speculative import SpeculativeOutput, accept_drafts
from tinyformer.tools.checks import (
    check_int,
)

# The cache, the masks and the config are documented where they live
# (tinyformer.models.cache, tinyformer.models.decoder_config) and importable
# from here as well.
__all__ = [
    "CausalSelfAttention",
    "DecoderFeedForward",
    "DecoderLayer",
    "TinyDecoder",
]


class DecoderFeedForward(nn.Module):
    """``down(act(up(x)))``, or with SwiGLU ``down(silu(gate(x)) * up(x))``
    (Shazeer, 2020, Eq. 6), applied to each position alone.

    Args:
        config: the model's config (``d_model``, ``d_ff``, ``activation``,
            ``bias``).
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.activation = config.activation
        d_model, d_ff, bias = config.d_model, config.d_ff, config.bias
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.gate_proj = (
            nn.Linear(d_model, d_ff, bias=bias)
            if config.activation == "swiglu"
            else None
        )
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        up = self.up_proj(x)  # (..., F)
        if self.gate_proj is not None:
            hidden = F.silu(self.gate_proj(x)) * up
        elif self.activation == "gelu_tanh":
            hidden = F.gelu(up, approximate="tanh")
        elif self.activation == "gelu":
            hidden = F.gelu(up)
        else:
            hidden = F.relu(up)
        return self.down_proj(hidden)  # (..., E)


class CausalSelfAttention(MultiHeadAttention):
    """Masked self-attention of a decoder layer, with positions and a
    cache (Vaswani et al., 2017, Sec. 3.2.3).

    The projections, head split and grouped-query sharing are those of
    :class:`~tinyformer.models.attention.MultiHeadAttention`; what this class adds
    is where the new keys and values go (into the cache) and how position
    enters: the scheme's ``rotate`` hook turns the new queries and keys by
    their absolute positions before the keys are cached (rotary), and a
    score bias (ALiBi, T5) arrives in ``attn_mask``.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(
            config.d_model,
            config.num_heads,
            num_kv_heads=config.num_kv_heads,
            bias=config.bias,
            dropout=config.dropout,
            rotary=config.positional_scheme.rotary,
            rotary_base=config.base,
            rotary_interleaved=config.rotary_interleaved,
        )
        self.config = config

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        *,
        attn_mask: Tensor,
        positions: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from the ``L`` new tokens to the cached and new keys.

        Args:
            x: ``(N, L, E)`` normalised inputs of the new tokens.
            attn_mask: bool ``(N, 1, L, S)`` with **True = may attend**, or
                float ``(N, H, L, S)`` added to the scores (a score bias).
            positions: ``(N, L)`` integer positions of the new tokens.
            cache: the :class:`~tinyformer.models.cache.KVCache` to read and extend, or None.
            layer: this layer's index in the cache.
            need_weights: if True, return the ``(N, H, L, S)`` weights.

        Returns:
            ``(output, weights)``: ``(N, L, E)`` and the weights or None.
        """
        q = self.split_heads(self.q_proj(x))  # (N, H, L, D)
        # (N, H_kv, L, D)
        k = self.split_heads(self.k_proj(x), self.num_kv_heads)
        v = self.split_heads(self.v_proj(x), self.num_kv_heads)
        # rotary turns them by absolute positions (the cache offset is in
        # them); every other scheme leaves them as they are
        scheme = self.config.positional_scheme
        q, k = scheme.rotate(q, k, positions[:, None, :], self.config)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (N, H_kv, S, D)
        k = repeat_kv_heads(k, self.num_heads)  # (N, H, S, D)
        v = repeat_kv_heads(v, self.num_heads)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, k, v, attn_mask, dropout_p=dropout_p
            )
        else:
            heads = fused_attention(
                q, k, v, attn_mask, dropout_p=dropout_p
            )  # (N, H, L, D)
        return self.out_proj(self.merge_heads(heads)), weights


def _norm(config: DecoderConfig) -> nn.Module:
    if config.norm == "rms":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(
        config.d_model, eps=config.norm_eps, bias=config.bias
    )


class DecoderLayer(nn.Module):
    """A pre-LN decoder layer: ``x + Attn(Norm(x))``, then
    ``x + FFN(Norm(x))`` (Radford et al., 2019, Sec. 2.3; Xiong et al.,
    2020); with ``attention_only`` the first step alone (Elhage et al.,
    2021)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm = _norm(config)
        self.attn = (
            CausalSelfAttention(config)
            if config.kv_lora_rank is None
            else MultiHeadLatentAttention(config)
        )
        if config.attention_only:
            self.ffn_norm = self.ffn = None
        else:
            self.ffn_norm = _norm(config)
            self.ffn = DecoderFeedForward(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor,
        positions: Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``(N, L, E)`` outputs of the new tokens, and with
        ``need_weights`` the attention weights ``(N, H, L, S)`` as well
        (arguments as :meth:`CausalSelfAttention.forward`'s)."""
        attended, weights = self.attn(
            self.attn_norm(x),
            attn_mask=attn_mask,
            positions=positions,
            cache=cache,
            layer=layer,
            need_weights=need_weights,
        )
        x = x + self.dropout(attended)  # (N, L, E)
        if self.ffn is not None:
            x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return (x, weights) if need_weights else x


class TinyDecoder(nn.Module):
    """A decoder-only language model: token embedding, ``num_layers``
    pre-LN layers of causal self-attention and a feed-forward network, a
    final norm and the LM head (Radford et al., 2019).

    ``forward`` returns next-token logits for every position; with a
    :class:`~tinyformer.models.cache.KVCache` it takes only the new tokens and returns the logits
    the full pass would give them (equal up to rounding). Weights are
    initialised as in GPT-2: normal with standard deviation 0.02, biases
    zero. With ``"sinusoidal"`` positions the token embeddings are scaled
    by ``sqrt(d_model)`` before the table is added, as in Vaswani et al.
    (2017, Sec. 3.4); no other scheme scales them.

    Args:
        config: the model's :class:`~tinyformer.models.decoder_config.DecoderConfig`.

    Raises:
        TypeError: if ``config`` is not a :class:`~tinyformer.models.decoder_config.DecoderConfig`.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(
                f"config must be a DecoderConfig, got {type(config).__name__}"
            )
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        scheme = config.positional_scheme
        # (x, positions) -> x with position vectors added, or None
        self.position_embed = scheme.decoder_embedding(config)
        # (query positions, key positions) -> (N, H, L, S) bias, or None;
        # one module for every layer
        self.position_bias = scheme.score_bias(config, causal=True)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(config) for _ in range(config.num_layers)
        )
        self.norm = _norm(config)
        self.lm_head = nn.Linear(
            config.d_model, config.vocab_size, bias=False
        )
        self.apply(self._init_weights)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty :class:`~tinyformer.models.cache.KVCache` for ``batch_size`` sequences."""
        return KVCache(self.config, batch_size)

    def _check_cache(self, cache: KVCache, batch_size: int) -> int:
        """The number of cached positions, after checking that ``cache``
        belongs to this model and batch."""
        if not isinstance(cache, KVCache):
            raise TypeError(
                f"cache must be a KVCache or None, got {type(cache).__name__}"
            )
        owner = cache._owner() if cache._owner is not None else None
        # a filled cache whose model is gone, or another model's, is stale
        foreign = cache.seq_len > 0 and owner is not self
        if cache.config != self.config or foreign:
            raise ValueError(
                "cache was filled by another model; start a new one with model.new_cache(batch_size)"
            )
        if cache.batch_size != batch_size:
            raise ValueError(
                f"cache holds batch_size={cache.batch_size} sequences, input_ids has {batch_size}"
            )
        cache._owner = weakref.ref(self)
        return cache.seq_len

    def _check_ids(self, input_ids: object) -> Tensor:
        if (
            not isinstance(input_ids, Tensor)
            or input_ids.is_floating_point()
            or input_ids.is_complex()
            or input_ids.dtype == torch.bool
        ):
            kind = (
                input_ids.dtype
                if isinstance(input_ids, Tensor)
                else type(input_ids).__name__
            )
            raise TypeError(
                f"input_ids must be an integer Tensor, got {kind}"
            )
        if input_ids.dim() != 2 or input_ids.size(1) == 0:
            raise ValueError(
                f"input_ids must have shape (N, L) with L >= 1, got {tuple(input_ids.shape)}"
            )
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"input_ids must lie in [0, vocab_size={self.config.vocab_size}), got values from {low} to {high}"
            )
        return input_ids

    def _real_tokens(
        self, attention_mask: Tensor | None, shape: tuple[int, int]
    ) -> Tensor:
        """``attention_mask`` as a bool ``(N, S)`` tensor, True = real."""
        if attention_mask is None:
            return torch.ones(
                shape, dtype=torch.bool, device=self.embed.weight.device
            )
        if not isinstance(attention_mask, Tensor):
            raise TypeError(
                f"attention_mask must be a Tensor or None, got {type(attention_mask).__name__}"
            )
        if tuple(attention_mask.shape) != shape:
            raise ValueError(
                f"attention_mask must have shape (N, cached + new tokens)={shape}, got {tuple(attention_mask.shape)}"
            )
        if attention_mask.dtype != torch.bool:
            if not bool(
                ((attention_mask == 0) | (attention_mask == 1)).all()
            ):
                raise ValueError(
                    "attention_mask must hold 1 (real token) and 0 (padding) only"
                )
            attention_mask = attention_mask == 1
        return attention_mask

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        cache: KVCache | None = None,
        last_only: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, tuple[Tensor, ...]]:
        """Next-token logits of every new token.

        Args:
            input_ids: ``(N, L)`` integer token ids in ``[0, V)``: the new
                tokens (all of them without a cache).
            attention_mask: ``(N, S)`` with 1 (or True) = real token and 0
                = padding, covering the cached and the new tokens, as in
                Hugging Face; None means every token is real. Padding may
                sit on the left of a row (left padding); positions count
                real tokens only.
            cache: a :class:`~tinyformer.models.cache.KVCache` to read and extend, or None.
            last_only: if True, apply the final norm and the LM head to the
                last position only (all that generation needs).
            need_weights: if True, return every layer's attention weights
                as well, computed on the explicit path (the fused kernel
                returns none).

        Returns:
            ``(N, L, V)`` logits (``(N, 1, V)`` with ``last_only``), in the
            model's dtype; with ``need_weights`` the pair ``(logits,
            weights)``, ``weights`` a tuple of one ``(N, H, L, S)`` tensor
            per layer (zero on padding and on keys a query may not see).

        Raises:
            TypeError: if ``input_ids`` is not an integer tensor, or
                ``attention_mask`` or ``cache`` has the wrong type.
            ValueError: if an id is out of range, a shape is wrong, the
                cache belongs to another model or batch, or a position
                lies beyond the ``"learned"`` or ``"sinusoidal"`` table,
                naming the values.
        """
        input_ids = self._check_ids(input_ids)
        batch_size, seq_len = input_ids.shape
        past = 0 if cache is None else self._check_cache(cache, batch_size)
        # (N, S), True = real token
        real = self._real_tokens(
            attention_mask, (batch_size, past + seq_len)
        )
        recorded = None if cache is None else cache.attention_mask
        if recorded is not None and not torch.equal(
            real[:, :past], recorded
        ):
            raise ValueError(
                f"attention_mask's first {past} columns differ from the padding the cache recorded"
            )
        # positions count real tokens: (N, S), then the new tokens' (N, L)
        token_positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)
        positions = token_positions[:, past:]
        if cache is not None and cache.key_index is not None:
            # a windowed cache: its keys' token indices, positions, padding
            new_index = torch.arange(
                past, past + seq_len, device=real.device
            ).expand(batch_size, seq_len)  # (N, L)
            key_index = torch.cat((cache.key_index, new_index), dim=1)
            key_positions = torch.cat((cache.key_positions, positions), 1)
            key_real = torch.cat((cache.key_mask, real[:, past:]), dim=1)
        else:
            # every token seen so far is a key: (N, S)
            key_index = torch.arange(
                past + seq_len, device=real.device
            ).expand(batch_size, past + seq_len)
            key_positions, key_real = token_positions, real
        query_index = torch.arange(past, past + seq_len, device=real.device)
        attn_mask = self._attn_mask(
            query_index, positions, key_index, key_positions, key_real
        )

        if cache is not None:
            cache._begin()
        x = self.embed(input_ids)  # (N, L, E)
        if self.position_embed is not None:
            x = self._add_positions(x, positions)
        x = self.dropout(x)
        weights = []
        for index, layer in enumerate(self.layers):
            x = layer(
                x,
                attn_mask=attn_mask,
                positions=positions,
                cache=cache,
                layer=index,
                need_weights=need_weights,
            )
            if need_weights:
                x, layer_weights = x
                weights.append(layer_weights)  # (N, H, L, S)
        if cache is not None:
            # every layer ran: the pass's keys, values and padding at once
            cache._commit(real)
            if self.config.sliding_window is not None:
                cache.key_index, cache.key_positions = (
                    key_index,
                    key_positions,
                )
                cache.key_mask = key_real
                cache._evict()
        if last_only:
            x = x[:, -1:]  # (N, 1, E)
        logits = self.lm_head(self.norm(x))  # (N, L, V)
        return (logits, tuple(weights)) if need_weights else logits

    def _attn_mask(
        self,
        query_index: Tensor,
        positions: Tensor,
        key_index: Tensor,
        key_positions: Tensor,
        key_real: Tensor,
    ) -> Tensor:
        """Bool ``(N, 1, L, S)`` (True = may attend), or with a score bias
        (ALiBi, T5) float ``(N, H, L, S)`` with ``-inf`` where attention is
        blocked.

        ``query_index`` ``(L,)`` and ``key_index`` ``(N, S)`` are token
        indices (columns of the Hugging Face mask), ``positions`` ``(N, L)``
        and ``key_positions`` ``(N, S)`` positions, ``key_real`` ``(N, S)``
        True for real keys. Padding sits only on the left, so between real
        tokens a difference of indices is a difference of positions.
        """
        query = query_index[None, :, None]  # (1, L, 1)
        keys = key_index[:, None, :]  # (N, 1, S)
        # causal, bottom-right aligned under a cache: key j <= query i
        allowed = (keys <= query) & key_real[:, None, :]  # (N, L, S)
        window = self.config.sliding_window
        if window is not None:
            near = query - keys < window
            if self.config.num_sink_tokens:
                sink = key_positions < self.config.num_sink_tokens
                near = near | sink[:, None, :]
            allowed = allowed & near
        allowed = allowed[:, None]  # (N, 1, L, S)
        if self.position_bias is None:
            return allowed
        # over real-token positions, cached keys included: (N, H, L, S)
        bias = self.position_bias(
            positions, key_positions, dtype=self.embed.weight.dtype
        )
        return bias.masked_fill(~allowed, float("-inf"))

    def _add_positions(self, x: Tensor, positions: Tensor) -> Tensor:
        """Add the position vectors of ``positions`` ``(N, L)`` to ``x``
        ``(N, L, E)``, refusing a position past the scheme's table."""
        highest = int(positions.max())
        if (
            self.config.positional_scheme.table
            and highest >= self.config.max_len
        ):
            raise ValueError(
                f"position {highest} lies beyond the {self.config.positional} table of "
                f"max_len={self.config.max_len} rows; the input is too long for this model"
            )
        return self.position_embed(x, positions)

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int,
        *,
        attention_mask: Tensor | None = None,
        use_cache: bool = True,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        draft_model: TinyDecoder | None = None,
        num_draft_tokens: int = 4,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Extend every row of ``input_ids`` by ``max_new_tokens`` tokens,
        one at a time (or, with a ``draft_model``, several per pass of this
        model: :meth:`speculative_generate`).

        At temperature 0 each new token is the most likely one (greedy);
        otherwise it is drawn from ``softmax(logits / temperature)``,
        restricted to the ``top_k`` most likely tokens when given. With
        ``use_cache`` each step runs the new token alone against a
        :class:`~tinyformer.models.cache.KVCache`; without, it recomputes the whole sequence. Call
        ``model.eval()`` first: in training mode dropout is active.

        Args:
            input_ids: ``(N, L)`` prompt token ids; left-pad rows of
                different lengths (right padding is refused).
            max_new_tokens: tokens to add, >= 0.
            attention_mask: ``(N, L)`` with 1 = real token and 0 = padding,
                or None (every token real).
            use_cache: whether to decode with a key-value cache.
            temperature: a finite number >= 0; 0 is greedy. The
                tempered softmax is computed in float32 at least, and a
                temperature small enough to overflow it gives the argmax,
                never an error.
            top_k: keep only the k most likely tokens when sampling, or
                None.
            generator: the random generator for sampling (reproducible
                samples), or None for the global one.
            draft_model: a smaller :class:`TinyDecoder` with the same
                vocabulary that proposes ``num_draft_tokens`` tokens at a
                time for this model to check in one pass (speculative
                decoding: the same tokens at temperature 0, the same
                distribution otherwise), or None. One sequence only
                (``N = 1``), with the cache.
            num_draft_tokens: tokens the draft proposes per pass, >= 1
                (gamma).
            cache: an empty cache for ``N`` sequences to decode with, such
                as a :class:`~tinyformer.models.quantized_cache.QuantizedKVCache`
                or a :class:`~tinyformer.models.paged_cache.PagedKVCache`;
                None makes a :class:`~tinyformer.models.cache.KVCache`.

        Returns:
            ``(N, L + max_new_tokens)`` token ids: the prompt, then the new
            tokens.

        Raises:
            TypeError, ValueError: for the inputs of :meth:`forward`, or a
                negative ``max_new_tokens``, a negative, infinite or NaN
                ``temperature``, a ``top_k`` below 1 or an
                ``attention_mask`` with padding after a real token (right
                padding), naming the value or the row; with a
                ``draft_model``, those of :meth:`speculative_generate`; a
                ``cache`` that is not a KVCache, not empty, or given with
                ``use_cache=False`` or a ``draft_model``.
        """
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(
                    f"cache must be a KVCache or None, got {type(cache).__name__}"
                )
            if not use_cache or draft_model is not None:
                raise ValueError(
                    "cache= is for plain cached decoding: it cannot go with use_cache=False or a draft_model"
                )
            if cache.seq_len:
                raise ValueError(
                    f"cache must be empty, it holds {cache.seq_len} tokens: generate starts from the prompt"
                )
        if draft_model is not None:
            if not use_cache:
                raise ValueError(
                    "use_cache=False with a draft_model: speculative decoding keeps the checked tokens' keys "
                    "in each model's cache"
                )
            return self.speculative_generate(
                draft_model,
                input_ids,
                max_new_tokens,
                num_draft_tokens=num_draft_tokens,
                attention_mask=attention_mask,
                temperature=temperature,
                top_k=top_k,
                generator=generator,
            ).sequences
        ids, mask = self._check_generate(
            input_ids, max_new_tokens, attention_mask, temperature, top_k
        )
        if cache is None and use_cache:
            cache = self.new_cache(ids.size(0))
        logits = self(ids, attention_mask=mask, cache=cache, last_only=True)
        for step in range(max_new_tokens):
            token = self._pick(logits[:, -1], temperature, top_k, generator)
            ids = torch.cat((ids, token), dim=1)  # (N, L + step + 1)
            mask = torch.cat(
                (mask, torch.ones_like(token, dtype=torch.bool)), 1
            )
            if step == max_new_tokens - 1:
                break
            # with a cache only the new token runs: its keys join the cache
            logits = self(
                token if cache is not None else ids,
                attention_mask=mask,
                cache=cache,
                last_only=True,
            )
        return ids

    @torch.no_grad()
    def speculative_generate(
        self,
        draft_model: TinyDecoder,
        input_ids: Tensor,
        max_new_tokens: int,
        *,
        num_draft_tokens: int = 4,
        attention_mask: Tensor | None = None,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> SpeculativeOutput:
        """Speculative decoding: ``draft_model`` proposes
        ``num_draft_tokens`` tokens one at a time, this model computes its
        logits for all of them in one cached pass, and the drafts it agrees
        with are kept, followed by one token of its own (Leviathan et al.,
        2023, Algorithm 1; Chen et al., 2023).

        At temperature 0 a draft is kept when it is this model's argmax,
        and the output is this model's own greedy output, token for token.
        Otherwise the rejection rule of
        :func:`~tinyformer.models.speculative.accept_drafts` keeps the
        output distribution exactly this model's (tempered and top-k'd as
        in :meth:`generate`). Each pass of this model yields between 1 and
        ``num_draft_tokens + 1`` tokens; both caches are then cropped to
        the kept tokens (:meth:`~tinyformer.models.cache.KVCache.crop`).
        Under ``torch.no_grad``; call ``eval()`` on both models first.

        Args:
            draft_model: a :class:`TinyDecoder` with this model's
                ``vocab_size``, usually much smaller.
            input_ids: ``(1, L)`` prompt token ids: one sequence, as in
                Hugging Face's assisted generation.
            max_new_tokens: tokens to add, >= 0.
            num_draft_tokens: tokens the draft proposes per pass, >= 1
                (gamma); fewer near the end, so that exactly
                ``max_new_tokens`` come out.
            attention_mask: ``(1, L)``, 1 = real token, 0 = left padding,
                or None.
            temperature, top_k, generator: as in :meth:`generate`.

        Returns:
            a :class:`~tinyformer.models.speculative.SpeculativeOutput`:
            the ``(1, L + max_new_tokens)`` sequences, the passes of each
            model, and per pass of this model the drafted and kept tokens.

        Raises:
            TypeError: if ``draft_model`` is not a :class:`TinyDecoder`,
                or for the inputs of :meth:`generate`.
            ValueError: if the vocabularies differ (naming both sizes),
                ``num_draft_tokens`` < 1, ``input_ids`` holds more than one
                sequence, or either model has a ``sliding_window`` (its
                cache cannot drop rejected drafts); and for the inputs of
                :meth:`generate`.
        """
        if not isinstance(draft_model, TinyDecoder):
            raise TypeError(
                f"draft_model must be a TinyDecoder, got {type(draft_model).__name__}"
            )
        if draft_model.config.vocab_size != self.config.vocab_size:
            raise ValueError(
                f"draft_model has vocab_size={draft_model.config.vocab_size} and the model "
                f"vocab_size={self.config.vocab_size}: a draft proposes the model's own tokens"
            )
        check_int("num_draft_tokens", num_draft_tokens, minimum=1)
        ids, mask = self._check_generate(
            input_ids, max_new_tokens, attention_mask, temperature, top_k
        )
        if ids.size(0) != 1:
            raise ValueError(
                f"speculative decoding takes one sequence (batch size 1, as Hugging Face's assisted "
                f"generation); input_ids has {ids.size(0)}"
            )
        for name, model in (
            ("the model", self),
            ("draft_model", draft_model),
        ):
            if model.config.sliding_window is not None:
                raise ValueError(
                    f"{name} has sliding_window={model.config.sliding_window}: its cache drops keys as it "
                    "goes and cannot be cropped back to the kept tokens"
                )
        cache, draft_cache = self.new_cache(1), draft_model.new_cache(1)
        target_passes = draft_passes = 0
        drafted_counts: list[int] = []
        kept_counts: list[int] = []
        produced = 0
        while produced < max_new_tokens:
            # never more drafts than the tokens still to come, less one
            gamma = min(num_draft_tokens, max_new_tokens - produced - 1)
            start = ids.size(1)
            draft_probs = []
            for _ in range(gamma):
                # the tokens the draft has not read yet, then its guess
                logits = draft_model(
                    ids[:, draft_cache.seq_len :],
                    attention_mask=mask,
                    cache=draft_cache,
                    last_only=True,
                )[:, -1]  # (1, V)
                draft_passes += 1
                if temperature == 0:
                    token = logits.argmax(dim=-1, keepdim=True)
                else:
                    probs = self._probabilities(logits, temperature, top_k)
                    draft_probs.append(probs[0])
                    token = torch.multinomial(probs, 1, generator=generator)
                ids = torch.cat((ids, token), dim=1)
                mask = torch.cat(
                    (mask, torch.ones_like(token, dtype=torch.bool)), 1
                )
            # one pass reads every token this model has not, drafts included
            logits = self(
                ids[:, cache.seq_len :], attention_mask=mask, cache=cache
            )[0, -(gamma + 1) :]  # (G + 1, V): after each draft's place
            target_passes += 1
            drafted = ids[0, start:]  # (G,)
            if temperature == 0:
                best = logits.argmax(dim=-1)  # (G + 1,)
                agree = (best[:gamma] == drafted).long().cumprod(dim=0)
                kept = int(agree.sum())
                token_id = int(best[kept])
            else:
                kept, token_id = accept_drafts(
                    self._probabilities(logits, temperature, top_k),
                    torch.stack(draft_probs)
                    if gamma
                    else logits.new_zeros(0, logits.size(-1)),
                    drafted,
                    generator=generator,
                )
            drafted_counts.append(gamma)
            kept_counts.append(kept)
            # the kept drafts, then this model's own token
            length = start + kept
            token = ids.new_full((1, 1), token_id)
            ids = torch.cat((ids[:, :length], token), dim=1)
            mask = torch.cat(
                (
                    mask[:, :length],
                    torch.ones_like(token, dtype=torch.bool),
                ),
                1,
            )
            cache.crop(min(cache.seq_len, length))
            draft_cache.crop(min(draft_cache.seq_len, length))
            produced += kept + 1
        return SpeculativeOutput(
            sequences=ids,
            target_passes=target_passes,
            draft_passes=draft_passes,
            drafted=tuple(drafted_counts),
            kept=tuple(kept_counts),
        )

    def _check_generate(
        self,
        input_ids: object,
        max_new_tokens: object,
        attention_mask: Tensor | None,
        temperature: object,
        top_k: object,
    ) -> tuple[Tensor, Tensor]:
        """``(ids, mask)`` after checking :meth:`generate`'s arguments:
        the ``(N, L)`` ids and the ``(N, L)`` bool mask, True = real."""
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 <= temperature < math.inf  # NaN fails too
        ):
            raise ValueError(
                f"temperature={temperature!r} must be a finite number >= 0"
            )
        if top_k is not None:
            check_int("top_k", top_k, minimum=1)
        ids = self._check_ids(input_ids)
        # (N, L) bool, True = real token
        mask = self._real_tokens(attention_mask, tuple(ids.shape))
        # a real token after padding ends the padding; padding after a real
        # token would make the row continue from a pad token
        late = mask[:, :-1] & ~mask[:, 1:]  # (N, L - 1)
        if bool(late.any()):
            row = int(late.any(dim=1).nonzero()[0])
            raise ValueError(
                f"attention_mask row {row} has padding after a real token (right padding); generate "
                "continues every row from its last column, so pad the prompts on the left"
            )
        return ids, mask

    @staticmethod
    def _pick(
        logits: Tensor,
        temperature: float,
        top_k: int | None,
        generator: torch.Generator | None,
    ) -> Tensor:
        """The next token of each row, ``(N, 1)``, from ``(N, V)`` logits."""
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        probs = TinyDecoder._probabilities(logits, temperature, top_k)
        return torch.multinomial(probs, 1, generator=generator)

    @staticmethod
    def _probabilities(
        logits: Tensor, temperature: float, top_k: int | None
    ) -> Tensor:
        """``(..., V)`` the distribution sampling draws from, for
        ``(..., V)`` logits and a temperature > 0."""
        # in float32 at least (a float16 logit / 1e-4 overflows); where a
        # temperature is so small that a finite logit still overflows,
        # from each row's maximum down, so every scaled logit is <= 0: the
        # distribution is then the argmax (split evenly between ties)
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        scaled = wide / temperature
        if bool((torch.isinf(scaled) & torch.isfinite(wide)).any()):
            peak = wide.amax(dim=-1, keepdim=True)
            scaled = (wide - peak) / temperature
        if top_k is not None and top_k < scaled.size(-1):
            kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        return scaled.softmax(dim=-1)

    def extra_repr(self) -> str:
        c = self.config
        text = (
            f"vocab_size={c.vocab_size}, positional={c.positional!r}, norm={c.norm!r}, "
            f"activation={c.activation!r}, tie_embeddings={c.tie_embeddings}"
        )
        return text + (", attention_only=True" if c.attention_only else "")
