"""Training and probing the miniature Transformer on the word-order task.

The loop is deliberately plain: seeded initialisation, seeded shuffling,
AdamW at a constant learning rate, full-batch evaluation after every epoch.
It returns numbers and the trained model, and prints nothing. (The paper
trains with Adam and a warm-up schedule, Vaswani et al., 2017, Sec. 5.3; a
model this small trains well without one.)"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.labs.tasks import ComparisonBatch
from tinyformer.models.encoder import TinyTransformer, TransformerConfig
from tinyformer.tools.checks import check_int, check_probability
from tinyformer.tools.config import TomlConfig

__all__ = [
    "HeadFindings",
    "HeadStatistics",
    "TrainingConfig",
    "TrainingRun",
    "VerbQueryShares",
    "accuracy",
    "head_ablation_accuracy",
    "head_findings",
    "head_pair_ablation_accuracy",
    "head_statistics",
    "heads_switched_off",
    "train_classifier",
    "verb_query_shares",
]


@dataclass(frozen=True)
class TrainingConfig(TomlConfig):
    """How a :class:`~tinyformer.models.encoder.TinyTransformer` is trained;
    presets ship in :mod:`tinyformer.labs.presets`.

    Attributes:
        epochs: passes over the training set, >= 1.
        batch_size: sentences per step, >= 1.
        learning_rate: AdamW step size, > 0.
        weight_decay: AdamW decoupled weight decay, >= 0.
        seed: seeds the model's initialisation and the shuffling of every
            epoch.
        test_fraction: share of the mirror pairs held out for testing, in
            (0, 1).

    Raises:
        TypeError, ValueError: for a field of the wrong type or out of range, naming it.
    """

    toml_table: ClassVar[str] = "training"

    epochs: int = 40
    batch_size: int = 64
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 0
    test_fraction: float = 0.25

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, minimum=1)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("seed", self.seed, minimum=0)
        for name, minimum in (
            ("learning_rate", 0.0),
            ("weight_decay", 0.0),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or value < minimum
            ):
                raise ValueError(
                    f"{name}={value!r} must be a number >= {minimum}"
                )
        if self.learning_rate == 0:
            raise ValueError("learning_rate=0 would never change the model")
        check_probability("test_fraction", self.test_fraction)
        if self.test_fraction == 0:
            raise ValueError("test_fraction=0 leaves nothing to test on")


@dataclass
class TrainingRun:
    """What :func:`train_classifier` returns: the trained model (in eval
    mode) and its history."""

    model: TinyTransformer
    train_loss: list[float] = field(default_factory=list)
    """Mean cross-entropy (nats) over each epoch's training steps."""
    test_accuracy: list[float] = field(default_factory=list)
    """Test accuracy (a fraction) after each epoch."""

    @property
    def final_accuracy(self) -> float:
        """Test accuracy after the last epoch."""
        return self.test_accuracy[-1]


@torch.no_grad()
def accuracy(model: TinyTransformer, batch: ComparisonBatch) -> float:
    """Fraction of ``batch`` whose largest logit is the label; the model is
    evaluated in eval mode."""
    was_training = model.training
    model.eval()
    # (N, C)
    logits = model(batch.input_ids, key_padding_mask=batch.key_padding_mask)
    model.train(was_training)
    return (logits.argmax(dim=-1) == batch.labels).double().mean().item()


