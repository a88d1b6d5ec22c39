"""The causal length lab of the chapter "Long context": decoders trained on
short inputs and tested on long ones, then stretched, windowed and given
attention sinks.

Three tasks, each asked at the **last token** of a causal decoder and
answerable at any length (their vocabulary is shared, :data:`BOS` first):

* ``"marker"``: ``BOS s s ... MARKER s* s ... s QUERY``; the answer is
  the symbol ``s*`` right after the single marker (the chapter "Position
  beyond sinusoids" asks the same question of an encoder). The answer
  sits at a random place, one token after the marker: a relative rule.
* ``"index"``: ``BOS s_1 s_2 ... s_n Q_k``; the answer is ``s_k``, the
  ``k``-th symbol, ``k`` in ``1 .. num_index``: an absolute place, whose
  distance from the query grows with the length.
* ``"recall"``, associative recall: ``BOS k1 v1 k2 v2 ... kn vn q``, with
  distinct keys; ``q`` is one of them and the answer is the value that
  followed it (Ba et al., 2016; Arora et al., 2024). Small decoders need
  far more steps to learn it than the other two.

In both, a model that cannot tell where tokens are sees only the bag of
tokens; the best it can do is to name the most frequent candidate, and
:class:`TaskBatch` carries that ceiling per sequence. A causal decoder
without positions is not blind in this way (its mask lets it count the
tokens it may see; Haviv et al., 2022), so the ceiling bounds an encoder,
not it.

Shapes: ``N`` sequences, ``L`` tokens per sequence, ``C`` symbols."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.labs.lab import (
    LengthLabConfig,
    check_positive_number,
    seed_mean,
    seed_spread,
)
from tinyformer.models.decoder import (
    DECODER_POSITIONAL_SCHEMES,
    DecoderConfig,
    TinyDecoder,
)
from tinyformer.models.positional import RopeScaling
from tinyformer.tools.checks import check_int
from tinyformer.tools.jobs import default_workers, run_jobs

__all__ = [
    "BOS",
    "EXTENSION_METHODS",
    "LAB_SCHEMES",
    "TASKS",
    "CausalLabConfig",
    "CausalLabResult",
    "CausalRun",
    "ExtensionResult",
    "TaskBatch",
    "answer_accuracy",
    "answer_logits",
    "attention_maps",
    "context_extension",
    "default_workers",
    "evaluation_batches",
    "extension_scaling",
    "fine_tune",
    "first_token_mass",
    "index_batch",
    "marker_batch",
    "recall_batch",
    "run_causal_lab",
    "run_jobs",
    "task_batch",
    "train_causal_model",
    "with_config",
]

#: The rows of chapter 7's causal lab, named here so that a scheme added to
#: the library (:data:`~tinyformer.models.positional.registry.DECODER_POSITIONAL_SCHEMES`)
#: joins the lab, and its claims, only when it is added to this tuple.
LAB_SCHEMES: tuple[str, ...] = (
    "none",
    "sinusoidal",
    "learned",
    "rotary",
    "alibi",
    "t5",
)

#: The token ids of the begin-of-sequence token, the marker and the marker
#: task's query; the symbols (answers) follow, then the recall task's keys
#: and the index task's queries.
BOS, MARKER, QUERY = 0, 1, 2
_FIRST_SYMBOL = 3
#: The tasks of :func:`task_batch`.
TASKS: tuple[str, ...] = ("marker", "index", "recall")


@dataclass(frozen=True)
class CausalLabConfig(LengthLabConfig):
    """The lab's data, training and evaluation; the preset is
    ``long-context`` (:mod:`tinyformer.labs.presets`).

    Attributes:
        tasks: the tasks, each in :data:`TASKS`; one model per task.
        num_symbols: the answers C, >= 2.
        num_keys: distinct keys of the recall task, >= 2.
        num_index: the places the index task asks for, ``1 ..
            num_index``, >= 1.
        train_len: L_train, the longest training sequence in tokens, >= 5.
        min_train_len: the shortest, in [4, train_len].
        steps: optimiser steps, >= 1.
        batch_size: sequences per step, >= 1.
        learning_rate: AdamW step size after a linear warm-up over the
            first 5 % of the steps, > 0; weight decay 0.
        scheme_learning_rates: ``(scheme, rate)`` pairs that replace
            ``learning_rate`` for those schemes (a TOML table gives a
            mapping).
        seeds: one model per seed and scheme.
        length_factors: evaluate at ``factor * train_len`` tokens.
        eval_size: sequences per task and length, >= 1.
        eval_seed: seed of the evaluation sequences.

    Raises:
        TypeError, ValueError: for a field of the wrong type or out of
            range, naming it.
    """

    train_len_minimum: ClassVar[int] = 5
    min_train_len_minimum: ClassVar[int] = 4

    tasks: tuple[str, ...] = ("marker", "index")
    num_symbols: int = 8
    num_keys: int = 64
    num_index: int = 2
    train_len: int = 12
    min_train_len: int = 4
    steps: int = 400
    batch_size: int = 128
    learning_rate: float = 3e-3
    scheme_learning_rates: tuple[tuple[str, float], ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    length_factors: tuple[int, ...] = (1, 2, 4, 8)
    eval_size: int = 300
    eval_seed: int = 12345

    def __post_init__(self) -> None:
        for name, minimum in (
            ("num_symbols", 2),
            ("num_keys", 2),
            ("num_index", 1),
        ):
            check_int(name, getattr(self, name), minimum=minimum)
        self.check_schedule()
        rates = self.scheme_learning_rates
        pairs = tuple(
            sorted(rates.items()) if isinstance(rates, dict) else rates
        )
        for scheme, rate in pairs:
            if scheme not in DECODER_POSITIONAL_SCHEMES:
                raise ValueError(
                    f"scheme_learning_rates names {scheme!r}, not one of {list(DECODER_POSITIONAL_SCHEMES)}"
                )
            check_positive_number(
                f"scheme_learning_rates[{scheme!r}]", rate
            )
        object.__setattr__(self, "scheme_learning_rates", pairs)
        tasks = tuple(self.tasks)
        if not tasks:
            raise ValueError("tasks is empty")
        object.__setattr__(self, "tasks", tasks)
        for task in tasks:
            if task not in TASKS:
                raise ValueError(
                    f"task {task!r} is not one of {list(TASKS)}"
                )

    def learning_rate_for(self, scheme: str) -> float:
        """The AdamW step size of ``scheme``'s models."""
        return float(
            dict(self.scheme_learning_rates).get(scheme, self.learning_rate)
        )

    @property
    def vocab_size(self) -> int:
        """The number of token ids the tasks use (BOS, marker, query, the
        symbols, the recall keys, the index queries)."""
        return (
            _FIRST_SYMBOL
            + self.num_symbols
            + self.num_keys
            + self.num_index
        )


