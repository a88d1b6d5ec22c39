"""Scaled dot-product attention and multi-head attention (Vaswani et al.,
2017, Sec. 3.2).

Shapes: ``N`` batch size, ``L`` target (query) length, ``S`` source
(key/value) length, ``E`` model width ``d_model``, ``H`` number of heads
``num_heads``, ``D = E // H`` head width ``head_dim``.

Mask polarity, the same everywhere in this module:

* ``attn_mask`` boolean: **True = may attend**, False = blocked (the
  ``F.scaled_dot_product_attention`` convention, the opposite of
  ``nn.MultiheadAttention``'s boolean ``attn_mask``); or floating: added to
  the scores (``-inf`` blocks).
* ``key_padding_mask`` boolean: **True = padding**, that key is ignored by
  every query.
* A query row that may attend to nothing gets all-zero weights and an
  all-zero output, never NaN, and its gradients are zero too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinyformer.models.positional.rotary import apply_rotary
from tinyformer.tools.checks import (
    check_attn_mask_dtype,
    check_floating_tensor,
    check_int,
    check_probability,
    check_query_key_value,
)

__all__ = [
    "MultiHeadAttention",
    "causal_mask",
    "fused_attention",
    "repeat_kv_heads",
    "scaled_dot_product_attention",
]


def causal_mask(
    seq_len: int, *, device: torch.device | str | None = None
) -> Tensor:
    """Boolean ``(L, L)`` mask with True where query i may attend to key j,
    that is j <= i (Vaswani et al., 2017, Sec. 3.2.3).

    Args:
        seq_len: sequence length L (tokens), >= 0.
        device: device of the result.

    Returns:
        ``(L, L)`` bool tensor, lower triangular including the diagonal.
        True = may attend.

    Raises:
        TypeError: if ``seq_len`` is not an int.
        ValueError: if ``seq_len < 0``.
    """
    check_int("seq_len", seq_len, minimum=0)
    return torch.ones(
        seq_len, seq_len, dtype=torch.bool, device=device
    ).tril()


def _check_mask(
    attn_mask: Tensor | None, target: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Raise unless ``attn_mask`` is bool or ``dtype`` and broadcasts to
    ``target`` (..., L, S)."""
    if attn_mask is None:
        return
    check_attn_mask_dtype(attn_mask, dtype)
    try:
        shape = torch.broadcast_shapes(attn_mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target):
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the scores' shape {target}"
        )


def _merge_masks(
    attn_mask: Tensor | None,
    is_causal: bool,
    seq_len_q: int,
    seq_len_k: int,
    device: torch.device,
) -> Tensor | None:
    """Fold ``is_causal`` into ``attn_mask``; the causal rule is top-left
    aligned, j <= i, as in PyTorch."""
    if not is_causal:
        return attn_mask
    # (L, S)
    causal = torch.ones(
        seq_len_q, seq_len_k, dtype=torch.bool, device=device
    ).tril()
    return _restrict_mask(attn_mask, causal)


def _restrict_mask(attn_mask: Tensor | None, allowed: Tensor) -> Tensor:
    """``attn_mask`` with every pair that ``allowed`` forbids masked out.

    Args:
        attn_mask: ``None``, a bool mask (True = may attend) or a float mask
            added to the scores, broadcastable with ``allowed``.
        allowed: bool, True = may attend (a causal rule, or the keys that are
            not padding), broadcastable with ``attn_mask``.

    Returns:
        ``allowed`` when ``attn_mask`` is None; ``attn_mask & allowed`` for a
        bool mask; for a float mask, ``attn_mask`` with ``-inf`` where
        ``allowed`` is False. Either way a pair may be attended only if both
        masks allow it.
    """
    if attn_mask is None:
        return allowed
    if attn_mask.dtype == torch.bool:
        return attn_mask & allowed
    return attn_mask.masked_fill(~allowed, float("-inf"))