def train_classifier(
    model_config: TransformerConfig,
    training: TrainingConfig,
    train: ComparisonBatch,
    test: ComparisonBatch,
) -> TrainingRun:
    """Train a fresh :class:`~tinyformer.models.encoder.TinyTransformer` with
    cross-entropy and AdamW.

    Everything random is seeded by ``training.seed``: the initial weights
    (``torch.manual_seed``) and each epoch's order of the training sentences
    (a separate generator), so the same configs give the same model on the
    same machine.

    Args:
        model_config: the model; its ``vocab_size`` and ``num_classes`` must
            cover the batches.
        training: epochs, batch size, learning rate, seed.
        train: the training sentences.
        test: the sentences accuracy is measured on after each epoch.

    Returns:
        A :class:`TrainingRun` with the model in eval mode.

    Raises:
        TypeError: if a config has the wrong type.
    """
    if not isinstance(model_config, TransformerConfig) or not isinstance(
        training, TrainingConfig
    ):
        raise TypeError(
            "model_config must be a TransformerConfig and training a TrainingConfig"
        )
    torch.manual_seed(training.seed)
    model = TinyTransformer(model_config)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=training.learning_rate,
        weight_decay=training.weight_decay,
    )
    shuffle = torch.Generator().manual_seed(training.seed)
    run = TrainingRun(model)
    for _ in range(training.epochs):
        model.train()
        order = torch.randperm(len(train), generator=shuffle)
        losses = []
        for start in range(0, len(train), training.batch_size):
            rows = order[start : start + training.batch_size]
            # (B, C)
            logits = model(
                train.input_ids[rows],
                key_padding_mask=train.key_padding_mask[rows],
            )
            loss = F.cross_entropy(logits, train.labels[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        run.train_loss.append(sum(losses) / len(losses))
        run.test_accuracy.append(accuracy(model, test))
    model.eval()
    return run


@dataclass(frozen=True)
class HeadStatistics:
    """Where each head of a trained model looks, averaged over the real
    (non-padding) query positions.

    Each field is a float64 ``(num_layers, num_heads)`` tensor of attention
    shares (probabilities).

    Attributes:
        previous: weight on the token just before the query (queries at
            position >= 1).
        first_item: weight on the first item of the sentence ("charge" in
            "the charge exceeded the refund").
        second_item: weight on the second item.
        verb: weight on the verb.
        uniform_previous: what ``previous`` would be if every query spread
            its attention evenly.
        uniform_item: what ``first_item``, ``second_item`` and ``verb``
            would be under even attention.
    """

    previous: Tensor
    first_item: Tensor
    second_item: Tensor
    verb: Tensor
    uniform_previous: float
    uniform_item: float

    @property
    def order_signal(self) -> Tensor:
        """``first_item - second_item``: how differently a head treats the
        two items because of their order."""
        return self.first_item - self.second_item


@torch.no_grad()
def head_statistics(
    model: TinyTransformer, batch: ComparisonBatch
) -> HeadStatistics:
    """Measure, for every head of every layer, its share of attention on the
    previous token, the items and the verb.

    Args:
        model: a trained model (run in eval mode).
        batch: sentences with the positions of their items and verb.

    Returns:
        A :class:`HeadStatistics`.
    """
    was_training = model.training
    model.eval()
    _, weights = model.encode(
        batch.input_ids,
        key_padding_mask=batch.key_padding_mask,
        need_weights=True,
    )
    model.train(was_training)
    w = torch.stack(weights).double()  # (layers, N, H, L, L)
    real = ~batch.key_padding_mask  # (N, L), True = a real token
    lengths = real.sum(dim=1, keepdim=True).double()  # (N, 1)

    # position (N,): weight every real query puts on that key
    def share_on(position: Tensor) -> Tensor:
        # (layers, N, H, L)
        picked = w.gather(
            -1, position.view(1, -1, 1, 1, 1).expand(*w.shape[:-1], 1)
        ).squeeze(-1)
        # (layers, H)
        return (picked * real[None, :, None, :]).sum(
            dim=(1, 3)
        ) / real.sum()

    # (layers, N, H, L-1): weight of query t on key t-1
    previous = w.diagonal(offset=-1, dim1=-2, dim2=-1)
    has_previous = real[:, 1:]  # (N, L-1)
    return HeadStatistics(
        previous=(previous * has_previous[None, :, None, :]).sum(dim=(1, 3))
        / has_previous.sum(),
        first_item=share_on(batch.first_item),
        second_item=share_on(batch.second_item),
        verb=share_on(batch.verb),
        uniform_previous=(
            (has_previous / lengths).sum() / has_previous.sum()
        ).item(),
        uniform_item=((real / lengths).sum() / real.sum()).item(),
    )


@dataclass(frozen=True)
class VerbQueryShares:
    """Where each head looks *from the verb's position*, the query the
    answer depends on.

    Each field is a float64 ``(num_layers, num_heads)`` tensor: the
    attention share that the verb's query puts on the first item, the second
    item and the verb itself, averaged over the sentences."""

    first_item: Tensor
    second_item: Tensor
    verb: Tensor


@torch.no_grad()
def verb_query_shares(
    model: TinyTransformer, batch: ComparisonBatch
) -> VerbQueryShares:
    """The attention each head sends from the verb's position to the two
    items and to the verb.

    Unlike :func:`head_statistics`, which averages over every real query,
    this reads one row of each attention map: the verb's. In the word-order
    task the verb is the token that decides which item is the answer, so its
    row is where a head that "routes the answer" should show it.

    Args:
        model: a trained model (run in eval mode).
        batch: sentences with the positions of their items and verb.

    Returns:
        A :class:`VerbQueryShares`.
    """
    was_training = model.training
    model.eval()
    _, weights = model.encode(
        batch.input_ids,
        key_padding_mask=batch.key_padding_mask,
        need_weights=True,
    )
    model.train(was_training)
    w = torch.stack(weights).double()  # (layers, N, H, L, S)
    # (layers, N, H, 1, S)
    index = batch.verb.view(1, -1, 1, 1, 1).expand(
        *w.shape[:3], 1, w.shape[-1]
    )
    # (layers, N, H, S): the verb's query row
    verb_row = w.gather(3, index).squeeze(3)

    # position (N,): key positions -> (layers, H)
    def share(position: Tensor) -> Tensor:
        # (layers, N, H, 1)
        picked = verb_row.gather(
            -1, position.view(1, -1, 1, 1).expand(*verb_row.shape[:-1], 1)
        )
        return picked.squeeze(-1).mean(dim=1)

    return VerbQueryShares(
        share(batch.first_item), share(batch.second_item), share(batch.verb)
    )


def _check_model_and_batch(model: object, batch: object) -> None:
    """Raise TypeError/ValueError unless ``model`` is a TinyTransformer and
    ``batch`` a non-empty ComparisonBatch."""
    if not isinstance(model, TinyTransformer):
        raise TypeError(
            f"model must be a TinyTransformer, got {type(model).__name__}"
        )
    if not isinstance(batch, ComparisonBatch):
        raise TypeError(
            f"batch must be a ComparisonBatch, got {type(batch).__name__}"
        )
    if len(batch) == 0:
        raise ValueError("batch has no sentences to score")


@contextmanager
def heads_switched_off(
    model: TinyTransformer, heads: Iterable[tuple[int, int]]
) -> Iterator[None]:
    """Within the ``with`` block, the heads ``(layer, head)`` of ``model``
    contribute nothing: their ``head_dim`` features in the concatenated
    heads are zeroed just before the output projection ``W^O`` (a forward
    pre-hook on ``out_proj``), and the rest of the model is unchanged
    (Michel et al., 2019, mask heads the same way).

    Args:
        model: the model whose heads are switched off.
        heads: ``(layer, head)`` index pairs, both from 0; a repeated pair
            counts once.

    Raises:
        ValueError: if a layer or head index is out of range, naming it.
    """
    num_heads = model.layers[0].self_attn.num_heads
    by_layer: dict[int, list[int]] = {}  # layer -> its heads to switch off
    for layer_index, head in heads:
        check_int("layer", layer_index, minimum=0)
        check_int("head", head, minimum=0)
        if layer_index >= len(model.layers) or head >= num_heads:
            raise ValueError(
                f"head (layer={layer_index}, head={head}) is outside the "
                f"model's {len(model.layers)} layers of {num_heads} heads"
            )
        by_layer.setdefault(layer_index, []).append(head)
    handles = []
    for layer_index, off in by_layer.items():
        head_dim = model.layers[layer_index].self_attn.head_dim

        def zero_heads(_module, inputs, off=off, head_dim=head_dim):
            (concat,) = inputs  # (N, L, E): the concatenated heads
            concat = concat.clone()
            for head in off:
                concat[..., head * head_dim : (head + 1) * head_dim] = 0.0
            return (concat,)

        out_proj = model.layers[layer_index].self_attn.out_proj
        handles.append(out_proj.register_forward_pre_hook(zero_heads))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def head_ablation_accuracy(
    model: TinyTransformer, batch: ComparisonBatch
) -> Tensor:
    """Accuracy on ``batch`` with each head switched off in turn: a causal
    test of what a head does.

    Each head is switched off with :func:`heads_switched_off`: its
    features are zeroed before ``W^O``.

    Args:
        model: a trained model (run in eval mode).
        batch: the sentences to score, at least one.

    Returns:
        float64 ``(num_layers, num_heads)`` tensor of accuracies
        (fractions); entry ``[l, h]`` is the accuracy without head ``h`` of
        layer ``l``.

    Raises:
        TypeError: if ``model`` is not a TinyTransformer or ``batch`` not a
            ComparisonBatch.
        ValueError: if ``batch`` is empty.
    """
    _check_model_and_batch(model, batch)
    num_layers = len(model.layers)
    num_heads = model.layers[0].self_attn.num_heads
    result = torch.zeros(num_layers, num_heads, dtype=torch.float64)
    for layer_index in range(num_layers):
        for head in range(num_heads):
            with heads_switched_off(model, [(layer_index, head)]):
                result[layer_index, head] = accuracy(model, batch)
    return result


@torch.no_grad()
def head_pair_ablation_accuracy(
    model: TinyTransformer, batch: ComparisonBatch
) -> Tensor:
    """Accuracy on ``batch`` with every two heads switched off together:
    does the model need at least one of them?

    A head whose loss alone costs little may still carry information the
    model needs, if another head carries it too; switching both off shows
    it. The pairs range over all heads of all layers, so a layer-0 head can
    be paired with a layer-1 head. Heads are switched off with
    :func:`heads_switched_off` (features zeroed before ``W^O``).

    Args:
        model: a trained model (run in eval mode).
        batch: the sentences to score, at least one.

    Returns:
        float64 ``(num_layers, num_heads, num_layers, num_heads)`` tensor of
        accuracies (fractions): entry ``[l1, h1, l2, h2]`` is the accuracy
        without head ``h1`` of layer ``l1`` and head ``h2`` of layer
        ``l2``. It is symmetric (``[l1, h1, l2, h2] == [l2, h2, l1, h1]``)
        and its diagonal ``[l, h, l, h]`` is :func:`head_ablation_accuracy`.

    Raises:
        TypeError: if ``model`` is not a TinyTransformer or ``batch`` not a
            ComparisonBatch.
        ValueError: if ``batch`` is empty.
    """
    _check_model_and_batch(model, batch)
    num_layers = len(model.layers)
    num_heads = model.layers[0].self_attn.num_heads
    heads = [
        (layer, head)
        for layer in range(num_layers)
        for head in range(num_heads)
    ]
    result = torch.zeros(
        num_layers, num_heads, num_layers, num_heads, dtype=torch.float64
    )
    for i, one in enumerate(heads):
        for other in heads[i:]:  # each unordered pair once, itself included
            with heads_switched_off(model, [one, other]):
                result[(*one, *other)] = result[(*other, *one)] = accuracy(
                    model, batch
                )
    return result


@dataclass(frozen=True)
class HeadFindings:
    """The trained-head findings of one run, measured from the verb's query
    (all shares are probabilities).

    Attributes:
        accuracy: test accuracy of the intact model.
        fetch_head: the layer-0 head whose verb query puts most weight on
            the first item in "exceeded" sentences (whose answer is the
            first item).
        fetch_share: that weight.
        trailed_second_layer1: layer-1 verb query's weight on the second item in
            "trailed" sentences, mean over heads.
        trailed_verb_layer1: layer-1 verb query's weight on the verb itself in
            "trailed" sentences, mean over heads.
        exceeded_first_layer1: layer-1 verb query's weight on the first item in
            "exceeded" sentences, mean over heads.
        exceeded_verb_layer1: layer-1 verb query's weight on the verb itself in
            "exceeded" sentences, mean over heads.
        fetch_drop: accuracy lost when the fetch head is switched off.
        max_drop: the largest accuracy lost by switching off any single
            head.
        fetch_partner: ``(layer, head)``, from 0, of the head that costs the
            most accuracy when switched off together with the fetch head
            (the first such head on a tie).
        partner_share: the partner's verb-query weight on the first item in
            "exceeded" sentences (``fetch_share`` for the partner).
        fetch_partner_drop: accuracy lost when the partner alone is
            switched off.
        fetch_pair_drop: accuracy lost when the fetch head and its partner
            are switched off together.
        pair_max_heads: the two ``(layer, head)`` indices, from 0, of the
            pair of distinct heads whose joint loss costs the most accuracy
            (the first such pair on a tie).
        pair_max_drop: the accuracy lost by switching off that pair.

    Accuracies and losses of accuracy are fractions of the test sentences.
    """

    accuracy: float
    fetch_head: int
    fetch_share: float
    trailed_second_layer1: float
    trailed_verb_layer1: float
    exceeded_first_layer1: float
    exceeded_verb_layer1: float
    fetch_drop: float
    max_drop: float
    fetch_partner: tuple[int, int]
    partner_share: float
    fetch_partner_drop: float
    fetch_pair_drop: float
    pair_max_heads: tuple[tuple[int, int], tuple[int, int]]
    pair_max_drop: float


def head_findings(
    model: TinyTransformer, test: ComparisonBatch
) -> HeadFindings:
    """Measure :class:`HeadFindings` for a model with at least two layers,
    trained on the word-order task.

    Args:
        model: the trained model.
        test: the test sentences (both verbs must occur).

    Returns:
        The findings, as plain Python floats and ints.

    Raises:
        TypeError: if ``model`` is not a TinyTransformer or ``test`` not a
            ComparisonBatch.
        ValueError: if the model has fewer than two layers or ``test`` is
            empty.
    """
    _check_model_and_batch(model, test)
    if len(model.layers) < 2:
        raise ValueError(
            f"the model has {len(model.layers)} layer(s); the findings need two"
        )
    exceeded = verb_query_shares(model, test.with_verb("exceeded"))
    trailed = verb_query_shares(model, test.with_verb("trailed"))
    intact = accuracy(model, test)
    ablated = head_ablation_accuracy(model, test)  # (layers, H)
    # (layers, H, layers, H)
    pairs = head_pair_ablation_accuracy(model, test)
    num_layers, num_heads = ablated.shape
    fetch_head = int(exceeded.first_item[0].argmax())
    # Which heads, ablated with the fetch head, leave the lowest accuracy;
    # the fetch head itself (the diagonal) is no partner.
    with_fetch = pairs[0, fetch_head].clone()  # (layers, H)
    with_fetch[0, fetch_head] = math.inf
    fetch_partner = divmod(int(with_fetch.argmin()), num_heads)
    # The worst pair of two distinct heads (the diagonal is single heads).
    flat = pairs.reshape(num_layers * num_heads, -1).clone()
    flat.fill_diagonal_(math.inf)
    one, other = divmod(int(flat.argmin()), len(flat))
    pair_max_heads = (divmod(one, num_heads), divmod(other, num_heads))
    return HeadFindings(
        accuracy=intact,
        fetch_head=fetch_head,
        fetch_share=exceeded.first_item[0, fetch_head].item(),
        trailed_second_layer1=trailed.second_item[1].mean().item(),
        trailed_verb_layer1=trailed.verb[1].mean().item(),
        exceeded_first_layer1=exceeded.first_item[1].mean().item(),
        exceeded_verb_layer1=exceeded.verb[1].mean().item(),
        fetch_drop=intact - ablated[0, fetch_head].item(),
        max_drop=intact - ablated.min().item(),
        fetch_partner=fetch_partner,
        partner_share=exceeded.first_item[fetch_partner].item(),
        fetch_partner_drop=intact - ablated[fetch_partner].item(),
        fetch_pair_drop=intact - pairs[0, fetch_head][fetch_partner].item(),
        pair_max_heads=pair_max_heads,
        pair_max_drop=intact - flat.min().item(),
    )
