"""The length-extrapolation lab of the chapter "Position beyond sinusoids":
one task, the positional schemes of
:data:`~tinyformer.models.positional.registry.POSITIONAL_SCHEMES`.

Vaswani et al. (2017, Sec. 3.5) chose the sinusoidal table because it "may
allow the model to extrapolate to sequence lengths longer than the ones
encountered during training". This module tests that sentence. The task,
**what follows the marker**: a sequence of random symbols holds one marker
token; the answer is the symbol right after it. The rule is the same at
every length and every place in the sequence, and it is purely relative
(offset +1 from the marker), so a model that locates "the next token" by
relative position can answer at any length. A model without positional
information sees only the bag of tokens; its best possible accuracy is
:func:`position_blind_ceiling`.

The classifier reads the encoder's output vector at the marker (a
``[CLS]``-like readout at a position that moves), not the mean over
positions that :meth:`~tinyformer.models.encoder.TinyTransformer.forward` uses:
the answer then has to travel exactly one token, and the task isolates what
the chapter is about.

Shapes: ``N`` batch size, ``L`` sequence length, ``C`` number of symbols
(classes)."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.labs.lab import LengthLabConfig, seed_mean, seed_spread
from tinyformer.models.encoder import (
    POSITIONAL_SCHEMES,
    TinyTransformer,
    TransformerConfig,
)
from tinyformer.tools.checks import check_int
from tinyformer.tools.jobs import run_jobs

__all__ = [
    "LAB_SCHEMES",
    "MARKER",
    "ExtrapolationConfig",
    "ExtrapolationResult",
    "MarkerBatch",
    "MarkerRun",
    "evaluation_batches",
    "marker_accuracy",
    "marker_batch",
    "marker_correct",
    "marker_logits",
    "position_blind_ceiling",
    "reflection_blind_ceiling",
    "run_extrapolation",
    "train_marker_model",
]

#: The rows of chapter 5's lab, named here so that a scheme added to the
#: library (:data:`~tinyformer.models.positional.registry.POSITIONAL_SCHEMES`) joins the
#: lab, and its claims, only when it is added to this tuple.
LAB_SCHEMES: tuple[str, ...] = (
    "none",
    "sinusoidal",
    "learned",
    "rotary",
    "alibi",
    "alibi_asymmetric",
    "t5",
)

#: Token id of the marker; id 0 is padding (unused here) and the symbols
#: are ids ``2 .. C + 1``.
MARKER = 1
_FIRST_SYMBOL = 2


@dataclass(frozen=True)
class ExtrapolationConfig(LengthLabConfig):
    """The lab's data, training and evaluation; the preset is
    ``extrapolation`` (:mod:`tinyformer.labs.presets`).

    Attributes:
        num_symbols: number of distinct symbols C (the classes), >= 2.
        train_len: L_train, the longest training sequence in tokens, >= 3.
        min_train_len: the shortest training sequence, in [2, train_len];
            each step draws one length uniformly from
            ``min_train_len .. train_len``.
        steps: optimiser steps, >= 1.
        batch_size: sequences per step, >= 1.
        learning_rate: AdamW step size, > 0 (weight decay is 0, so
            parameters that never receive a gradient, such as the rows of a
            learned table past L_train, keep their initial values).
        seeds: one trained model per seed and scheme; the seed fixes the
            initial weights and the data.
        length_factors: evaluate at ``factor * train_len`` tokens for each
            factor.
        eval_size: sequences per evaluation length, >= 1.
        eval_seed: seed of the evaluation sequences (the same for every
            model).

    Raises:
        TypeError, ValueError: for a field of the wrong type or out of range, naming it.
    """

    num_symbols: int = 8
    train_len: int = 16
    min_train_len: int = 4
    steps: int = 300
    batch_size: int = 64
    learning_rate: float = 3e-3
    seeds: tuple[int, ...] = (0, 1, 2)
    length_factors: tuple[int, ...] = (1, 2, 4)
    eval_size: int = 1000
    eval_seed: int = 12345

    def __post_init__(self) -> None:
        check_int("num_symbols", self.num_symbols, minimum=2)
        self.check_schedule()


@dataclass(frozen=True)
class MarkerBatch:
    """Sequences of the marker task.

    Attributes:
        input_ids: long ``(N, L)``: symbols (ids ``2 .. C + 1``) and one
            :data:`MARKER` per row.
        marker: long ``(N,)`` position of the marker, in ``[0, L - 2]`` (a
            symbol always follows it).
        labels: long ``(N,)`` the class of the symbol at ``marker + 1``, in
            ``[0, C)``.
        num_symbols: C.
    """

    input_ids: Tensor
    marker: Tensor
    labels: Tensor
    num_symbols: int

    def __len__(self) -> int:
        return self.input_ids.size(0)


def marker_batch(
    batch_size: int,
    seq_len: int,
    *,
    num_symbols: int,
    generator: torch.Generator,
) -> MarkerBatch:
    """Draw ``batch_size`` sequences of ``seq_len`` tokens: ``seq_len - 1``
    symbols, uniform and independent, with the marker inserted at a uniform
    position in ``[0, seq_len - 2]``.

    Args:
        batch_size: N, >= 1.
        seq_len: L, >= 2.
        num_symbols: C, >= 2.
        generator: the source of randomness (so that a seed fixes the
            batch).

    Returns:
        A :class:`MarkerBatch`.

    Raises:
        TypeError, ValueError: for a size that is not an int or out of range, naming it.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=2)
    num_symbols = check_int("num_symbols", num_symbols, minimum=2)
    # (N, L-1), classes
    symbols = torch.randint(
        num_symbols, (batch_size, seq_len - 1), generator=generator
    )
    # (N,), in [0, L-2]
    marker = torch.randint(seq_len - 1, (batch_size,), generator=generator)
    position = torch.arange(seq_len).expand(batch_size, seq_len)  # (N, L)
    # Token t of the sequence is symbol t before the marker and symbol t-1
    # after it. (N, L)
    source = (position - (position > marker[:, None]).long()).clamp(
        max=seq_len - 2
    )
    input_ids = (symbols.gather(1, source) + _FIRST_SYMBOL).masked_fill(
        position == marker[:, None], MARKER
    )
    # (N,): the symbol right after the marker
    labels = symbols.gather(1, marker[:, None]).squeeze(1)
    return MarkerBatch(
        input_ids=input_ids,
        marker=marker,
        labels=labels,
        num_symbols=num_symbols,
    )