@dataclass(frozen=True)
class TaskBatch:
    """Sequences of one task and length.

    Attributes:
        task: the task's name.
        input_ids: ``(N, L)`` token ids, :data:`BOS` first.
        labels: ``(N,)`` the answer, a symbol index in ``[0, C)``.
        answer_position: ``(N,)`` where the answer sits in the sequence.
        ceiling: ``(N,)`` float64, the chance that the most frequent
            candidate is the answer: the best accuracy of a model blind to
            order, sequence by sequence.
    """

    task: str
    input_ids: Tensor
    labels: Tensor
    answer_position: Tensor
    ceiling: Tensor


def _bag_ceiling(candidates: Tensor, num_symbols: int) -> Tensor:
    """Per row, the share of the most frequent of ``candidates`` (N, K)."""
    counts = F.one_hot(candidates, num_symbols).sum(dim=1)  # (N, C)
    return counts.max(dim=1).values.double() / candidates.size(1)


def marker_batch(
    batch_size: int,
    seq_len: int,
    *,
    num_symbols: int = 8,
    generator: torch.Generator | None = None,
    last: int | None = None,
) -> TaskBatch:
    """``BOS``, ``seq_len - 3`` random symbols with one marker among them
    (never right before the query), then ``QUERY``; the label is the symbol
    after the marker.

    Args:
        batch_size: sequences N, >= 1.
        seq_len: tokens L, >= 4.
        num_symbols: symbols C, >= 2.
        generator: random generator, or None for the global one.
        last: if given, the marker sits among the last ``last`` tokens
            before the query (>= 2), so that the answer is that close.

    Raises:
        TypeError, ValueError: for sizes of the wrong type or range.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("seq_len", seq_len, minimum=4)
    check_int("num_symbols", num_symbols, minimum=2)
    content = seq_len - 2  # the marker and the symbols
    symbols = torch.randint(
        num_symbols, (batch_size, content - 1), generator=generator
    )
    low = 0
    if last is not None:
        check_int("last", last, minimum=2)
        low = max(0, content - last)
    # the marker's place among the content tokens; a symbol follows it
    marker = torch.randint(
        low, content - 1, (batch_size,), generator=generator
    )
    place = torch.arange(content).expand(batch_size, content)
    source = (place - (place > marker[:, None]).long()).clamp(
        max=content - 2
    )
    body = (symbols.gather(1, source) + _FIRST_SYMBOL).masked_fill(
        place == marker[:, None], MARKER
    )
    ids = torch.cat(
        (
            torch.full((batch_size, 1), BOS),
            body,
            torch.full((batch_size, 1), QUERY),
        ),
        dim=1,
    )
    labels = symbols.gather(1, marker[:, None]).squeeze(1)
    return TaskBatch(
        "marker",
        ids,
        labels,
        marker + 2,  # BOS, then the marker, then the answer
        _bag_ceiling(symbols, num_symbols),
    )


def recall_batch(
    batch_size: int,
    seq_len: int,
    *,
    num_symbols: int = 8,
    num_keys: int = 64,
    generator: torch.Generator | None = None,
) -> TaskBatch:
    """``BOS k1 v1 ... kn vn q`` with ``n = (seq_len - 2) // 2`` distinct
    keys (an odd ``seq_len`` puts one random value after ``BOS``) and ``q``
    one of the keys; the label is the value that followed ``q``.

    Raises:
        TypeError, ValueError: for sizes of the wrong type or range, or
            more pairs than keys.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("seq_len", seq_len, minimum=4)
    check_int("num_symbols", num_symbols, minimum=2)
    check_int("num_keys", num_keys, minimum=2)
    pairs = (seq_len - 2) // 2
    if pairs > num_keys:
        raise ValueError(
            f"seq_len={seq_len} needs {pairs} distinct keys, more than num_keys={num_keys}"
        )
    filler = seq_len - 2 - 2 * pairs  # 0 or 1 extra value after BOS
    keys = torch.rand(batch_size, num_keys, generator=generator).argsort(1)
    keys = keys[:, :pairs]
    values = torch.randint(
        num_symbols, (batch_size, pairs + filler), generator=generator
    )
    first_key = _FIRST_SYMBOL + num_symbols
    pairs_ids = torch.stack(
        (keys + first_key, values[:, filler:] + _FIRST_SYMBOL), dim=2
    ).view(batch_size, 2 * pairs)
    which = torch.randint(pairs, (batch_size,), generator=generator)
    query = keys.gather(1, which[:, None]) + first_key
    ids = torch.cat(
        (
            torch.full((batch_size, 1), BOS),
            values[:, :filler] + _FIRST_SYMBOL,
            pairs_ids,
            query,
        ),
        dim=1,
    )
    labels = values[:, filler:].gather(1, which[:, None]).squeeze(1)
    return TaskBatch(
        "recall",
        ids,
        labels,
        1 + filler + 2 * which + 1,
        _bag_ceiling(values[:, filler:], num_symbols),
    )


