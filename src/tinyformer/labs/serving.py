"""Chapter 10's measurements of serving: how much reserved cache memory
holds tokens (a batch of requests, reserved as earlier systems did against
paged), what a quantised cache costs a trained model, and how often a
draft's tokens are kept.

Kwon et al. (2023), "Efficient Memory Management for Large Language Model
Serving with PagedAttention", §3 and Fig. 2; Liu et al. (2024), "KIVI";
Leviathan et al. (2023), Definition 3.1 and Eq. 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.models.cache import KVCache
from tinyformer.models.decoder import TinyDecoder
from tinyformer.models.speculative import acceptance_rate
from tinyformer.tools.checks import check_int

__all__ = [
    "CacheQuality",
    "ReservationShares",
    "bigram_probabilities",
    "cache_quality",
    "draft_acceptance",
    "simulate_reservations",
    "unigram_probabilities",
]


@dataclass(frozen=True)
class ReservationShares:
    """The share of reserved key-value slots that hold a token's keys and
    values, summed over a batch of requests caught mid-generation, per way
    of reserving.

    Attributes:
        max_length: each request reserves ``max_len`` slots (Orca (Max) in
            Kwon et al., Fig. 2).
        power_of_two: the final length rounded up to a power of two (Orca
            (Pow2)).
        oracle: exactly the final length, known in advance (Orca (Oracle)).
        paged: blocks of ``block_size`` slots taken as the text grows.
        num_requests: requests in the batch.
        prompt_mean, output_mean: the mean drawn lengths, in tokens.
    """

    max_length: float
    power_of_two: float
    oracle: float
    paged: float
    num_requests: int
    prompt_mean: float
    output_mean: float


def simulate_reservations(
    num_requests: int = 256,
    *,
    max_len: int = 2048,
    block_size: int = 16,
    prompt_median: int = 128,
    output_median: int = 256,
    sigma: float = 0.8,
    seed: int = 0,
) -> ReservationShares:
    """Draw a batch of requests and measure, for four ways of reserving
    cache slots, the share of reserved slots that hold tokens.

    Each request has a prompt length and an output length drawn from
    log-normal distributions (medians ``prompt_median`` and
    ``output_median``, log standard deviation ``sigma``), each at least 1,
    their sum capped at ``max_len``. The batch is caught at one moment: each
    request has produced a uniformly drawn share of its output, so it holds
    its prompt plus that many tokens. Earlier systems reserve a request's
    slots when it starts (for the longest it could become, or for its final
    length rounded up); paging reserves whole blocks as tokens arrive.

    Args:
        num_requests: requests in the batch, >= 1.
        max_len: the longest text a request may reach, >= 2.
        block_size: tokens per block for paging, >= 1.
        prompt_median, output_median: medians of the drawn lengths, >= 1.
        sigma: the log-normal's log standard deviation, > 0.
        seed: seeds the draws.

    Returns:
        :class:`ReservationShares`.

    Raises:
        TypeError, ValueError: for a size that is not a positive int or a
            ``sigma`` that is not a positive number.
    """
    check_int("num_requests", num_requests, minimum=1)
    check_int("max_len", max_len, minimum=2)
    check_int("block_size", block_size, minimum=1)
    check_int("prompt_median", prompt_median, minimum=1)
    check_int("output_median", output_median, minimum=1)
    if (
        isinstance(sigma, bool)
        or not isinstance(sigma, (int, float))
        or not sigma > 0
    ):
        raise ValueError(f"sigma must be a number > 0, got {sigma!r}")
    generator = torch.Generator().manual_seed(seed)

    def lognormal(median: int) -> Tensor:
        normal = torch.randn(
            num_requests, generator=generator, dtype=torch.float64
        )
        return (
            (math.log(median) + sigma * normal).exp().round().clamp(min=1)
        )

    prompt = lognormal(prompt_median).clamp(max=max_len - 1)
    output = torch.minimum(lognormal(output_median), max_len - prompt)
    done = torch.rand(
        num_requests, generator=generator, dtype=torch.float64
    )
    held = prompt + (done * output).floor()  # tokens cached now
    final = prompt + output
    reserved = {
        "max_length": torch.full_like(final, max_len),
        "power_of_two": torch.exp2(torch.log2(final).ceil()).clamp(
            max=max_len
        ),
        "oracle": final,
        "paged": (held / block_size).ceil() * block_size,
    }
    shares = {
        name: float(held.sum() / slots.sum())
        for name, slots in reserved.items()
    }
    return ReservationShares(
        **shares,
        num_requests=num_requests,
        prompt_mean=float(prompt.mean()),
        output_mean=float(output.mean()),
    )


@dataclass(frozen=True)
class CacheQuality:
    """A cache measured against the full-precision one on held-out text.

    Attributes:
        loss: mean next-token loss with this cache, nats per token.
        reference_loss: the same with a :class:`~tinyformer.models.cache.KVCache`.
        top1_agreement: the share of places whose most likely next token
            is the full-precision cache's.
        bytes_per_token: the cache's bytes per cached token and sequence,
            every layer.
    """

    loss: float
    reference_loss: float
    top1_agreement: float
    bytes_per_token: float


def _decode(
    model: TinyDecoder, ids: Tensor, cache: KVCache, prefill: int
) -> Tensor:
    """Logits of ``ids[:, prefill:]``, one token per pass after a prompt
    of ``prefill`` tokens: ``(N, L - prefill, V)``."""
    model(ids[:, :prefill], cache=cache)
    steps = [
        model(ids[:, t : t + 1], cache=cache)
        for t in range(prefill, ids.size(1))
    ]
    return torch.cat(steps, dim=1)


@torch.no_grad()
def cache_quality(
    model: TinyDecoder,
    windows: Tensor,
    make_cache,
    *,
    prefill: int = 16,
) -> CacheQuality:
    """Decode every window token by token with the cache ``make_cache``
    builds and with a :class:`~tinyformer.models.cache.KVCache`, and compare the next-token
    predictions of the decoded places.

    Args:
        model: a trained decoder, in eval mode.
        windows: ``(N, L + 1)`` token ids of held-out text.
        make_cache: called with ``(config, batch_size)``, returns an empty
            cache for the model.
        prefill: tokens read in the first pass, ``1 <= prefill < L``.

    Returns:
        :class:`CacheQuality`.

    Raises:
        ValueError: if ``prefill`` is out of range.
    """
    length = windows.size(1) - 1
    check_int("prefill", prefill, minimum=1)
    if prefill >= length:
        raise ValueError(
            f"prefill={prefill} must be below the window's {length} input tokens"
        )
    inputs, targets = windows[:, :-1], windows[:, prefill + 1 :]
    batch = windows.size(0)
    cache = make_cache(model.config, batch)
    logits = _decode(model, inputs, cache, prefill)
    reference = _decode(model, inputs, model.new_cache(batch), prefill)

    def loss(values: Tensor) -> float:
        return float(
            F.cross_entropy(values.flatten(0, 1), targets.flatten())
        )

    agree = (logits.argmax(-1) == reference.argmax(-1)).double().mean()
    return CacheQuality(
        loss=loss(logits),
        reference_loss=loss(reference),
        top1_agreement=float(agree),
        bytes_per_token=cache.nbytes / (batch * cache.num_cached),
    )


def unigram_probabilities(ids: Tensor, vocab_size: int) -> Tensor:
    """``(V,)`` how often each token occurs in ``ids``, plus one (Laplace's
    rule), normalised: a draft that ignores the text so far."""
    counts = (
        torch.bincount(ids.flatten(), minlength=vocab_size).double() + 1
    )
    return counts / counts.sum()


def bigram_probabilities(ids: Tensor, vocab_size: int) -> Tensor:
    """``(V, V)`` row ``a``: how often each token follows ``a`` in the 1-D
    ``ids``, plus one, normalised: a draft that reads only the last
    token."""
    pairs = ids[:-1] * vocab_size + ids[1:]
    counts = torch.bincount(
        pairs, minlength=vocab_size * vocab_size
    ).double()
    counts = counts.view(vocab_size, vocab_size) + 1
    return counts / counts.sum(dim=1, keepdim=True)


@torch.no_grad()
def draft_acceptance(
    model: TinyDecoder,
    windows: Tensor,
    draft: TinyDecoder | Tensor,
) -> float:
    """The acceptance rate ``alpha`` of a draft against ``model`` at
    temperature 1 on every place of ``windows``
    (:func:`~tinyformer.models.speculative.acceptance_rate`).

    Args:
        model: the model, in eval mode.
        windows: ``(N, L)`` token ids.
        draft: a smaller :class:`~tinyformer.models.decoder.TinyDecoder`, a ``(V, V)`` bigram table
            (:func:`bigram_probabilities`) or a ``(V,)`` unigram
            distribution (:func:`unigram_probabilities`).

    Returns:
        ``alpha``, a float in [0, 1].
    """
    p = model(windows).double().softmax(-1)  # (N, L, V)
    if isinstance(draft, TinyDecoder):
        q = draft(windows).double().softmax(-1)
    elif isinstance(draft, Tensor) and draft.dim() == 2:
        q = draft[windows]
    elif isinstance(draft, Tensor) and draft.dim() == 1:
        q = draft.expand_as(p)
    else:
        raise TypeError(
            f"draft must be a TinyDecoder, a (V, V) or a (V,) Tensor, got {type(draft).__name__}"
        )
    return acceptance_rate(p, q.to(p.dtype))
