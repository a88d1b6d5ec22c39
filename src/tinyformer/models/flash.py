"""Exact attention without the score matrix: the online softmax and
FlashAttention's tiled forward and backward, in plain PyTorch.

* :func:`online_softmax`: a softmax computed over blocks of a row with a
  running maximum and a running normaliser (Milakov and Gimelshein, 2018,
  Algorithm 3), equal to ``torch.softmax``.
* :func:`flash_attention`: softmax(Q K^T * scale) V computed tile by tile
  as in FlashAttention-2 (Dao, 2024, Algorithms 1 and 2): the forward keeps
  a running maximum, a running sum and a rescaled output for each query
  block and stores only the output and the logsumexp; the backward
  recomputes each tile's probabilities from the logsumexp, with
  D = rowsum(dO * O).
* :func:`tile_schedule`: the tiles :func:`flash_attention` visits, and which
  of them the causal rule skips or cuts, for the chapter's figure.
* :func:`merge_attention`: attention over the union of key sets from the
  outputs and logsumexps over each set (the combining step of split-K
  decoding, Dao et al., 2023, "Flash-Decoding").

Mask rules are those of :mod:`tinyformer.models.attention`: boolean ``attn_mask``
True = may attend (a float mask is added to the scores), boolean
``key_padding_mask`` True = padding, the causal rule top-left aligned (key
j <= query i), and a query row that may attend to nothing gets a zero
output, a logsumexp of -inf and zero gradients, never NaN.

Shapes: ``(..., L, D)`` queries, ``(..., S, D)`` keys, ``(..., S, Dv)``
values with the same leading dimensions, typically ``(N, H)``.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from tinyformer.models.attention import _check_mask
from tinyformer.tools.checks import (
    check_floating_tensor,
    check_int,
    check_query_key_value,
)

__all__ = [
    "Tile",
    "flash_attention",
    "merge_attention",
    "online_softmax",
    "tile_schedule",
]

_HALF = (torch.float16, torch.bfloat16)


def online_softmax(
    scores: Tensor, *, block_size: int, dim: int = -1
) -> Tensor:
    """softmax(scores) along ``dim``, read in blocks of ``block_size``
    entries with a running maximum and normaliser (Milakov and Gimelshein,
    2018, Algorithm 3).

    After each block, ``m`` is the largest entry seen so far and ``l`` the
    sum of ``exp(x - m)`` over the entries seen so far. A new block with
    maximum ``m_b`` updates them as ``m' = max(m, m_b)``,
    ``l' = l exp(m - m') + sum exp(x_b - m')``; a second pass divides
    ``exp(x - m)`` by ``l``. No exponential it takes exceeds 1, so nothing
    overflows, as in ``torch.softmax`` and unlike ``exp(x) / sum exp(x)``.
    A row of
    ``-inf`` gives zeros (``torch.softmax`` gives NaN there).

    Args:
        scores: a floating tensor; any shape.
        block_size: entries per block along ``dim`` (>= 1); the last block
            may be shorter.
        dim: the dimension to normalise.

    Returns:
        A tensor of ``scores``' shape and dtype, summing to 1 along ``dim``
        (0 for rows of ``-inf``).

    Raises:
        TypeError: if ``scores`` is not a floating tensor or ``block_size``
            not an int.
        ValueError: if ``block_size < 1``.
    """
    check_floating_tensor("scores", scores)
    check_int("block_size", block_size, minimum=1)
    x = scores.movedim(dim, -1)
    shape = x.shape[:-1]
    running_max = x.new_full(shape, float("-inf"))
    running_sum = x.new_zeros(shape)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start : start + block_size]
        new_max = torch.maximum(running_max, block.amax(dim=-1))
        safe = _finite_or_zero(new_max)
        running_sum = running_sum * torch.exp(
            running_max - safe
        ) + torch.exp(block - safe[..., None]).sum(dim=-1)
        running_max = new_max
    safe = _finite_or_zero(running_max)[..., None]
    out = torch.exp(x - safe) / running_sum[..., None].clamp_min(
        torch.finfo(x.dtype).tiny
    )
    return out.movedim(-1, dim)


def _finite_or_zero(running_max: Tensor) -> Tensor:
    """The running maximum with -inf (nothing seen yet, or all blocked)
    replaced by 0, so ``x - m`` is never ``-inf - (-inf)``."""
    return running_max.masked_fill(torch.isneginf(running_max), 0.0)


@dataclasses.dataclass(frozen=True)
class Tile:
    """One tile of :func:`flash_attention`'s loop: query rows
    ``[q_start, q_stop)`` against key columns ``[k_start, k_stop)``.

    Attributes:
        q_start, q_stop: the query block (row indices).
        k_start, k_stop: the key block (column indices).
        kind: ``"full"`` (every pair may attend, as far as the causal rule
            goes), ``"diagonal"`` (the causal rule blocks some pairs: the
            tile is computed with a mask) or ``"skipped"`` (the causal rule
            blocks every pair: the tile is never computed).
    """

    q_start: int
    q_stop: int
    k_start: int
    k_stop: int
    kind: str


def tile_schedule(
    seq_len_q: int,
    seq_len_k: int,
    *,
    block_size_q: int,
    block_size_k: int,
    is_causal: bool = False,
) -> list[Tile]:
    """The tiles of an ``(L, S)`` score matrix in :func:`flash_attention`'s
    forward order: query blocks in turn, each against every key block.

    Under ``is_causal`` (top-left: key j may be seen by query i when
    j <= i) a tile whose first key lies after its last query is
    ``"skipped"``, and a tile crossed by the diagonal is ``"diagonal"``.

    Args:
        seq_len_q: L (>= 0).
        seq_len_k: S (>= 0).
        block_size_q: rows per query block (>= 1).
        block_size_k: columns per key block (>= 1).
        is_causal: whether the causal rule applies.

    Returns:
        A list of :class:`Tile`, ``ceil(L / Bq) * ceil(S / Bk)`` of them.

    Raises:
        TypeError, ValueError: for a length or block size that is not an
            int of at least its minimum.
    """
    check_int("seq_len_q", seq_len_q, minimum=0)
    check_int("seq_len_k", seq_len_k, minimum=0)
    check_int("block_size_q", block_size_q, minimum=1)
    check_int("block_size_k", block_size_k, minimum=1)
    tiles = []
    for q_start in range(0, seq_len_q, block_size_q):
        q_stop = min(q_start + block_size_q, seq_len_q)
        for k_start in range(0, seq_len_k, block_size_k):
            k_stop = min(k_start + block_size_k, seq_len_k)
            kind = "full"
            if is_causal and k_start > q_stop - 1:
                kind = "skipped"
            elif is_causal and k_stop - 1 > q_start:
                kind = "diagonal"
            tiles.append(Tile(q_start, q_stop, k_start, k_stop, kind))
    return tiles


def _tile_scores(
    query_block: Tensor,
    key_block: Tensor,
    masks: _Masks,
    tile: Tile,
) -> Tensor:
    """Scaled scores of one tile, ``(B, Bq, Bk)`` float32/64, with every
    mask applied (-inf where a pair may not attend)."""
    scores = query_block @ key_block.transpose(-2, -1)
    if masks.attn_mask is None and masks.key_padding_mask is None:
        view = scores
    else:
        view = scores.view(*masks.lead, *scores.shape[-2:])
    if masks.attn_mask is not None:
        part = masks.attn_mask[
            ..., tile.q_start : tile.q_stop, tile.k_start : tile.k_stop
        ]
        if part.dtype == torch.bool:
            view.masked_fill_(~part, float("-inf"))
        else:
            view.add_(part.to(scores.dtype))
    if masks.key_padding_mask is not None:
        view.masked_fill_(
            masks.key_padding_mask[..., tile.k_start : tile.k_stop],
            float("-inf"),
        )
    if tile.kind == "diagonal":
        rows = torch.arange(tile.q_start, tile.q_stop, device=scores.device)
        cols = torch.arange(tile.k_start, tile.k_stop, device=scores.device)
        scores.masked_fill_(cols > rows[:, None], float("-inf"))
    return scores


@dataclasses.dataclass(frozen=True)
class _Masks:
    """The masks in the leading shape ``lead`` of the inputs: views, never
    expanded copies (an ``(L, S)`` mask stays ``(L, S)``)."""

    lead: tuple[int, ...]
    attn_mask: Tensor | None
    key_padding_mask: Tensor | None  # (N, 1, ..., 1, S), True = padding


class _FlashAttention(torch.autograd.Function):
    """FlashAttention-2's forward and backward (Dao, 2024, Algorithms 1
    and 2) over ``(B, L, D)`` inputs; see :func:`flash_attention`."""

    @staticmethod
    def forward(
        ctx,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        masks: _Masks,
        is_causal: bool,
        scale: float,
        block_size_q: int,
        block_size_k: int,
    ) -> tuple[Tensor, Tensor]:
        compute = torch.float32 if query.dtype in _HALF else query.dtype
        batch, seq_len_q, _ = query.shape
        seq_len_k, value_dim = key.size(1), value.size(-1)
        out = query.new_empty(batch, seq_len_q, value_dim)
        lse = torch.empty(
            batch, seq_len_q, dtype=compute, device=query.device
        )
        tiles = tile_schedule(
            seq_len_q,
            seq_len_k,
            block_size_q=block_size_q,
            block_size_k=block_size_k,
            is_causal=is_causal,
        )
        rows: dict[int, list[Tile]] = {}
        for tile in tiles:
            rows.setdefault(tile.q_start, []).append(tile)
        # Names as in chapter 8's equations: S the tile's scores, m the
        # running row maximum (m' the new one), ell its sum, P = exp(S - m'),
        # c = exp(m - m') the rescaling, o_tilde the unnormalised output.
        for q0 in range(0, seq_len_q, block_size_q):
            row = rows.get(q0, [])  # empty when S = 0
            q1 = min(q0 + block_size_q, seq_len_q)
            q_block = query[:, q0:q1].to(compute) * scale
            m = q_block.new_full((batch, q1 - q0, 1), float("-inf"))
            ell = q_block.new_zeros(batch, q1 - q0, 1)
            o_tilde = q_block.new_zeros(batch, q1 - q0, value_dim)
            for tile in row:
                if tile.kind == "skipped":
                    continue
                k0, k1 = tile.k_start, tile.k_stop
                s = _tile_scores(
                    q_block, key[:, k0:k1].to(compute), masks, tile
                )
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                m_safe = _finite_or_zero(m_new)  # a row that saw nothing
                c = torch.exp(m - m_safe)
                p = s.sub_(m_safe).exp_()  # in place: one tile's storage
                # ell' = c ell + rowsum P, O' = c O + P V_j, in place
                ell.mul_(c).add_(p.sum(dim=-1, keepdim=True))
                o_tilde.mul_(c).baddbmm_(p, value[:, k0:k1].to(compute))
                m = m_new
                del s, p  # freed before the next tile is made
            blocked = ell == 0  # every key blocked for this row
            out[:, q0:q1] = (o_tilde / ell.masked_fill(blocked, 1.0)).to(
                out.dtype
            )
            lse[:, q0:q1] = (_finite_or_zero(m) + ell.log()).squeeze(-1)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.masks = masks
        ctx.settings = (is_causal, scale, block_size_q, block_size_k)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor, grad_lse: Tensor):
        query, key, value, out, lse = ctx.saved_tensors
        is_causal, scale, block_size_q, block_size_k = ctx.settings
        compute = lse.dtype
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        if grad_lse is None:
            grad_lse = torch.zeros_like(lse)
        # a row that saw nothing has no gradient to pass on: a NaN handed
        # in for its -inf logsumexp (as torch.logsumexp's backward gives
        # when pieces are merged) would reach every key through delta
        grad_lse = grad_lse.masked_fill(torch.isneginf(lse), 0.0)
        # delta_i = rowsum(dO_i * O_i) (the paper's D); a logsumexp gradient
        # enters the same place: dS = P * (dP - delta + dlse).
        delta = (grad_out.to(compute) * out.to(compute)).sum(
            dim=-1
        ) - grad_lse.to(compute)
        # A row that saw nothing has lse = -inf; +inf there makes its
        # recomputed probabilities exp(s - inf) = 0, hence zero gradients.
        lse_safe = lse.masked_fill(torch.isneginf(lse), float("inf"))
        grad_query = torch.zeros(
            query.shape, dtype=compute, device=query.device
        )
        grad_key = torch.zeros(key.shape, dtype=compute, device=key.device)
        grad_value = torch.zeros(
            value.shape, dtype=compute, device=value.device
        )
        tiles = tile_schedule(
            query.size(1),
            key.size(1),
            block_size_q=block_size_q,
            block_size_k=block_size_k,
            is_causal=is_causal,
        )
        for tile in tiles:
            if tile.kind == "skipped":
                continue
            q0, q1, k0, k1 = (
                tile.q_start,
                tile.q_stop,
                tile.k_start,
                tile.k_stop,
            )
            q_block = query[:, q0:q1].to(compute)
            k_block = key[:, k0:k1].to(compute)
            v_block = value[:, k0:k1].to(compute)
            do_block = grad_out[:, q0:q1].to(compute)
            scores = _tile_scores(q_block * scale, k_block, ctx.masks, tile)
            probs = scores.sub_(lse_safe[:, q0:q1, None]).exp_()
            grad_value[:, k0:k1].baddbmm_(probs.transpose(-2, -1), do_block)
            grad_probs = do_block @ v_block.transpose(-2, -1)
            grad_scores = probs.mul_(
                grad_probs.sub_(delta[:, q0:q1, None])
            )  # dS, in the probabilities' storage
            grad_query[:, q0:q1].baddbmm_(grad_scores, k_block, alpha=scale)
            grad_key[:, k0:k1].baddbmm_(
                grad_scores.transpose(-2, -1), q_block, alpha=scale
            )
            del (
                scores,
                probs,
                grad_probs,
                grad_scores,
            )  # before the next tile
        return (
            grad_query.to(query.dtype),
            grad_key.to(key.dtype),
            grad_value.to(value.dtype),
            None,
            None,
            None,
            None,
            None,
        )


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    block_size_q: int = 256,
    block_size_k: int = 256,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(Q K^T * scale) V without the ``(L, S)`` score matrix:
    FlashAttention-2's tiled forward (Dao, 2024, Algorithm 1) and its
    backward by recomputation (the per-tile arithmetic of Algorithm 2, in
    query-major order; Dao et al., 2022), a ``torch.autograd.Function`` in
    plain PyTorch.

    **Forward.** For each block of ``block_size_q`` queries, in turn, and
    each block of ``block_size_k`` keys: the tile's scores
    ``S = Q_i K_j^T * scale`` (masked), the running maximum
    ``m' = max(m, rowmax S)``, ``P = exp(S - m')``, the running sum
    ``l' = exp(m - m') l + rowsum P`` and the running output
    ``O' = exp(m - m') O + P V_j``; at the end of the row of tiles,
    ``O / l`` and the logsumexp ``m + log l``. Under ``is_causal`` the tiles
    above the diagonal are skipped (:func:`tile_schedule`).

    **Backward.** From the saved output and logsumexp only: first
    ``delta = rowsum(dO * O)`` (the paper's ``D``), then per tile
    ``P = exp(S - lse)`` recomputed, ``dV_j += P^T dO_i``,
    ``dP = dO_i V_j^T``, ``dS = P * (dP - delta_i)``,
    ``dQ_i += dS K_j * scale``, ``dK_j += dS^T Q_i * scale``. The tiles are
    visited in the forward's order (query blocks outside), with dQ, dK and
    dV held whole; Algorithm 2 puts the key blocks outside, to keep
    ``dK_j`` and ``dV_j`` on chip. A gradient flowing into the returned
    logsumexp is included (``dS += P * dlse``). No gradient reaches
    ``attn_mask``; double backward is not supported.

    **Order.** Query blocks run one after another, as FlashAttention-2's
    outer loop; on the CPU each tile's matrix products already use every
    thread. Running several query blocks at once is the same as a larger
    ``block_size_q``, which holds larger tiles.

    **Memory.** Saved for the backward: the inputs (no copies), the output
    and the float32/64 logsumexp ``(..., L)``. Held at any moment of the
    forward, beyond the output: one query block's running maximum, sum and
    output, and one tile's scores, ``(B, Bq, Bk)`` with ``B`` the product of
    the leading dimensions (measured: about two tiles' worth at the peak,
    with the temporaries of the update); in the backward, dQ, dK and dV in
    the compute dtype plus a tile's P, dP and dS. Nothing of size
    ``L x S`` is ever allocated; masks are read tile by tile from broadcast
    views.

    **Causal alignment.** ``is_causal`` is top-left aligned (query i sees
    keys j <= i), as in PyTorch's ``F.scaled_dot_product_attention``; the
    ``flash-attn`` package aligns it to the bottom right when L != S (from
    version 2.1). For new queries after a cache, pass a mask instead.

    **Precision.** float64 inputs are computed in float64; float32, float16
    and bfloat16 in float32 (scores, probabilities, running statistics and
    accumulators); the output and the gradients are rounded to the inputs'
    dtype at the end, the logsumexp is kept in the compute dtype.

    Args:
        query: ``(..., L, D)`` queries.
        key: ``(..., S, D)`` keys, the same leading dimensions.
        value: ``(..., S, Dv)`` values, the same leading dimensions.
        attn_mask: ``None``; a bool tensor broadcastable to ``(..., L, S)``
            with True = may attend; or a tensor of the inputs' dtype added
            to the scores (``-inf`` blocks).
        key_padding_mask: ``None`` or a bool ``(N, S)`` tensor, True =
            padding, with ``N = query.shape[0]``; needs at least 3-d inputs.
        is_causal: query i may attend only to keys j <= i (top-left).
        scale: the factor on ``Q K^T``; default ``1 / sqrt(D)``.
        block_size_q: queries per block, >= 1.
        block_size_k: keys per block, >= 1.
        return_lse: also return the logsumexp of each row's scaled, masked
            scores, ``(..., L)`` (-inf for a row that may attend to
            nothing).

    Returns:
        ``(..., L, Dv)`` output, or ``(output, lse)`` if ``return_lse``.

    Raises:
        TypeError: if an input is not a floating tensor, the dtypes differ,
            a mask has the wrong dtype, or a block size is not an int.
        ValueError: if shapes disagree, a mask does not broadcast, a block
            size is below 1 or ``scale`` is not a positive number.
    """
    check_query_key_value(query, key, value)
    lead = tuple(query.shape[:-2])
    if tuple(key.shape[:-2]) != lead or tuple(value.shape[:-2]) != lead:
        raise ValueError(
            f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} must share their leading dimensions"
        )
    check_int("block_size_q", block_size_q, minimum=1)
    check_int("block_size_k", block_size_k, minimum=1)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {is_causal!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    elif (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not 0 < scale < math.inf
    ):
        raise ValueError(f"scale={scale!r} must be a positive number")
    seq_len_q, seq_len_k = query.size(-2), key.size(-2)
    _check_mask(attn_mask, (*lead, seq_len_q, seq_len_k), query.dtype)
    padding = None
    if key_padding_mask is not None:
        if (
            not isinstance(key_padding_mask, Tensor)
            or key_padding_mask.dtype != torch.bool
        ):
            raise TypeError(
                "key_padding_mask must be a bool Tensor (True = padding), got "
                f"{getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)}"
            )
        if len(lead) < 1 or tuple(key_padding_mask.shape) != (
            lead[0],
            seq_len_k,
        ):
            raise ValueError(
                f"key_padding_mask must have shape (N, S) = {(lead[0] if lead else None, seq_len_k)}, got {tuple(key_padding_mask.shape)}"
            )
        # (N, S) -> (N, 1, ..., 1, S), against the tile's (*lead, Bq, Bk)
        padding = key_padding_mask.view(
            lead[0], *([1] * len(lead)), seq_len_k
        )
    if attn_mask is not None:
        # a view with stride 0 where the mask broadcasts, so every tile's
        # slice has the tile's shape (a (1, S) mask stays 1 x S in memory)
        attn_mask = attn_mask.expand(*lead, seq_len_q, seq_len_k)
    masks = _Masks(lead=lead, attn_mask=attn_mask, key_padding_mask=padding)
    batch = math.prod(lead)
    out, lse = _FlashAttention.apply(
        query.reshape(batch, seq_len_q, query.size(-1)),
        key.reshape(batch, seq_len_k, key.size(-1)),
        value.reshape(batch, seq_len_k, value.size(-1)),
        masks,
        is_causal,
        float(scale),
        block_size_q,
        block_size_k,
    )
    out = out.view(*lead, seq_len_q, value.size(-1))
    if return_lse:
        return out, lse.view(*lead, seq_len_q)
    return out


def _logsumexp_or_neginf(stacked: Tensor) -> Tensor:
    """``logsumexp`` over dim 0 whose gradient is zero, not NaN, where
    every entry is -inf.

    ``torch.logsumexp``'s backward is ``exp(x - lse)``: for a row that saw
    nothing in any piece that is ``exp(-inf - (-inf))`` = NaN, and the NaN
    reaches every key through the pieces' backward. Here the maximum and
    the sum are taken apart, and such a row reads its result from a
    constant -inf through ``torch.where``, so no gradient flows into it.
    """
    peak = _finite_or_zero(stacked.amax(dim=0))
    mass = torch.exp(stacked - peak).sum(dim=0)
    seen = mass > 0
    total = peak + torch.where(seen, mass, torch.ones_like(mass)).log()
    return torch.where(seen, total, torch.full_like(total, -math.inf))


def merge_attention(
    outputs: list[Tensor] | tuple[Tensor, ...],
    lses: list[Tensor] | tuple[Tensor, ...],
) -> tuple[Tensor, Tensor]:
    """Attention over the union of disjoint key sets, from each set's
    output and logsumexp: ``lse = logsumexp_c lse_c`` and
    ``O = sum_c exp(lse_c - lse) O_c``.

    This is how split-K decoding combines the pieces of a long cache read
    in parallel (Dao et al., 2023, "Flash-Decoding for long-context
    inference"): each piece's output is its own softmax-weighted average,
    and ``exp(lse_c - lse)`` is the share of the whole softmax's mass that
    fell in piece c. A row that saw nothing in every piece gets zeros and
    ``-inf``, and passes zero gradients back to every piece (never NaN).

    Args:
        outputs: ``(..., L, Dv)`` tensors, one per key set.
        lses: ``(..., L)`` logsumexps (as :func:`flash_attention` returns
            with ``return_lse=True``), one per key set.

    Returns:
        ``(output, lse)``: ``(..., L, Dv)`` in the outputs' dtype and
        ``(..., L)`` in the logsumexps' dtype.

    Raises:
        ValueError: if the lists are empty, of different lengths, or the
            shapes disagree.
    """
    if len(outputs) == 0 or len(outputs) != len(lses):
        raise ValueError(
            f"need one lse per output and at least one of each, got {len(outputs)} outputs and {len(lses)} lses"
        )
    for out, lse in zip(outputs, lses, strict=True):
        if out.shape[:-1] != lse.shape or out.shape != outputs[0].shape:
            raise ValueError(
                f"output {tuple(out.shape)} and lse {tuple(lse.shape)} do not match the first output {tuple(outputs[0].shape)}"
            )
    stacked = torch.stack(list(lses))  # (C, ..., L)
    total = _logsumexp_or_neginf(stacked)
    weights = torch.exp(stacked - _finite_or_zero(total))  # 0 for -inf
    merged = sum(
        w[..., None] * o.to(w.dtype)
        for w, o in zip(weights, outputs, strict=True)
    )
    return merged.to(outputs[0].dtype), total