def index_batch(
    batch_size: int,
    seq_len: int,
    *,
    num_symbols: int = 8,
    num_index: int = 2,
    first_query: int = _FIRST_SYMBOL + 8 + 64,
    generator: torch.Generator | None = None,
) -> TaskBatch:
    """``BOS s_1 ... s_n Q_k`` with ``n = seq_len - 2`` random symbols and
    ``k`` uniform in ``1 .. min(num_index, n)``; the label is ``s_k``.

    Args:
        batch_size: sequences N, >= 1.
        seq_len: tokens L, >= 3.
        num_symbols: symbols C, >= 2.
        num_index: the largest ``k``, >= 1.
        first_query: the token id of ``Q_1`` (``Q_k`` is
            ``first_query + k - 1``).
        generator: random generator, or None for the global one.

    Raises:
        TypeError, ValueError: for sizes of the wrong type or range.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("seq_len", seq_len, minimum=3)
    check_int("num_symbols", num_symbols, minimum=2)
    check_int("num_index", num_index, minimum=1)
    body = seq_len - 2
    symbols = torch.randint(
        num_symbols, (batch_size, body), generator=generator
    )
    k = torch.randint(
        min(num_index, body), (batch_size,), generator=generator
    )  # 0-based
    ids = torch.cat(
        (
            torch.full((batch_size, 1), BOS),
            symbols + _FIRST_SYMBOL,
            (k + first_query)[:, None],
        ),
        dim=1,
    )
    labels = symbols.gather(1, k[:, None]).squeeze(1)
    return TaskBatch(
        "index", ids, labels, k + 1, _bag_ceiling(symbols, num_symbols)
    )


def task_batch(
    task: str,
    lab: CausalLabConfig,
    batch_size: int,
    seq_len: int,
    generator: torch.Generator | None = None,
) -> TaskBatch:
    """A batch of ``task`` with the lab's symbols and keys."""
    if task == "marker":
        return marker_batch(
            batch_size,
            seq_len,
            num_symbols=lab.num_symbols,
            generator=generator,
        )
    if task == "index":
        return index_batch(
            batch_size,
            seq_len,
            num_symbols=lab.num_symbols,
            num_index=lab.num_index,
            first_query=_FIRST_SYMBOL + lab.num_symbols + lab.num_keys,
            generator=generator,
        )
    if task == "recall":
        return recall_batch(
            batch_size,
            seq_len,
            num_symbols=lab.num_symbols,
            num_keys=lab.num_keys,
            generator=generator,
        )
    raise ValueError(f"task {task!r} is not one of {list(TASKS)}")