def position_blind_ceiling(batch: MarkerBatch) -> float:
    """The best expected accuracy on ``batch`` of any classifier that sees
    the tokens but not their order.

    Given the multiset of a sequence's ``L - 1`` symbols, every arrangement
    of them is equally likely and the marker's place is uniform and
    independent, so the symbol after the marker is each of the ``L - 1``
    symbols with equal chance: symbol ``s`` with probability
    ``count(s) / (L - 1)``. An order-blind classifier can at best name the
    most frequent symbol, and is right with probability
    ``max_s count(s) / (L - 1)``. This returns the mean of that over the
    batch. A model without positional information and without a causal mask
    is order-blind: attention is permutation-equivariant, so the output at
    the marker is a function of the multiset alone. The ceiling falls
    towards the chance rate ``1 / C`` as L grows.

    Returns:
        A fraction in ``[1 / C, 1]``.
    """
    seq_len = batch.input_ids.size(1)
    # (N, L-1)
    symbols = (
        batch.input_ids[batch.input_ids != MARKER].view(
            len(batch), seq_len - 1
        )
        - _FIRST_SYMBOL
    )
    counts = F.one_hot(symbols, batch.num_symbols).sum(dim=1)  # (N, C)
    return (counts.max(dim=1).values.double() / (seq_len - 1)).mean().item()


def reflection_blind_ceiling(batch: MarkerBatch) -> float:
    """The best expected accuracy on ``batch`` of any classifier that cannot
    tell a sequence from its reversal.

    A model whose only positional information is symmetric in distance, such
    as the ALiBi bias ``-m |i - j|`` of an encoder without a causal mask, is
    reflection-equivariant: reversing the input reverses every output, so
    the output at the marker is the same for a sequence and its mirror
    image. In the mirror image the symbol after the marker is the one that
    stood *before* it. The two are equally likely, so such a classifier is
    right for sure when the symbols on both sides are equal or the marker is
    at position 0 (its mirror image, with the marker last, cannot occur),
    and at best half the time otherwise. This returns the mean of that over
    the batch.

    Returns:
        A fraction in ``[1 / 2, 1]``.
    """
    rows = torch.arange(len(batch))
    after = batch.input_ids[rows, batch.marker + 1]
    before = batch.input_ids[rows, (batch.marker - 1).clamp(min=0)]
    certain = (batch.marker == 0) | (before == after)
    return torch.where(certain, 1.0, 0.5).double().mean().item()


def marker_logits(model: TinyTransformer, batch: MarkerBatch) -> Tensor:
    """Class scores ``(N, C)``: the model's classifier applied to its
    encoder output at the marker."""
    hidden, _ = model.encode(batch.input_ids)  # (N, L, E)
    at_marker = hidden[torch.arange(len(batch)), batch.marker]  # (N, E)
    return model.classifier(at_marker)  # (N, C)


