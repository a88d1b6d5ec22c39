"""Speculative decoding's rule: a draft model proposes tokens, the model
checks them all in one pass, and a rejection rule keeps the model's own
distribution of outputs exactly.

Leviathan, Kalman and Matias (2023), "Fast Inference from Transformers via
Speculative Decoding", Sec. 2.3 (speculative sampling) and Algorithm 1;
Chen et al. (2023), "Accelerating Large Language Model Decoding with
Speculative Sampling", Algorithm 2 (modified rejection sampling).

For one drafted token ``x`` drawn from the draft's distribution ``q``, with
the model's distribution ``p`` at the same place: keep ``x`` with
probability ``min(1, p(x) / q(x))``; on a rejection, draw the token from
the residual distribution ``normalise(max(0, p - q))``. A token comes out
with probability ``min(p, q)`` (kept) plus ``(1 - sum(min(p, q)))``
times the residual (rejected, then redrawn), which is ``p``:
:func:`residual_distribution` and :func:`accept_drafts` hold the rule,
and :meth:`tinyformer.models.decoder.TinyDecoder.speculative_generate`
runs it with two key-value caches.

Shapes: ``V`` vocabulary size, ``G`` drafted tokens (gamma).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tinyformer.tools.checks import check_int

__all__ = [
    "SpeculativeOutput",
    "accept_drafts",
    "acceptance_rate",
    "expected_tokens_per_pass",
    "residual_distribution",
]


def _check_distribution(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point():
        kind = (
            value.dtype
            if isinstance(value, Tensor)
            else type(value).__name__
        )
        raise TypeError(
            f"{name} must be a floating-point Tensor, got {kind}"
        )
    if value.dim() == 0:
        raise ValueError(
            f"{name} must have at least one dimension, got shape ()"
        )
    if not bool(torch.isfinite(value).all()) or bool((value < 0).any()):
        raise ValueError(f"{name} must hold finite probabilities >= 0")
    total = value.double().sum(dim=-1)
    if not bool(torch.allclose(total, torch.ones_like(total), atol=1e-4)):
        raise ValueError(
            f"{name} must sum to 1 over its last dimension, got sums from "
            f"{float(total.min()):.6g} to {float(total.max()):.6g}"
        )
    return value


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """The distribution a rejected draft token is redrawn from,
    ``normalise(max(0, p - q))`` (Leviathan et al., 2023, Sec. 2.3).

    Where ``p <= q`` everywhere (for two distributions, ``p == q``),
    ``max(0, p - q)`` is zero, no draft is ever rejected and the residual
    is never drawn from; it is then ``p`` itself, so the result is always
    a distribution, never NaN.

    Args:
        p: ``(..., V)`` the model's probabilities.
        q: ``(..., V)`` the draft's probabilities, same shape.

    Returns:
        ``(..., V)`` probabilities in the promoted dtype of ``p`` and ``q``.

    Raises:
        TypeError: if ``p`` or ``q`` is not a floating-point tensor.
        ValueError: if the shapes differ, or either holds a negative or
            non-finite entry or does not sum to 1 over its last dimension.
    """
    p = _check_distribution("p", p)
    q = _check_distribution("q", q)
    if p.shape != q.shape:
        raise ValueError(
            f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    dtype = torch.promote_types(p.dtype, q.dtype)
    p, q = p.to(dtype), q.to(dtype)
    excess = (p - q).clamp(min=0)  # (..., V)
    total = excess.sum(dim=-1, keepdim=True)  # (..., 1)
    return torch.where(
        total > 0, excess / total.clamp(min=torch.finfo(dtype).tiny), p
    )


def acceptance_rate(p: Tensor, q: Tensor) -> float:
    """The chance that a draft token is kept, averaged over places:
    ``alpha = mean(sum(min(p, q)))`` (Leviathan et al., 2023, Definition
    3.1 and Corollary 3.6: a token drawn from ``q`` is kept with
    probability ``sum(min(p, q)) = 1 - D_LK(p, q)``).

    Args:
        p: ``(..., V)`` the model's probabilities at each place.
        q: ``(..., V)`` the draft's probabilities at the same places.

    Returns:
        ``alpha`` in [0, 1], a float.

    Raises:
        TypeError, ValueError: as :func:`residual_distribution`.
    """
    p = _check_distribution("p", p)
    q = _check_distribution("q", q)
    if p.shape != q.shape:
        raise ValueError(
            f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    dtype = torch.promote_types(p.dtype, q.dtype)
    kept = torch.minimum(p.to(dtype), q.to(dtype)).sum(dim=-1)
    return float(kept.mean())


def accept_drafts(
    p: Tensor,
    q: Tensor,
    drafted: Tensor,
    *,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """How many drafted tokens to keep, and the model's token after them
    (Leviathan et al., 2023, Algorithm 1).

    Drafted token ``i`` is kept with probability ``min(1, p[i, x] /
    q[i, x])``, in order, until the first rejection, whose token is drawn
    from :func:`residual_distribution` of ``p[i]`` and ``q[i]``; when all
    ``G`` are kept, the next token is drawn from ``p[G]``, the model's
    distribution after the last draft. The rule runs in float64.

    Args:
        p: ``(G + 1, V)`` the model's probabilities at each drafted place
            and the one after.
        q: ``(G, V)`` the draft's probabilities the tokens were drawn from.
        drafted: ``(G,)`` integer ids of the drafted tokens.
        generator: the random generator (reproducible draws), or None for
            the global one.

    Returns:
        ``(kept, token)``: ``0 <= kept <= G`` drafted tokens kept, and the
        id of the token that follows them.

    Raises:
        TypeError: if a distribution is not a floating-point tensor, or
            ``drafted`` not an integer one.
        ValueError: if the shapes do not match as above, a distribution is
            not one, a drafted id is out of range, or a drafted token has
            probability 0 under ``q`` (it could not have been drawn).
    """
    p = _check_distribution("p", p).double()
    q = _check_distribution("q", q).double()
    if (
        not isinstance(drafted, Tensor)
        or drafted.is_floating_point()
        or drafted.dtype == torch.bool
    ):
        kind = (
            drafted.dtype
            if isinstance(drafted, Tensor)
            else type(drafted).__name__
        )
        raise TypeError(f"drafted must be an integer Tensor, got {kind}")
    if p.dim() != 2 or q.dim() != 2 or drafted.dim() != 1:
        raise ValueError(
            f"p, q and drafted must be (G + 1, V), (G, V) and (G,), got {tuple(p.shape)}, "
            f"{tuple(q.shape)} and {tuple(drafted.shape)}"
        )
    num_drafted, vocab_size = q.shape
    if (
        tuple(p.shape) != (num_drafted + 1, vocab_size)
        or drafted.numel() != num_drafted
    ):
        raise ValueError(
            f"p, q and drafted must be (G + 1, V), (G, V) and (G,), got {tuple(p.shape)}, "
            f"{tuple(q.shape)} and {tuple(drafted.shape)}"
        )
    if num_drafted and (
        int(drafted.min()) < 0 or int(drafted.max()) >= vocab_size
    ):
        raise ValueError(
            f"drafted ids must lie in [0, V={vocab_size}), got {drafted.tolist()}"
        )
    rows = torch.arange(num_drafted)
    p_drafted = p[rows, drafted]  # (G,)
    q_drafted = q[rows, drafted]  # (G,)
    if bool((q_drafted <= 0).any()):
        place = int((q_drafted <= 0).nonzero()[0])
        raise ValueError(
            f"drafted token {place} has probability 0 under q: q cannot have drawn it"
        )
    for place in range(num_drafted):
        u = torch.rand((), dtype=torch.float64, generator=generator)
        # keep with probability min(1, p / q): u < p / q, without dividing
        if u * q_drafted[place] < p_drafted[place]:
            continue
        residual = residual_distribution(p[place], q[place])  # (V,)
        return place, int(
            torch.multinomial(residual, 1, generator=generator)
        )
    return num_drafted, int(
        torch.multinomial(p[num_drafted], 1, generator=generator)
    )


def expected_tokens_per_pass(
    acceptance_rate: float, num_draft_tokens: int
) -> float:
    """Tokens one pass of the model yields on average when each draft is
    kept with probability ``acceptance_rate`` independently:
    ``(1 - alpha^(G + 1)) / (1 - alpha)`` (Leviathan et al., 2023, Eq. 1),
    ``G + 1`` at ``alpha = 1``.

    Raises:
        ValueError: if ``acceptance_rate`` is not in [0, 1] or
            ``num_draft_tokens`` < 1.
    """
    check_int("num_draft_tokens", num_draft_tokens, minimum=1)
    if (
        isinstance(acceptance_rate, bool)
        or not isinstance(acceptance_rate, (int, float))
        or not 0 <= acceptance_rate <= 1
    ):
        raise ValueError(
            f"acceptance_rate={acceptance_rate!r} must be a number in [0, 1]"
        )
    if acceptance_rate == 1:
        return float(num_draft_tokens + 1)
    return (1 - acceptance_rate ** (num_draft_tokens + 1)) / (
        1 - acceptance_rate
    )


@dataclass(frozen=True)
class SpeculativeOutput:
    """What :meth:`~tinyformer.models.decoder.TinyDecoder.speculative_generate`
    produced and what it cost.

    Attributes:
        sequences: ``(1, L + max_new_tokens)`` the prompt, then the new
            tokens.
        target_passes: forward passes of the model (the first also reads
            the prompt).
        draft_passes: forward passes of the draft model.
        drafted: per pass of the model, the tokens the draft proposed.
        kept: per pass of the model, how many of them it kept.
    """

    sequences: Tensor
    target_passes: int
    draft_passes: int
    drafted: tuple[int, ...]
    kept: tuple[int, ...]

    @property
    def acceptance_rate(self) -> float:
        """Kept drafts over proposed drafts (NaN when none was proposed)."""
        total = sum(self.drafted)
        return sum(self.kept) / total if total else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per pass of the model (each pass yields its kept
        drafts and one token of its own)."""
        return (
            (sum(self.kept) + self.target_passes) / self.target_passes
            if self.target_passes
            else float("nan")
        )