def answer_logits(
    model: TinyDecoder, batch: TaskBatch, num_symbols: int
) -> Tensor:
    """``(N, C)`` logits of the symbols at each sequence's last token."""
    logits = model(batch.input_ids, last_only=True)[:, -1]  # (N, V)
    return logits[:, _FIRST_SYMBOL : _FIRST_SYMBOL + num_symbols]


@torch.no_grad()
def answer_accuracy(
    model: TinyDecoder,
    batch: TaskBatch,
    num_symbols: int,
    *,
    chunk: int = 200,
) -> float:
    """Fraction of ``batch`` whose largest symbol logit is the answer (the
    model is put in eval mode)."""
    model.eval()
    correct = 0
    for start in range(0, batch.labels.numel(), chunk):
        part = TaskBatch(
            batch.task,
            batch.input_ids[start : start + chunk],
            batch.labels[start : start + chunk],
            batch.answer_position[start : start + chunk],
            batch.ceiling[start : start + chunk],
        )
        guess = answer_logits(model, part, num_symbols).argmax(dim=-1)
        correct += int((guess == part.labels).sum())
    return correct / batch.labels.numel()


@dataclass
class CausalRun:
    """A trained decoder (eval mode) and its training losses (nats)."""

    model: TinyDecoder
    losses: list[float] = field(default_factory=list)