@torch.no_grad()
def marker_correct(model: TinyTransformer, batch: MarkerBatch) -> Tensor:
    """Bool ``(N,)``: True where the largest logit is the symbol after the
    marker (model run in eval mode)."""
    was_training = model.training
    model.eval()
    # (N,)
    correct = marker_logits(model, batch).argmax(dim=-1) == batch.labels
    model.train(was_training)
    return correct


def marker_accuracy(model: TinyTransformer, batch: MarkerBatch) -> float:
    """Fraction of ``batch`` whose largest logit is the symbol after the
    marker (model run in eval mode)."""
    return marker_correct(model, batch).double().mean().item()


@dataclass
class MarkerRun:
    """A trained model (eval mode), its initial parameters and its training
    losses (nats per step)."""

    model: TinyTransformer
    initial_state: dict[str, Tensor]
    losses: list[float] = field(default_factory=list)


def train_marker_model(
    model_config: TransformerConfig, lab: ExtrapolationConfig, seed: int
) -> MarkerRun:
    """Train a fresh :class:`~tinyformer.models.encoder.TinyTransformer` on the
    marker task with AdamW.

    ``torch.manual_seed(seed)`` fixes the initial weights; a separate
    generator seeded with ``seed`` draws every training batch (one length
    per step, uniform in ``lab.min_train_len .. lab.train_len``), so the
    same arguments give the same model on the same machine.

    Args:
        model_config: the model; ``vocab_size`` must be at least
            ``lab.num_symbols + 2`` and ``num_classes`` equal
            ``lab.num_symbols``.
        lab: data and training settings.
        seed: the seed, >= 0.

    Returns:
        A :class:`MarkerRun` with the model in eval mode.

    Raises:
        TypeError: if a config has the wrong type.
        ValueError: if the model's vocabulary or classes do not fit the
            task.
    """
    if not isinstance(model_config, TransformerConfig) or not isinstance(
        lab, ExtrapolationConfig
    ):
        raise TypeError(
            "model_config must be a TransformerConfig and lab an ExtrapolationConfig"
        )
    check_int("seed", seed, minimum=0)
    if (
        model_config.vocab_size < lab.num_symbols + _FIRST_SYMBOL
        or model_config.num_classes != lab.num_symbols
    ):
        raise ValueError(
            f"the task needs vocab_size >= {lab.num_symbols + _FIRST_SYMBOL} and num_classes == {lab.num_symbols}, "
            f"got vocab_size={model_config.vocab_size}, num_classes={model_config.num_classes}"
        )
    torch.manual_seed(seed)
    model = TinyTransformer(model_config)
    initial_state = {
        name: p.detach().clone() for name, p in model.named_parameters()
    }
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lab.learning_rate, weight_decay=0.0
    )
    data = torch.Generator().manual_seed(seed)
    run = MarkerRun(model, initial_state)
    model.train()
    for _ in range(lab.steps):
        seq_len = int(
            torch.randint(
                lab.min_train_len, lab.train_len + 1, (), generator=data
            )
        )
        batch = marker_batch(
            lab.batch_size,
            seq_len,
            num_symbols=lab.num_symbols,
            generator=data,
        )
        loss = F.cross_entropy(marker_logits(model, batch), batch.labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        run.losses.append(loss.item())
    model.eval()
    return run


@dataclass
class ExtrapolationResult:
    """Accuracy of every scheme and seed at every evaluation length.

    Attributes:
        lab: the settings the result was computed with.
        schemes: the positional schemes, in order.
        accuracy: for each scheme, a float64 ``(num_seeds, num_lengths)``
            tensor of test accuracies.
        ceiling: the order-blind ceiling of each evaluation batch, one per
            length.
        reflection_ceiling: the reflection-blind ceiling of each evaluation
            batch, one per length.
        runs: the trained runs, ``runs[scheme][k]`` for ``lab.seeds[k]``.
    """

    lab: ExtrapolationConfig
    schemes: tuple[str, ...]
    accuracy: dict[str, Tensor]
    ceiling: list[float]
    reflection_ceiling: list[float]
    runs: dict[str, list[MarkerRun]]

    @classmethod
    def merge(cls, parts: list[ExtrapolationResult]) -> ExtrapolationResult:
        """One result from several runs of :func:`run_extrapolation` with
        the same ``lab`` and other schemes.

        Raises:
            ValueError: if ``parts`` is empty, the labs differ or a scheme
                appears twice.
        """
        if not parts:
            raise ValueError("parts is empty")
        if any(part.lab != parts[0].lab for part in parts):
            raise ValueError(
                "the parts were computed with different ExtrapolationConfigs"
            )
        schemes = tuple(scheme for part in parts for scheme in part.schemes)
        if len(set(schemes)) != len(schemes):
            raise ValueError(
                f"a scheme appears in more than one part: {list(schemes)}"
            )
        return cls(
            lab=parts[0].lab,
            schemes=schemes,
            accuracy={
                k: v for part in parts for k, v in part.accuracy.items()
            },
            ceiling=parts[0].ceiling,
            reflection_ceiling=parts[0].reflection_ceiling,
            runs={k: v for part in parts for k, v in part.runs.items()},
        )

    def mean(self, scheme: str) -> Tensor:
        """Mean accuracy over seeds, ``(num_lengths,)``."""
        return seed_mean(self.accuracy[scheme])

    def spread(self, scheme: str) -> Tensor:
        """Sample standard deviation over seeds, ``(num_lengths,)`` (zero
        for a single seed)."""
        return seed_spread(self.accuracy[scheme])


def evaluation_batches(lab: ExtrapolationConfig) -> list[MarkerBatch]:
    """The evaluation sequences, one batch per length of
    ``lab.eval_lengths``, drawn from ``lab.eval_seed``."""
    generator = torch.Generator().manual_seed(lab.eval_seed)
    return [
        marker_batch(
            lab.eval_size,
            n,
            num_symbols=lab.num_symbols,
            generator=generator,
        )
        for n in lab.eval_lengths
    ]


def _marker_job(
    job: tuple[TransformerConfig, ExtrapolationConfig, int],
) -> Any:
    """One model of the lab: a job for :func:`run_extrapolation`'s
    workers."""
    config, lab, seed = job
    return train_marker_model(config, lab, seed)


def run_extrapolation(
    model_config: TransformerConfig,
    lab: ExtrapolationConfig,
    schemes: tuple[str, ...] = LAB_SCHEMES,
    *,
    workers: int = 1,
    executor: Executor | None = None,
) -> ExtrapolationResult:
    """Train one model per scheme and seed on lengths up to
    ``lab.train_len``, and test each at every length.

    Every model has ``model_config``'s sizes with ``positional`` set to the
    scheme and ``max_len`` set to the longest evaluation length. For
    ``"learned"`` this means a table of that many rows of which only the
    first ``train_len`` ever receive a gradient: beyond L_train the model
    adds rows that keep their random initial values. For ``"sinusoidal"`` it
    means the same formula evaluated further.

    Args:
        model_config: the sizes shared by all models (its ``positional`` and
            ``max_len`` are replaced).
        lab: data, training and evaluation settings.
        schemes: the schemes to compare, each in
            :data:`~tinyformer.models.positional.registry.POSITIONAL_SCHEMES`; by
            default the chapter's rows, :data:`LAB_SCHEMES`.
        workers: processes that train side by side
            (:func:`tinyformer.labs.long_context.run_jobs`: spawned, one thread
            each); each model seeds its own weights and data.
        executor: runs the jobs instead of the local processes (any
            :class:`concurrent.futures.Executor` whose workers are
            processes; :func:`tinyformer.labs.long_context.run_jobs`).

    Returns:
        An :class:`ExtrapolationResult`.

    Raises:
        ValueError: if a scheme is unknown or ``workers`` < 1.
    """
    check_int("workers", workers, minimum=1)
    for scheme in schemes:
        if scheme not in POSITIONAL_SCHEMES:
            raise ValueError(
                f"scheme {scheme!r} is not one of {list(POSITIONAL_SCHEMES)}"
            )
    batches = evaluation_batches(lab)
    jobs = [
        (
            model_config.replace(
                positional=scheme,
                positional_encoding=True,
                max_len=max(lab.eval_lengths),
            ),
            lab,
            seed,
        )
        for scheme in schemes
        for seed in lab.seeds
    ]
    done = iter(run_jobs(_marker_job, jobs, workers, executor=executor))
    accuracy, runs = {}, {}
    for scheme in schemes:
        runs[scheme] = [next(done) for _ in lab.seeds]
        accuracy[scheme] = torch.tensor(
            [
                [marker_accuracy(run.model, batch) for batch in batches]
                for run in runs[scheme]
            ],
            dtype=torch.float64,
        )  # (num_seeds, num_lengths)
    return ExtrapolationResult(
        lab=lab,
        schemes=tuple(schemes),
        accuracy=accuracy,
        ceiling=[position_blind_ceiling(batch) for batch in batches],
        reflection_ceiling=[
            reflection_blind_ceiling(batch) for batch in batches
        ],
        runs=runs,
    )
