"""The small, seeded experiments the chapters run, as functions so that tests can rerun them.

Each function fixes its own seed and returns plain Python data, never a printed report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tinyformer.attention import scaled_dot_product_attention
from tinyformer.positional import sinusoidal_positional_encoding

__all__ = ["ARTICLE_WORDS", "WordOrderResult", "middle_word_attention", "one_hot_self_attention"]

#: The three content words of the running example, in the order the embeddings are drawn.
ARTICLE_WORDS: tuple[str, str, str] = ("charge", "exceeded", "refund")


def one_hot_self_attention(order: list[int] | tuple[int, ...]) -> Tensor:
    """Self-attention, with no projections and no scaling, over one-hot word vectors in the given order.

    Word ``w`` is the one-hot vector ``e_w`` of width ``len(order)``; row ``t`` of the input is word
    ``order[t]``. The output is ``softmax(X X^T) X`` computed by :func:`~tinyformer.attention.scaled_dot_product_attention`
    (whose ``1/sqrt(d_k)`` scaling is undone by scaling the queries), the smallest case in which
    permutation equivariance can be seen.

    Args:
        order: a permutation of ``0 .. W-1``.

    Returns:
        float64 ``(W, W)`` tensor; row ``t`` belongs to the word at position ``t``.

    Raises:
        ValueError: if ``order`` is not a permutation of ``0 .. W-1``.
    """
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"order={order!r} is not a permutation of 0..{len(order) - 1}")
    x = torch.eye(len(order), dtype=torch.float64)[list(order)]  # (W, W): one word per row
    output, _ = scaled_dot_product_attention(x * math.sqrt(len(order)), x, x)
    return output


@dataclass(frozen=True)
class WordOrderResult:
    """Attention paid by the middle word of a three-word sentence, by word (probabilities)."""

    sentence: tuple[str, ...]
    with_encoding: bool
    weights: dict[str, float]


def middle_word_attention(*, seed: int = 0, d_model: int = 8) -> list[WordOrderResult]:
    """The article's experiment: how much attention "exceeded" pays to each word, in both orders.

    Embeddings are drawn as ``torch.manual_seed(seed)`` followed by one ``torch.randn(d_model)`` per word
    of :data:`ARTICLE_WORDS`, in that order. Each sentence is the three embeddings in order, with or
    without the sinusoidal table added; the queries, keys and values are the sentence itself (no
    learned projections); the result is the softmax row of the middle position.

    Args:
        seed: seed of the random embeddings.
        d_model: embedding width.

    Returns:
        Four results, for "charge exceeded refund" and "refund exceeded charge", each without and
        then with the encoding.
    """
    torch.manual_seed(seed)
    embedding = {word: torch.randn(d_model) for word in ARTICLE_WORDS}
    table = sinusoidal_positional_encoding(3, d_model)  # (3, E)
    sentences = (ARTICLE_WORDS, tuple(reversed(ARTICLE_WORDS)))
    results = []
    for sentence in sentences:
        for with_encoding in (False, True):
            x = torch.stack([embedding[word] for word in sentence])  # (3, E)
            if with_encoding:
                x = x + table
            _, weights = scaled_dot_product_attention(x, x, x)  # (3, 3)
            row = weights[1]  # the middle word's distribution over the three positions
            results.append(WordOrderResult(sentence, with_encoding, {w: row[i].item() for i, w in enumerate(sentence)}))
    return results