def _train(
    model: TinyDecoder,
    lab: CausalLabConfig,
    task: str,
    *,
    steps: int,
    max_len: int,
    min_len: int,
    seed: int,
    learning_rate: float,
) -> list[float]:
    """AdamW on ``task``; a linear warm-up over 5 % of the steps, then a
    constant rate."""
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=learning_rate,
        weight_decay=0.0,
        betas=(0.9, 0.98),
        foreach=True,  # one call per step for all parameters: faster here
    )
    warm_up = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warm_up)
    )
    data = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        seq_len = int(
            torch.randint(min_len, max_len + 1, (), generator=data)
        )
        batch = task_batch(task, lab, lab.batch_size, seq_len, data)
        logits = answer_logits(model, batch, lab.num_symbols)
        loss = F.cross_entropy(logits, batch.labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return losses


def train_causal_model(
    model_config: DecoderConfig,
    lab: CausalLabConfig,
    seed: int,
    task: str,
) -> CausalRun:
    """A fresh :class:`~tinyformer.models.decoder.TinyDecoder` trained on
    ``task`` at lengths ``min_train_len .. train_len``, with the learning
    rate of its scheme.

    ``torch.manual_seed(seed)`` fixes the initial weights; a generator
    seeded with ``seed`` draws the data.

    Raises:
        TypeError: if a config has the wrong type.
        ValueError: if the model's vocabulary is smaller than the lab's.
    """
    if not isinstance(model_config, DecoderConfig) or not isinstance(
        lab, CausalLabConfig
    ):
        raise TypeError(
            "model_config must be a DecoderConfig and lab a CausalLabConfig"
        )
    check_int("seed", seed, minimum=0)
    if task not in TASKS:
        raise ValueError(f"task {task!r} is not one of {list(TASKS)}")
    if model_config.vocab_size < lab.vocab_size:
        raise ValueError(
            f"the tasks need vocab_size >= {lab.vocab_size}, got {model_config.vocab_size}"
        )
    torch.manual_seed(seed)
    model = TinyDecoder(model_config)
    losses = _train(
        model,
        lab,
        task,
        steps=lab.steps,
        max_len=lab.train_len,
        min_len=lab.min_train_len,
        seed=seed,
        learning_rate=lab.learning_rate_for(model_config.positional),
    )
    return CausalRun(model, losses)


def with_config(model: TinyDecoder, **changes: Any) -> TinyDecoder:
    """A copy of ``model`` with the same weights and ``changes`` to its
    config (a ``rope_scaling``, a ``sliding_window``, sinks), in eval
    mode."""
    reference = next(model.parameters())
    copy = TinyDecoder(model.config.replace(**changes))
    copy = copy.to(device=reference.device, dtype=reference.dtype)
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def fine_tune(
    model: TinyDecoder,
    lab: CausalLabConfig,
    task: str,
    *,
    max_len: int,
    steps: int,
    seed: int,
    rope_scaling: RopeScaling | None = None,
    learning_rate: float | None = None,
) -> TinyDecoder:
    """A copy of ``model`` with ``rope_scaling`` set, trained on ``task``
    for ``steps`` more steps on lengths ``lab.min_train_len .. max_len``
    (the original model is left unchanged); the learning rate defaults to
    a third of the scheme's."""
    check_int("steps", steps, minimum=1)
    check_int("max_len", max_len, minimum=lab.min_train_len)
    tuned = with_config(model, rope_scaling=rope_scaling)
    rate = lab.learning_rate_for(model.config.positional) / 3
    _train(
        tuned,
        lab,
        task,
        steps=steps,
        max_len=max_len,
        min_len=lab.min_train_len,
        seed=seed,
        learning_rate=rate if learning_rate is None else learning_rate,
    )
    return tuned


def evaluation_batches(
    lab: CausalLabConfig,
) -> dict[str, list[TaskBatch]]:
    """For each task, one batch per evaluation length, drawn from
    ``lab.eval_seed`` (the same for every model)."""
    generator = torch.Generator().manual_seed(lab.eval_seed)
    return {
        task: [
            task_batch(task, lab, lab.eval_size, n, generator)
            for n in lab.eval_lengths
        ]
        for task in lab.tasks
    }


@dataclass
class CausalLabResult:
    """Accuracy of every scheme, seed, task and length.

    Attributes:
        lab: the settings.
        schemes: the positional schemes, in order.
        accuracy: ``accuracy[task][scheme]``, float64
            ``(num_seeds, num_lengths)``.
        ceiling: ``ceiling[task]``, the order-blind ceiling per length.
        runs: ``runs[task][scheme][k]``, trained with ``lab.seeds[k]``.
    """

    lab: CausalLabConfig
    schemes: tuple[str, ...]
    accuracy: dict[str, dict[str, Tensor]]
    ceiling: dict[str, list[float]]
    runs: dict[str, dict[str, list[CausalRun]]]

    def mean(self, task: str, scheme: str) -> Tensor:
        """Mean accuracy over seeds, one value per length."""
        return seed_mean(self.accuracy[task][scheme])

    def spread(self, task: str, scheme: str) -> Tensor:
        """Sample standard deviation over seeds (0 for one seed)."""
        return seed_spread(self.accuracy[task][scheme])

    @classmethod
    def merge(cls, parts: list[CausalLabResult]) -> CausalLabResult:
        """One result from runs of :func:`run_causal_lab` on other schemes
        with the same lab."""
        first = parts[0]
        accuracy: dict[str, dict[str, Tensor]] = {
            t: {} for t in first.lab.tasks
        }
        runs: dict[str, dict[str, list[CausalRun]]] = {
            t: {} for t in first.lab.tasks
        }
        schemes: list[str] = []
        for part in parts:
            if part.lab != first.lab:
                raise ValueError("the parts were run with different labs")
            for task in part.lab.tasks:
                accuracy[task].update(part.accuracy[task])
                runs[task].update(part.runs[task])
            schemes += [s for s in part.schemes if s not in schemes]
        return cls(first.lab, tuple(schemes), accuracy, first.ceiling, runs)


def _lab_job(
    job: tuple[DecoderConfig, CausalLabConfig, int, str],
) -> tuple[CausalRun, list[float]]:
    """Train one lab model and score it at every evaluation length (a
    worker's unit of work; deterministic algorithms, like the chapters)."""
    model_config, lab, seed, task = job
    run = train_causal_model(model_config, lab, seed, task)
    scores = [
        answer_accuracy(run.model, b, lab.num_symbols)
        for b in evaluation_batches(lab)[task]
    ]
    return run, scores


def run_causal_lab(
    model_config: DecoderConfig,
    lab: CausalLabConfig,
    schemes: tuple[str, ...] = LAB_SCHEMES,
    *,
    workers: int = 1,
    executor: Executor | None = None,
) -> CausalLabResult:
    """Train one decoder per task, scheme and seed on lengths up to
    ``lab.train_len``, and test it on its task at every length.

    Each model has ``model_config``'s sizes, the lab's vocabulary, the
    scheme as ``positional`` and ``max_len`` the longest test length (so a
    learned table's rows past ``train_len`` stay untrained). ``workers``
    processes train side by side (:func:`run_jobs`), or ``executor`` runs
    the jobs (any :class:`concurrent.futures.Executor` whose workers are
    processes, a cluster's included); the accuracies are the same for any
    number of workers and on any such executor.

    Raises:
        ValueError: if a scheme is unknown, or ``workers`` < 1.
        TypeError: if ``executor`` is not a process-based Executor.
    """
    for scheme in schemes:
        if scheme not in DECODER_POSITIONAL_SCHEMES:
            raise ValueError(
                f"scheme {scheme!r} is not one of {list(DECODER_POSITIONAL_SCHEMES)}"
            )
    check_int("workers", workers, minimum=1)
    jobs = [
        (
            model_config.replace(
                vocab_size=lab.vocab_size,
                positional=scheme,
                max_len=max(lab.eval_lengths),
            ),
            lab,
            seed,
            task,
        )
        for task in lab.tasks
        for scheme in schemes
        for seed in lab.seeds
    ]
    done = iter(run_jobs(_lab_job, jobs, workers, executor=executor))
    accuracy: dict[str, dict[str, Tensor]] = {t: {} for t in lab.tasks}
    runs: dict[str, dict[str, list[CausalRun]]] = {t: {} for t in lab.tasks}
    for task in lab.tasks:
        for scheme in schemes:
            results = [next(done) for _ in lab.seeds]
            runs[task][scheme] = [run for run, _ in results]
            accuracy[task][scheme] = torch.tensor(
                [scores for _, scores in results], dtype=torch.float64
            )
    batches = evaluation_batches(lab)
    ceiling = {
        task: [b.ceiling.mean().item() for b in batches[task]]
        for task in lab.tasks
    }
    return CausalLabResult(lab, tuple(schemes), accuracy, ceiling, runs)


#: The context-extension methods of :func:`context_extension`: the rotary
#: model as trained, then the :class:`~tinyformer.models.positional.RopeScaling`
#: rules.
EXTENSION_METHODS: tuple[str, ...] = (
    "none",
    "linear",
    "ntk",
    "dynamic",
    "yarn",
    "llama3",
)


def extension_scaling(
    method: str, factor: float, original_max_len: int
) -> RopeScaling | None:
    """The :class:`~tinyformer.models.positional.RopeScaling` of ``method`` for a
    stretch ``factor`` of a model trained on ``original_max_len`` tokens
    (None for ``"none"``). ``"dynamic"`` takes its stretch from each
    input's length, so it ignores ``factor`` (its own factor is 1: the
    base grows as ``L / L_orig``).

    Raises:
        ValueError: if ``method`` is not in :data:`EXTENSION_METHODS`.
    """
    if method not in EXTENSION_METHODS:
        raise ValueError(
            f"method {method!r} is not one of {list(EXTENSION_METHODS)}"
        )
    if method == "none":
        return None
    if method == "dynamic":
        return RopeScaling(
            "dynamic", 1.0, original_max_len=original_max_len
        )
    return RopeScaling(
        method, float(factor), original_max_len=original_max_len
    )


@dataclass
class ExtensionResult:
    """Accuracy of stretched rotary models, zero-shot and fine-tuned.

    Attributes:
        task: the lab task.
        methods: :data:`EXTENSION_METHODS` or a subset, in order.
        lengths: the evaluation lengths, in tokens.
        zero_shot: ``zero_shot[method]``, float64 ``(num_seeds,
            num_lengths)``; at each length the stretch is ``length /
            L_train``.
        tuned: ``tuned[method]``, the same after the fine-tune, with the
            stretch ``tune_factor`` at every length.
        tune_factor: the stretch of the fine-tune, whose lengths reach
            ``tune_factor * L_train``.
        tune_steps: the fine-tune's optimiser steps.
    """

    task: str
    methods: tuple[str, ...]
    lengths: tuple[int, ...]
    zero_shot: dict[str, Tensor]
    tuned: dict[str, Tensor]
    tune_factor: int
    tune_steps: int


def _extension_job(
    job: tuple[TinyDecoder, CausalLabConfig, str, str, int, int, int],
) -> list[float]:
    """One model and method: zero-shot (``steps == 0``; the stretch is
    ``length / L_train`` at each length) or after a fine-tune of ``steps``
    steps at the stretch ``factor``; the accuracy at every test length."""
    model, lab, task, method, factor, steps, seed = job
    batches = evaluation_batches(lab)[task]
    if steps == 0:
        return [
            answer_accuracy(
                with_config(
                    model,
                    rope_scaling=extension_scaling(
                        method, n / lab.train_len, lab.train_len
                    ),
                ),
                b,
                lab.num_symbols,
            )
            for n, b in zip(lab.eval_lengths, batches, strict=True)
        ]
    tuned = fine_tune(
        model,
        lab,
        task,
        max_len=factor * lab.train_len,
        steps=steps,
        seed=seed,
        rope_scaling=extension_scaling(method, factor, lab.train_len),
    )
    return [answer_accuracy(tuned, b, lab.num_symbols) for b in batches]


def context_extension(
    result: CausalLabResult,
    task: str,
    *,
    methods: tuple[str, ...] = EXTENSION_METHODS,
    tune_factor: int = 2,
    tune_steps: int = 60,
    workers: int = 1,
    executor: Executor | None = None,
) -> ExtensionResult:
    """Stretch the lab's rotary models on ``task`` by each method: zero-shot
    (at each test length with the stretch ``length / L_train``), and after
    ``tune_steps`` fine-tuning steps on lengths up to ``tune_factor *
    L_train`` with the stretch ``tune_factor`` (:func:`fine_tune`, seeded
    ``1000 + seed``; ``"none"`` is fine-tuned too, unscaled: the control).
    ``workers`` and ``executor`` run the jobs as in :func:`run_causal_lab`.

    Raises:
        KeyError: if ``result`` has no rotary models on ``task``.
        ValueError: for an unknown method, or counts < 1.
    """
    for method in methods:
        if method not in EXTENSION_METHODS:
            raise ValueError(
                f"method {method!r} is not one of {list(EXTENSION_METHODS)}"
            )
    check_int("tune_factor", tune_factor, minimum=1)
    check_int("tune_steps", tune_steps, minimum=1)
    lab = result.lab
    models = [run.model for run in result.runs[task]["rotary"]]
    seeds = lab.seeds[: len(models)]
    jobs = [
        (m, lab, task, method, tune_factor, steps, 1000 + seed)
        for steps in (0, tune_steps)
        for method in methods
        for m, seed in zip(models, seeds, strict=True)
    ]
    done = run_jobs(_extension_job, jobs, workers, executor=executor)
    half = len(jobs) // 2
    zero, tuned = done[:half], done[half:]
    k = len(models)

    def table(rows: list[list[float]]) -> dict[str, Tensor]:
        return {
            method: torch.tensor(
                rows[i * k : (i + 1) * k], dtype=torch.float64
            )
            for i, method in enumerate(methods)
        }

    return ExtensionResult(
        task,
        tuple(methods),
        lab.eval_lengths,
        table(zero),
        table(tuned),
        tune_factor,
        tune_steps,
    )


@torch.no_grad()
def attention_maps(model: TinyDecoder, input_ids: Tensor) -> list[Tensor]:
    """The attention weights of every layer, ``(N, H, L, L)`` each, for
    ``input_ids`` ``(N, L)`` without padding (eval mode): the model's own
    forward pass with ``need_weights``."""
    model.eval()
    _, weights = model(input_ids, need_weights=True)
    return list(weights)


@torch.no_grad()
def first_token_mass(
    model: TinyDecoder, input_ids: Tensor, *, start: int = 0
) -> tuple[list[float], float]:
    """The attention the queries at positions ``>= start`` give the first
    token (``BOS`` in the lab), per layer, averaged over heads, sequences
    and those queries; and the share a query at position ``i`` would give
    it by attending evenly to its ``i + 1`` keys, averaged the same way.

    A layer far above the even share treats the first token as an
    attention sink (Xiao et al., 2024, Sec. 3.1).

    Args:
        model: a decoder (put in eval mode).
        input_ids: ``(N, L)`` token ids without padding.
        start: the first query position counted, ``0 <= start < L``.

    Returns:
        ``(per_layer, even_share)``: a list of ``num_layers`` floats in
        [0, 1] and one float.

    Raises:
        ValueError: if ``start`` is out of range.
    """
    seq_len = input_ids.size(1)
    check_int("start", start, minimum=0)
    if start >= seq_len:
        raise ValueError(
            f"start={start} must be below the length {seq_len}"
        )
    maps = attention_maps(model, input_ids)
    per_layer = [float(w[:, :, start:, 0].mean()) for w in maps]
    even = 1.0 / torch.arange(start + 1, seq_len + 1, dtype=torch.float64)
    return per_layer, float(even.mean())