def _blocked_rows(attn_mask: Tensor) -> Tensor:
    """True for each query row in which every key is blocked, shape
    ``(..., L, 1)``."""
    if attn_mask.dtype == torch.bool:
        return ~attn_mask.any(dim=-1, keepdim=True)
    return torch.isneginf(attn_mask).all(dim=-1, keepdim=True)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, with its weights
    (Vaswani et al., 2017, Sec. 3.2.1, Eq. 1).

    The explicit path: it forms the ``(..., L, S)`` score matrix, so it can
    return the weights.

    Args:
        query: ``(..., L, E)`` queries.
        key: ``(..., S, E)`` keys; leading dimensions broadcast with
            ``query``'s.
        value: ``(..., S, Ev)`` values.
        attn_mask: ``None``; a bool tensor broadcastable to ``(..., L, S)``
            with **True = may attend**; or a tensor of ``query``'s dtype
            added to the scores (``-inf`` blocks).
        is_causal: if True, query i may also attend only to keys j <= i
            (top-left aligned when L != S, as in
            ``torch.nn.functional.scaled_dot_product_attention``); combined
            with ``attn_mask``.
        dropout_p: probability of zeroing a weight, in [0, 1); apply it only
            in training.

    Returns:
        ``(output, weights)``: ``(..., L, Ev)`` and ``(..., L, S)``. The
        weights are the ones applied to ``value`` (after dropout). A query
        row that may attend to nothing gets zero weights and a zero output,
        never NaN.

    Precision: ``query`` is divided by sqrt(d_k) before the product, so
    ``Q K^T`` never overflows where the scaled scores would not; float16 and
    bfloat16 inputs get their scores and softmax computed in float32 (as
    PyTorch's fused kernels do), then the weights are rounded to the input
    dtype. The scaled scores must fit in float32 (about 3.4e38).

    Raises:
        TypeError: if an input is not a floating tensor, the dtypes differ,
            or ``attn_mask`` has a dtype other than bool or the inputs'
            dtype.
        ValueError: if a tensor has fewer than 2 dimensions, the widths or
            lengths disagree, the leading dimensions do not broadcast, or
            ``attn_mask`` does not broadcast to the scores.
    """
    check_query_key_value(query, key, value)
    try:
        batch = torch.broadcast_shapes(
            query.shape[:-2], key.shape[:-2], value.shape[:-2]
        )
    except RuntimeError as err:
        raise ValueError(
            f"leading dimensions of query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} do not broadcast"
        ) from err
    dropout_p = check_probability("dropout_p", dropout_p)
    seq_len_q, seq_len_k = query.size(-2), key.size(-2)
    _check_mask(attn_mask, (*batch, seq_len_q, seq_len_k), query.dtype)

    # Scale Q before the product, not the scores after it: the same scores
    # up to rounding, L x d_k divisions instead of L x S, and the unscaled
    # Q K^T is never formed. Half-precision inputs get float32 scores and
    # softmax, so float16's range (65504) never bounds the scores.
    compute_dtype = (
        torch.float32
        if query.dtype in (torch.float16, torch.bfloat16)
        else query.dtype
    )
    scaled_query = query.to(compute_dtype) / math.sqrt(query.size(-1))
    # (..., L, S)
    scores = scaled_query @ key.to(compute_dtype).transpose(-2, -1)
    mask = _merge_masks(
        attn_mask, is_causal, seq_len_q, seq_len_k, query.device
    )
    blocked = None
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf"))
            if mask.dtype == torch.bool
            else scores + mask
        )
        blocked = _blocked_rows(mask)  # (..., L, 1)
        # A row with nothing to attend to would be softmax(-inf, ..., -inf)
        # = NaN; give it finite scores here and zero weights below, so
        # neither the output nor the gradient sees a NaN.
        scores = scores.masked_fill(blocked, 0.0)
    weights = scores.softmax(dim=-1).to(query.dtype)  # (..., L, S)
    if blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights  # (..., L, Ev), (..., L, S)


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V through PyTorch's fused kernel
    (``F.scaled_dot_product_attention``), with this module's mask rule.

    The weights are never returned, so no backend has to hold them. A query
    row that may attend to nothing is opened to every key for the kernel
    and its output set to zero afterwards, so no backend can produce a NaN
    for it and its gradients are zero.

    Args:
        query: ``(..., L, D)`` queries (already projected and split).
        key: ``(..., S, D)`` keys.
        value: ``(..., S, Dv)`` values.
        attn_mask: ``None``, a bool tensor broadcastable to ``(..., L, S)``
            with **True = may attend**, or a float tensor added to the
            scores (``-inf`` blocks).
        dropout_p: probability of zeroing a weight, in [0, 1); pass 0 in
            evaluation.

    Returns:
        ``(..., L, Dv)`` tensor.

    Raises:
        ValueError: if ``dropout_p`` is outside [0, 1).
    """
    dropout_p = check_probability("dropout_p", dropout_p)
    if attn_mask is None:
        return F.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout_p
        )
    blocked = _blocked_rows(attn_mask)  # (..., L, 1)
    safe = (
        attn_mask | blocked
        if attn_mask.dtype == torch.bool
        else attn_mask.masked_fill(blocked, 0.0)
    )
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=safe, dropout_p=dropout_p
    )
    return out.masked_fill(blocked, 0.0)  # (..., L, Dv)


