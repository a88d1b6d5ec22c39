"""The small, seeded experiments the chapters run, as functions so that
tests can rerun them.

Each function fixes its own seed and returns plain Python data, never a
printed report."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor

from tinyformer.models.attention import scaled_dot_product_attention
from tinyformer.models.positional import (
    relative_shift_matrix,
    sinusoidal_positional_encoding,
)
from tinyformer.tools.checks import check_int

__all__ = [
    "EXAMPLE_WORDS",
    "ITEMS",
    "MODIFIERS",
    "VERBS",
    "VOCAB",
    "ClosestRows",
    "ComparisonBatch",
    "RelativeBand",
    "WordOrderResult",
    "closest_rows",
    "comparison_sentences",
    "comparison_split",
    "encode_sentences",
    "middle_word_attention",
    "one_hot_self_attention",
    "order_blind_ceiling",
    "relative_offset_attention",
    "scaling_statistics",
]

#: The three content words of the running example, in the order the
#: embeddings are drawn.
EXAMPLE_WORDS: tuple[str, str, str] = ("charge", "exceeded", "refund")


def one_hot_self_attention(order: list[int] | tuple[int, ...]) -> Tensor:
    """Self-attention, with no projections and no scaling, over one-hot word
    vectors in the given order.

    Word ``w`` is the one-hot vector ``e_w`` of width ``len(order)``; row
    ``t`` of the input is word ``order[t]``. The output is
    ``softmax(X X^T) X`` computed by
    :func:`~tinyformer.models.attention.scaled_dot_product_attention` (whose
    ``1/sqrt(d_k)`` scaling is undone by scaling the queries), the smallest
    case in which permutation equivariance can be seen.

    Args:
        order: a permutation of ``0 .. W-1``.

    Returns:
        float64 ``(W, W)`` tensor; row ``t`` belongs to the word at position
        ``t``.

    Raises:
        ValueError: if ``order`` is not a permutation of ``0 .. W-1``.
    """
    if sorted(order) != list(range(len(order))):
        raise ValueError(
            f"order={order!r} is not a permutation of 0..{len(order) - 1}"
        )
    # (W, W): one word per row
    x = torch.eye(len(order), dtype=torch.float64)[list(order)]
    output, _ = scaled_dot_product_attention(
        x * math.sqrt(len(order)), x, x
    )
    return output


@dataclass(frozen=True)
class WordOrderResult:
    """Attention paid by the middle word of a three-word sentence, by word
    (probabilities)."""

    sentence: tuple[str, ...]
    with_encoding: bool
    weights: dict[str, float]


def middle_word_attention(
    *, seed: int = 0, d_model: int = 8
) -> list[WordOrderResult]:
    """The running example's experiment: how much attention "exceeded" pays
    to each word, in both orders.

    Embeddings are drawn as ``torch.manual_seed(seed)`` followed by one
    ``torch.randn(d_model)`` per word of :data:`EXAMPLE_WORDS`, in that
    order. Each sentence is the three embeddings in order, with or without
    the sinusoidal table added; the queries, keys and values are the
    sentence itself (no learned projections); the result is the softmax row
    of the middle position.

    Args:
        seed: seed of the random embeddings.
        d_model: embedding width.

    Returns:
        Four results, for "charge exceeded refund" and "refund exceeded
        charge", each without and then with the encoding.
    """
    torch.manual_seed(seed)
    embedding = {word: torch.randn(d_model) for word in EXAMPLE_WORDS}
    table = sinusoidal_positional_encoding(3, d_model)  # (3, E)
    sentences = (EXAMPLE_WORDS, tuple(reversed(EXAMPLE_WORDS)))
    results = []
    for sentence in sentences:
        for with_encoding in (False, True):
            # (3, E)
            x = torch.stack([embedding[word] for word in sentence])
            if with_encoding:
                x = x + table
            _, weights = scaled_dot_product_attention(x, x, x)  # (3, 3)
            # the middle word's distribution over the three positions
            row = weights[1]
            results.append(
                WordOrderResult(
                    sentence,
                    with_encoding,
                    {w: row[i].item() for i, w in enumerate(sentence)},
                )
            )
    return results


# -- How far apart the encodings of two positions are
# ---------------------------------------------------


@dataclass(frozen=True)
class ClosestRows:
    """The two closest rows of a table: their indices (positions, ascending)
    and Euclidean distance."""

    positions: tuple[int, int]
    distance: float


def closest_rows(table: Tensor) -> ClosestRows:
    """The pair of distinct rows of ``table`` with the smallest Euclidean
    distance.

    Applied to the first two columns of the sinusoidal table, it finds the
    positions that the first sin/cos pair alone nearly confuses; applied to
    the whole table, how far apart the closest positions are.

    Args:
        table: ``(L, E)`` floating tensor with ``L >= 2`` rows (for example
            the encoding table).

    Returns:
        The closest pair, ``positions[0] < positions[1]``.

    Raises:
        ValueError: if ``table`` is not 2-D with at least two rows.
    """
    if table.dim() != 2 or table.size(0) < 2:
        raise ValueError(
            f"table must have shape (L >= 2, E), got {tuple(table.shape)}"
        )
    # (L, L)
    distances = torch.cdist(
        table.to(torch.float64), table.to(torch.float64)
    )
    distances.fill_diagonal_(float("inf"))
    flat = int(distances.argmin())
    p, q = sorted(divmod(flat, table.size(0)))
    return ClosestRows((p, q), distances[p, q].item())


# -- A head that looks a fixed distance back (the rotation R_k)
# ------------------------------------------


@dataclass(frozen=True)
class RelativeBand:
    """Attention of the rotation head of :func:`relative_offset_attention`,
    without and with words.

    ``weights`` and ``weights_words`` are float64 ``(L, L)`` (query
    position, key position); ``on_offset`` and ``on_offset_words`` are the
    mean weight that queries ``p >= offset`` put on key ``p - offset`` (a
    probability)."""

    offset: int
    beta: float
    word_std: float
    weights: Tensor
    weights_words: Tensor
    on_offset: float
    on_offset_words: float


def relative_offset_attention(
    *,
    offset: int = 3,
    d_model: int = 64,
    seq_len: int = 24,
    beta: float = 8.0,
    word_std: float = 0.25,
    seed: int = 0,
) -> RelativeBand:
    """A head that attends ``offset`` tokens back at every position, built
    from the rotation R_{-k}.

    With input ``X`` the query map is ``beta * R_{-k}``
    (:func:`~tinyformer.models.positional.relative_shift_matrix` with ``-offset``)
    and the key and value maps are the identity, so on encoding-only input
    the query of position ``p`` is ``beta * PE[p - k]`` and its score
    against key ``j`` is largest at ``j = p - k`` (Vaswani et al., 2017,
    Sec. 3.5: "PE_{pos+k} can be represented as a linear function of
    PE_{pos}"). The scores are divided by ``sqrt(d_model)`` as in scaled
    dot-product attention. The run is repeated with random word embeddings
    (``torch.randn``, seeded) added to the encoding.

    Args:
        offset: k, tokens back, >= 1 and < seq_len.
        d_model: width, even and >= 2.
        seq_len: number of positions L.
        beta: sharpening factor of the queries, > 0.
        word_std: standard deviation of the entries of the word embeddings,
            >= 0.
        seed: seed of the word embeddings.

    Returns:
        The weights in both settings and the mean weight on offset k.

    Raises:
        ValueError: if ``offset`` is not in ``[1, seq_len)``, ``beta <= 0``
            or ``word_std < 0``, naming the value.
    """
    offset = check_int("offset", offset, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=2)
    if offset >= seq_len:
        raise ValueError(
            f"offset={offset} must be smaller than seq_len={seq_len}"
        )
    if not beta > 0:
        raise ValueError(f"beta={beta} must be positive")
    if not word_std >= 0:
        raise ValueError(f"word_std={word_std} must be >= 0")
    # (L, E)
    table = sinusoidal_positional_encoding(
        seq_len, d_model, dtype=torch.float64
    )
    rotation = relative_shift_matrix(-offset, d_model)  # R_{-k}, (E, E)
    generator = torch.Generator().manual_seed(seed)
    # (L, E)
    words = word_std * torch.randn(
        seq_len, d_model, generator=generator, dtype=torch.float64
    )
    rows = torch.arange(offset, seq_len)

    def attend(x: Tensor) -> tuple[Tensor, float]:
        query = beta * x @ rotation.T  # (L, E): row p is beta * R_{-k} x_p
        _, weights = scaled_dot_product_attention(query, x, x)  # (L, L)
        return weights, weights[rows, rows - offset].mean().item()

    weights, on_offset = attend(table)
    weights_words, on_offset_words = attend(table + words)
    return RelativeBand(
        offset,
        float(beta),
        float(word_std),
        weights,
        weights_words,
        on_offset,
        on_offset_words,
    )


# -- Why scores are divided by sqrt(d_k)
# ---------------------------------------------------------------


def scaling_statistics(
    d_k_values: list[int] | tuple[int, ...],
    *,
    num_keys: int = 16,
    num_queries: int = 2000,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Measure what the ``1/sqrt(d_k)`` of scaled dot-product attention does
    (Vaswani et al., 2017, Sec. 3.2.1).

    For each width ``d_k``, draws ``num_queries`` queries and
    ``num_queries * num_keys`` keys with independent standard normal
    components (float64) and records, over the ``num_queries`` score rows:
    the standard deviation of the raw dot products ``q . k`` (theory:
    ``sqrt(d_k)``), and the mean entropy (in nats), the mean largest weight,
    and the mean Frobenius norm of the softmax's Jacobian
    ``diag(p) - p p^T`` (how much the weights respond to a change of the
    scores: the gradient that reaches the scores is this Jacobian times the
    gradient of the weights), for ``softmax(q . k)`` and for
    ``softmax(q . k / sqrt(d_k))``. The entropy of a uniform distribution
    over the keys, ``ln(num_keys)``, is the ceiling.

    Args:
        d_k_values: the widths to measure, each >= 1.
        num_keys: keys per query (S), >= 2.
        num_queries: score rows per width, >= 2.
        seed: seed of the draws (one generator for all widths, in order).

    Returns:
        Lists with one entry per width, keyed ``d_k``, ``std_raw``,
        ``entropy_raw``, ``entropy_scaled``, ``max_weight_raw``,
        ``max_weight_scaled``, ``jacobian_raw`` and ``jacobian_scaled``.

    Raises:
        ValueError: if a width, ``num_keys`` or ``num_queries`` is out of
            range, naming it.
    """
    num_keys = check_int("num_keys", num_keys, minimum=2)
    num_queries = check_int("num_queries", num_queries, minimum=2)
    for d_k in d_k_values:
        check_int("d_k", d_k, minimum=1)
    generator = torch.Generator().manual_seed(seed)
    stats: dict[str, list[float]] = {
        k: []
        for k in (
            "d_k",
            "std_raw",
            "entropy_raw",
            "entropy_scaled",
            "max_weight_raw",
            "max_weight_scaled",
            "jacobian_raw",
            "jacobian_scaled",
        )
    }
    for d_k in d_k_values:
        # (Q, 1, d_k)
        q = torch.randn(
            num_queries, 1, d_k, generator=generator, dtype=torch.float64
        )
        # (Q, S, d_k)
        k = torch.randn(
            num_queries,
            num_keys,
            d_k,
            generator=generator,
            dtype=torch.float64,
        )
        scores = (q * k).sum(-1)  # (Q, S): raw dot products
        stats["d_k"].append(float(d_k))
        stats["std_raw"].append(scores.std().item())
        for name, s in (
            ("raw", scores),
            ("scaled", scores / math.sqrt(d_k)),
        ):
            weights = s.softmax(dim=-1)  # (Q, S)
            # (Q,), nats
            entropy = -(weights * weights.clamp_min(1e-300).log()).sum(-1)
            stats[f"entropy_{name}"].append(entropy.mean().item())
            stats[f"max_weight_{name}"].append(
                weights.max(dim=-1).values.mean().item()
            )
            # (Q, S, S)
            jacobian = torch.diag_embed(weights) - weights.unsqueeze(
                -1
            ) * weights.unsqueeze(-2)
            stats[f"jacobian_{name}"].append(
                torch.linalg.matrix_norm(jacobian).mean().item()
            )
    return stats


# -- The word-order task of the miniature Transformer chapter
# -------------------------------------------

#: Amounts that can be compared; the label of a sentence is the index of
#: the larger one in this tuple.
ITEMS: tuple[str, ...] = (
    "charge",
    "refund",
    "fee",
    "deposit",
    "payment",
    "balance",
    "bonus",
    "invoice",
)
#: Optional words before an item ("the late fee"), so an item's position in
#: the sentence varies.
MODIFIERS: tuple[str, ...] = ("late", "small", "monthly", "final")
#: Each verb with the position of the item it makes the larger (0 = the
#: first item, 1 = the second).
VERBS: dict[str, int] = {"exceeded": 0, "trailed": 1}
#: Token vocabulary; id 0 is padding.
VOCAB: tuple[str, ...] = ("<pad>", "the", *VERBS, *MODIFIERS, *ITEMS)


def comparison_sentences() -> list[tuple[tuple[str, ...], int]]:
    """Every sentence "the [modifier] A verb the [modifier] B" with A != B,
    and the index in :data:`ITEMS` of the larger.

    "the charge exceeded the refund" says the charge is larger (label 0,
    "charge"); "the charge trailed the refund" says the refund is (label 1).
    The sentences come in mirror pairs, one after the other: "the a A verb
    the b B" and "the b B verb the a A" contain the same words and have
    different labels, so no model that ignores word order can answer both.

    Returns:
        ``(tokens, label)`` pairs, 2,800 of them (8 * 7 ordered item pairs,
        2 verbs, 5 * 5 modifier choices), in a fixed order with each
        sentence followed by its mirror.
    """
    sentences = []
    choices = (None, *MODIFIERS)
    for a_index, a in enumerate(ITEMS):
        for b_index, b in enumerate(ITEMS):
            if b_index <= a_index:
                continue
            for verb, larger in VERBS.items():
                for mod_a in choices:
                    for mod_b in choices:
                        first = ("the", *([mod_a] if mod_a else []), a)
                        second = ("the", *([mod_b] if mod_b else []), b)
                        sentences.append(
                            (
                                (*first, verb, *second),
                                (a_index, b_index)[larger],
                            )
                        )
                        sentences.append(
                            (
                                (*second, verb, *first),
                                (b_index, a_index)[larger],
                            )
                        )
    return sentences


@dataclass(frozen=True)
class ComparisonBatch:
    """Sentences of the word-order task, encoded.

    Attributes:
        sentences: the token tuples, in batch order.
        input_ids: long ``(N, L)`` ids into :data:`VOCAB`, right-padded with
            0.
        key_padding_mask: bool ``(N, L)``, **True = padding**.
        labels: long ``(N,)`` index into :data:`ITEMS` of the larger item.
        first_item: long ``(N,)`` position of the first item in each
            sentence.
        second_item: long ``(N,)`` position of the second item.
        verb: long ``(N,)`` position of the verb.
    """

    sentences: tuple[tuple[str, ...], ...]
    input_ids: Tensor
    key_padding_mask: Tensor
    labels: Tensor
    first_item: Tensor
    second_item: Tensor
    verb: Tensor

    def __len__(self) -> int:
        return len(self.sentences)

    def subset(self, rows: list[int]) -> ComparisonBatch:
        """The sentences at ``rows`` (indices into this batch), as a new
        batch with the same padding width.

        Raises:
            ValueError: if ``rows`` is empty.
        """
        if not rows:
            raise ValueError("rows is empty")
        index = torch.tensor(rows)
        return ComparisonBatch(
            sentences=tuple(self.sentences[i] for i in rows),
            input_ids=self.input_ids[index],
            key_padding_mask=self.key_padding_mask[index],
            labels=self.labels[index],
            first_item=self.first_item[index],
            second_item=self.second_item[index],
            verb=self.verb[index],
        )

    def with_verb(self, verb: str) -> ComparisonBatch:
        """The sentences whose verb is ``verb``.

        Raises:
            ValueError: if ``verb`` is not in :data:`VERBS` or no sentence
                uses it.
        """
        if verb not in VERBS:
            raise ValueError(f"verb={verb!r} is not one of {sorted(VERBS)}")
        return self.subset(
            [i for i, tokens in enumerate(self.sentences) if verb in tokens]
        )


def encode_sentences(
    pairs: list[tuple[tuple[str, ...], int]],
) -> ComparisonBatch:
    """Encode ``(tokens, label)`` pairs as a right-padded
    :class:`ComparisonBatch`.

    Raises:
        ValueError: if ``pairs`` is empty, a token is not in :data:`VOCAB`,
            or a sentence has no verb of :data:`VERBS` or not two items of
            :data:`ITEMS`.
    """
    if not pairs:
        raise ValueError("pairs is empty")
    seq_len = max(len(tokens) for tokens, _ in pairs)
    # (N, L), 0 = <pad>
    ids = torch.zeros(len(pairs), seq_len, dtype=torch.long)
    positions = []
    for row, (tokens, _) in enumerate(pairs):
        unknown = [t for t in tokens if t not in VOCAB or t == "<pad>"]
        if unknown:
            raise ValueError(
                f"tokens {unknown} of sentence {' '.join(tokens)!r} are not in VOCAB"
            )
        ids[row, : len(tokens)] = torch.tensor(
            [VOCAB.index(t) for t in tokens]
        )
        items = [i for i, t in enumerate(tokens) if t in ITEMS]
        verbs = [i for i, t in enumerate(tokens) if t in VERBS]
        if len(items) != 2 or len(verbs) != 1:
            raise ValueError(
                f"sentence {' '.join(tokens)!r} needs exactly two items and one verb"
            )
        positions.append((items[0], items[1], verbs[0]))
    first, second, verb = torch.tensor(positions).unbind(dim=1)
    return ComparisonBatch(
        sentences=tuple(tokens for tokens, _ in pairs),
        input_ids=ids,
        key_padding_mask=ids == 0,
        labels=torch.tensor([label for _, label in pairs]),
        first_item=first,
        second_item=second,
        verb=verb,
    )


def comparison_split(
    *, test_fraction: float = 0.25, seed: int = 0
) -> tuple[ComparisonBatch, ComparisonBatch]:
    """Split :func:`comparison_sentences` into a training and a test batch,
    keeping mirror pairs together.

    Whole mirror pairs go to one side, so each test sentence's mirror is in
    the test set too. (Other sentences with the same words, such as "the
    charge exceeded the late refund" for "the late charge exceeded the
    refund", belong to other pairs and may be on the other side.)

    Args:
        test_fraction: share of the mirror pairs held out, in (0, 1).
        seed: seed of the shuffle.

    Returns:
        ``(train, test)``.

    Raises:
        ValueError: if ``test_fraction`` is not in (0, 1).
    """
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, (int, float))
        or not 0 < test_fraction < 1
    ):
        raise ValueError(
            f"test_fraction={test_fraction!r} must lie in (0, 1)"
        )
    sentences = comparison_sentences()
    num_pairs = len(sentences) // 2
    order = torch.randperm(
        num_pairs, generator=torch.Generator().manual_seed(seed)
    ).tolist()
    num_test = round(test_fraction * num_pairs)

    def take(pair_indices: list[int]) -> ComparisonBatch:
        return encode_sentences(
            [sentences[2 * p + m] for p in pair_indices for m in (0, 1)]
        )

    return take(order[num_test:]), take(order[:num_test])


def order_blind_ceiling(batch: ComparisonBatch) -> float:
    """The best accuracy any classifier that sees only the bag of words (not
    their order) can reach on ``batch``.

    Groups the sentences by their multiset of tokens; within a group an
    order-blind classifier must give one answer, so it can at best be right
    on the group's most common label. Every model without a positional
    encoding (and without a causal mask) is such a classifier, since
    attention is permutation-equivariant and mean pooling
    permutation-invariant.

    Returns:
        A fraction in [0, 1].
    """
    groups: dict[tuple[str, ...], Counter[int]] = {}
    for tokens, label in zip(
        batch.sentences, batch.labels.tolist(), strict=True
    ):
        groups.setdefault(tuple(sorted(tokens)), Counter())[label] += 1
    return sum(max(counts.values()) for counts in groups.values()) / len(
        batch
    )