def repeat_kv_heads(x: Tensor, num_heads: int) -> Tensor:
    """Grouped-query attention's sharing: each of the ``H_kv`` key or value
    heads serves ``H / H_kv`` consecutive query heads (Ainslie et al., 2023,
    Sec. 2.2; ``H_kv = 1`` is multi-query attention, Shazeer, 2019).

    Query head ``h`` reads key/value head ``h // (H / H_kv)``, the layout of
    Hugging Face's ``repeat_kv`` and of Llama's checkpoints.

    Args:
        x: ``(N, H_kv, S, D)`` keys or values.
        num_heads: the number of query heads H, a multiple of ``H_kv``.

    Returns:
        ``(N, H, S, D)`` tensor (``x`` itself when ``H == H_kv``).

    Raises:
        TypeError: if ``x`` is not a tensor or ``num_heads`` not an int.
        ValueError: if ``x`` is not 4-dimensional or ``num_heads`` is not a
            positive multiple of ``H_kv``, naming the values.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(
            f"x must have shape (N, H_kv, S, D), got {tuple(x.shape)}"
        )
    check_int("num_heads", num_heads, minimum=1)
    num_kv_heads = x.size(1)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads={num_heads} is not a multiple of the {num_kv_heads} key/value heads of x"
        )
    groups = num_heads // num_kv_heads
    if groups == 1:
        return x
    # (N, H_kv, S, D) -> (N, H, S, D): every head repeated `groups` times
    return x.repeat_interleave(groups, dim=1)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_h =
    Attention(Q W^Q_h, K W^K_h, V W^V_h) (Vaswani et al., 2017, Sec. 3.2.2).

    Each projection is one ``d_model x d_model`` linear layer whose output
    is split into ``num_heads`` slices of
    ``head_dim = d_model // num_heads`` features: every head sees a learned
    mixture of all ``d_model`` input features, never a raw slice of the
    input. The parameter count is ``4 * d_model * (d_model + 1)`` with bias
    (``4 * d_model**2`` without), whatever ``num_heads``.

    With ``num_kv_heads`` below ``num_heads`` (grouped-query attention,
    Ainslie et al., 2023; multi-query when it is 1, Shazeer, 2019) the key
    and value projections have ``num_kv_heads * head_dim`` outputs, and
    each key/value head serves ``num_heads / num_kv_heads`` query heads
    (:func:`repeat_kv_heads`): the same output as full multi-head attention
    whose key and value heads are those heads repeated.

    Batch first: inputs are ``(N, L, E)``. When ``need_weights`` is False
    the heads run through
    ``torch.nn.functional.scaled_dot_product_attention`` (the fast path);
    otherwise through :func:`scaled_dot_product_attention`, which returns
    the weights. Both give the same output.

    Args:
        d_model: model width E, >= 1.
        num_heads: number of heads H, >= 1, dividing ``d_model``.
        num_kv_heads: number of key/value heads ``H_kv``, dividing
            ``num_heads``; ``None`` (the default) means ``num_heads``.
        bias: whether the four projections have a bias.
        dropout: probability of zeroing an attention weight during training,
            in [0, 1).
        rotary: if True, rotate every head's queries and keys by their
            positions before the scores are formed, with
            :func:`~tinyformer.models.positional.apply_rotary` (Su et al., 2024);
            query ``i`` and key ``j`` are at positions ``i`` and ``j`` of
            their sequences. Off by default.
        rotary_base: the rotary wavelength constant, > 1.
        rotary_interleaved: the rotary pairing of features, ``(2i, 2i+1)``
            if True, ``(i, i + D/2)`` if False.

    Raises:
        TypeError: if ``d_model`` or ``num_heads`` is not an int.
        ValueError: if ``num_heads <= 0``, ``d_model <= 0``, ``d_model`` is
            not divisible by ``num_heads``, ``num_kv_heads`` does not
            divide ``num_heads``, or ``dropout`` is outside [0, 1), naming
            the values; if ``rotary`` is set and ``head_dim`` is odd.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        rotary: bool = False,
        rotary_base: float = 10000.0,
        rotary_interleaved: bool = True,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("num_heads", num_heads)
        if num_heads <= 0 or d_model <= 0:
            raise ValueError(
                f"d_model={d_model} and num_heads={num_heads} must both be positive"
            )
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        if num_kv_heads is None:
            num_kv_heads = num_heads
        check_int("num_kv_heads", num_kv_heads, minimum=1)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} does not divide num_heads={num_heads}"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        kv_dim = num_kv_heads * self.head_dim
        self.dropout = check_probability("dropout", dropout)
        # W^Q for all heads, side by side
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, kv_dim, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, kv_dim, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = bool(rotary)
        self.rotary_base = rotary_base
        self.rotary_interleaved = bool(rotary_interleaved)
        if self.rotary and self.head_dim % 2:
            raise ValueError(
                f"rotary=True needs an even head_dim, got head_dim={self.head_dim}"
            )

    @classmethod
    def from_torch(
        cls, module: nn.MultiheadAttention
    ) -> MultiHeadAttention:
        """A ``MultiHeadAttention`` that computes what an
        ``nn.MultiheadAttention`` computes.

        Every constructor option of ``nn.MultiheadAttention`` is reproduced
        or refused: ``embed_dim``, ``num_heads``, ``dropout``, ``bias``,
        ``device`` and ``dtype`` are copied (with the weights and the
        train/eval mode); ``kdim``/``vdim`` other than ``embed_dim``,
        ``add_bias_kv=True``, ``add_zero_attn=True`` and
        ``batch_first=False`` (this module is always batch first, so a
        sequence-first module's inputs would be read with the wrong layout)
        are refused.

        Raises:
            TypeError: if ``module`` is not an ``nn.MultiheadAttention``.
            ValueError: for an option this module does not reproduce, naming
                the option and its value.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be an nn.MultiheadAttention, got {type(module).__name__}"
            )
        for option in ("kdim", "vdim"):
            if getattr(module, option) != module.embed_dim:
                raise ValueError(
                    f"{option}={getattr(module, option)} is not supported: keys and values must have "
                    f"embed_dim={module.embed_dim} features"
                )
        refused = {
            "add_bias_kv": (module.bias_k is not None, True),
            "add_zero_attn": (module.add_zero_attn, True),
            "batch_first": (not module.batch_first, False),
        }
        for option, (is_set, value) in refused.items():
            if is_set:
                raise ValueError(
                    f"{option}={value} is not supported by tinyformer's MultiHeadAttention"
                )
        weight = module.in_proj_weight
        bias = module.in_proj_bias is not None
        mha = cls(
            module.embed_dim,
            module.num_heads,
            bias=bias,
            dropout=module.dropout,
        )
        mha.to(device=weight.device, dtype=weight.dtype)
        mha.train(module.training)
        with torch.no_grad():
            for proj, w in zip(
                (mha.q_proj, mha.k_proj, mha.v_proj),
                weight.chunk(3),
                strict=True,
            ):
                proj.weight.copy_(w)
            mha.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                for proj, b in zip(
                    (mha.q_proj, mha.k_proj, mha.v_proj),
                    module.in_proj_bias.chunk(3),
                    strict=True,
                ):
                    proj.bias.copy_(b)
                mha.out_proj.bias.copy_(module.out_proj.bias)
        return mha

    def split_heads(
        self, x: Tensor, num_heads: int | None = None
    ) -> Tensor:
        """``(N, L, H * D)`` to ``(N, H, L, D)``: a view of the same
        storage, then a transpose (no copy); H is ``num_heads``, by default
        the layer's."""
        batch_size, seq_len, _ = x.shape
        num_heads = self.num_heads if num_heads is None else num_heads
        # (N, H, L, D)
        return x.view(
            batch_size, seq_len, num_heads, self.head_dim
        ).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(N, H, L, D)`` to ``(N, L, E)``: the heads' outputs
        concatenated feature-wise, per position."""
        batch_size, _, seq_len, _ = x.shape
        # (N, L, E)
        return x.transpose(1, 2).reshape(batch_size, seq_len, self.d_model)

    def _check_inputs(
        self, query: Tensor, key: Tensor, value: Tensor
    ) -> None:
        for name, tensor in (
            ("query", query),
            ("key", key),
            ("value", value),
        ):
            check_floating_tensor(name, tensor)
            if tensor.dim() != 3 or tensor.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must have shape (N, length, d_model={self.d_model}), got {tuple(tensor.shape)}"
                )
        if not query.size(0) == key.size(0) == value.size(0):
            raise ValueError(
                f"batch sizes differ: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"key length {key.size(1)} != value length {value.size(1)}"
            )

    def _combined_mask(
        self,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        batch_size: int,
        seq_len_q: int,
        seq_len_k: int,
        dtype: torch.dtype,
    ) -> Tensor | None:
        """One mask broadcastable to ``(N, H, L, S)``: bool (True = may
        attend) or float (added)."""
        if attn_mask is not None:
            check_attn_mask_dtype(attn_mask, dtype)
            allowed = {
                2: [(seq_len_q, seq_len_k)],
                3: [
                    (batch_size * self.num_heads, seq_len_q, seq_len_k),
                    (self.num_heads, seq_len_q, seq_len_k),
                ],
                4: [
                    (n, h, seq_len_q, seq_len_k)
                    for n in (1, batch_size)
                    for h in (1, self.num_heads)
                ],
            }
            if tuple(attn_mask.shape) not in allowed.get(
                attn_mask.dim(), []
            ):
                raise ValueError(
                    f"attn_mask must have shape (L, S)=({seq_len_q}, {seq_len_k}), (N*H, L, S)=({batch_size * self.num_heads}, "
                    f"{seq_len_q}, {seq_len_k}), (H, L, S)=({self.num_heads}, {seq_len_q}, {seq_len_k}) "
                    f"or (N or 1, H or 1, L, S); got {tuple(attn_mask.shape)}"
                )
            if attn_mask.dim() == 3 and attn_mask.size(0) == self.num_heads:
                # (1, H, L, S): one mask per head, such as ALiBi's bias
                attn_mask = attn_mask.unsqueeze(0)
            elif attn_mask.dim() == 3:
                attn_mask = attn_mask.view(
                    batch_size, self.num_heads, seq_len_q, seq_len_k
                )
        if key_padding_mask is not None:
            if (
                not isinstance(key_padding_mask, Tensor)
                or key_padding_mask.dtype != torch.bool
            ):
                kind = (
                    key_padding_mask.dtype
                    if isinstance(key_padding_mask, Tensor)
                    else type(key_padding_mask).__name__
                )
                raise TypeError(
                    f"key_padding_mask must be a bool Tensor (True = padding), got {kind}"
                )
            if tuple(key_padding_mask.shape) != (batch_size, seq_len_k):
                raise ValueError(
                    f"key_padding_mask must have shape (N, S)=({batch_size}, {seq_len_k}), got {tuple(key_padding_mask.shape)}"
                )
            # (N, 1, 1, S), True = may attend
            attn_mask = _restrict_mask(
                attn_mask, ~key_padding_mask[:, None, None, :]
            )
        return attn_mask

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_attn_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Project, split into heads, attend in every head at once,
        concatenate, project.

        Args:
            query: ``(N, L, E)``.
            key: ``(N, S, E)``; defaults to ``query`` (self-attention).
            value: ``(N, S, E)``; defaults to ``key``.
            attn_mask: bool with **True = may attend**, or float added to
                the scores; shape ``(L, S)``, ``(N*H, L, S)`` (as in
                ``nn.MultiheadAttention``), ``(H, L, S)`` (one per head,
                such as :func:`~tinyformer.models.positional.alibi_bias`) or
                ``(N or 1, H or 1, L, S)``.
            key_padding_mask: bool ``(N, S)`` with **True = padding** (that
                key is ignored).
            is_causal: if True, query i attends only to keys j <= i, on top
                of any mask. (Unlike ``nn.MultiheadAttention``, where it is
                only a hint about ``attn_mask``, it applies the mask.)
            need_weights: if True, take the explicit path and return the
                attention weights.
            average_attn_weights: if True, average the returned weights over
                heads.

        Returns:
            ``(output, weights)``: output ``(N, L, E)``; weights
            ``(N, L, S)`` averaged over heads, or ``(N, H, L, S)`` per head,
            or None when ``need_weights`` is False. A query row that may
            attend to nothing gets zero weights, and its output is the
            output projection's bias.

        Raises:
            TypeError: if an input is not a floating tensor or a mask has
                the wrong dtype.
            ValueError: if a shape is wrong, naming the argument and the
                shapes.
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        batch_size, seq_len_q, _ = query.shape
        seq_len_k = key.size(1)
        mask = self._combined_mask(
            attn_mask,
            key_padding_mask,
            batch_size,
            seq_len_q,
            seq_len_k,
            query.dtype,
        )
        mask = _merge_masks(
            mask, is_causal, seq_len_q, seq_len_k, query.device
        )
        dropout_p = self.dropout if self.training else 0.0

        q = self.split_heads(self.q_proj(query))  # (N, H, L, D)
        # (N, H_kv, S, D); H_kv = H unless grouped-query attention
        k = self.split_heads(self.k_proj(key), self.num_kv_heads)
        v = self.split_heads(self.v_proj(value), self.num_kv_heads)
        # Rotary positions (Su et al., 2024), off unless rotary=True:
        # rotate queries and keys by their positions, never the values
        if self.rotary:
            # (N, H, L, D)
            q = apply_rotary(
                q,
                base=self.rotary_base,
                interleaved=self.rotary_interleaved,
            )
            # (N, H, S, D)
            k = apply_rotary(
                k,
                base=self.rotary_base,
                interleaved=self.rotary_interleaved,
            )

        # Grouped-query attention: each key/value head serves H / H_kv
        # query heads (Ainslie et al., 2023)
        k = repeat_kv_heads(k, self.num_heads)  # (N, H, S, D)
        v = repeat_kv_heads(v, self.num_heads)  # (N, H, S, D)

        weights = None
        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p=dropout_p
            )  # (N, H, L, D), (N, H, L, S)
            if average_attn_weights:
                weights = weights.mean(dim=1)  # (N, L, S)
        else:
            # `mask` is the one mask combined above; a row with nothing to
            # attend to gets a zero output, never NaN.
            # (N, H, L, D)
            heads = fused_attention(q, k, v, mask, dropout_p=dropout_p)
        return self.out_proj(self.merge_heads(heads)), weights  # (N, L, E)

    def extra_repr(self) -> str:
        rotary = (
            f", rotary=True, rotary_base={self.rotary_base}"
            if self.rotary
            else ""
        )
        kv = (
            f", num_kv_heads={self.num_kv_heads}"
            if self.num_kv_heads != self.num_heads
            else ""
        )
        return f"d_model={self.d_model}, num_heads={self.num_heads}{kv}, head_dim={self.head_dim}, dropout={self.dropout}{rotary}"
