"""What attention learns: induction heads (Elhage et al., 2021; Olsson et
al., 2022) in attention-only decoders trained on repeated random tokens.

An induction head attends from a token to the token that followed the
previous occurrence of the same token, and copies it: on ``[A][B] ... [A]``
it predicts ``[B]``. It needs two layers: a previous-token head in an earlier
layer writes "the token before me" into each position's residual stream,
and the induction head's query, the current token, matches that key.

Shapes: ``N`` batch size, ``H`` heads, ``L`` sequence length, ``n`` length
of one copy of the random tokens, so that a row of :func:`repeated_tokens`
has ``L = 2n + 1`` tokens: ``[BOS, x_1 .. x_n, x_1 .. x_n]``. Position
``n + j`` holds the second ``x_j``; its earlier occurrence is at ``j`` and
the token after it, ``x_{j+1}``, at ``j + 1``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.labs.lab import check_positive_number
from tinyformer.models.decoder import TinyDecoder
from tinyformer.models.decoder_config import DecoderConfig
from tinyformer.tools.checks import check_int
from tinyformer.tools.config import TomlConfig
from tinyformer.tools.jobs import default_workers, run_jobs

__all__ = [
    "BOS",
    "InductionLabConfig",
    "InductionRun",
    "ablate_heads",
    "chance_loss",
    "copy_accuracy",
    "copy_loss",
    "default_workers",
    "drop_step",
    "evaluation_rows",
    "head_scores",
    "in_context_score",
    "induction_score",
    "length_accuracy",
    "previous_token_score",
    "repeated_tokens",
    "run_induction_lab",
    "train_induction_model",
]

#: The token that opens every row of :func:`repeated_tokens`.
BOS = 0


def repeated_tokens(
    batch_size: int,
    n: int,
    vocab_size: int,
    *,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Rows ``[BOS, x_1 .. x_n, x_1 .. x_n]`` of ``n`` random tokens drawn
    uniformly from ``1 .. vocab_size - 1``, then the same ``n`` again
    (Olsson et al., 2022, Sec. 2.2, "repeated random tokens").

    The first copy cannot be predicted beyond chance (loss ``log(V - 1)``
    nats); each token of the second copy but its first can be, from the
    first copy, by a model that has learned to look it up.

    Args:
        batch_size: rows ``N``, >= 1.
        n: tokens in one copy, >= 2.
        vocab_size: ``V``, >= 2 (token 0 is ``BOS``).
        generator: the random generator, or None for the global one.

    Returns:
        ``(N, 2n + 1)`` int64 token ids.

    Raises:
        TypeError: if a size is not an int.
        ValueError: if ``batch_size < 1``, ``n < 2`` or
            ``vocab_size < 2``, naming the value.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_int("n", n, minimum=2)
    check_int("vocab_size", vocab_size, minimum=2)
    copy = torch.randint(
        1, vocab_size, (batch_size, n), generator=generator
    )  # (N, n)
    bos = torch.full((batch_size, 1), BOS, dtype=copy.dtype)
    return torch.cat((bos, copy, copy), dim=1)  # (N, 2n + 1)


def _check_weights(weights: object) -> Tensor:
    """``weights`` if it is a floating ``(N, H, L, L)`` tensor."""
    if not isinstance(weights, Tensor) or not weights.is_floating_point():
        kind = (
            weights.dtype
            if isinstance(weights, Tensor)
            else type(weights).__name__
        )
        raise TypeError(
            f"weights must be a floating-point Tensor, got {kind}"
        )
    if weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(
            "weights must be self-attention weights of shape (N, H, L, L), "
            f"got {tuple(weights.shape)}"
        )
    return weights


def previous_token_score(weights: Tensor) -> Tensor:
    """Each head's mean attention from position ``t`` to ``t - 1``, over
    ``t = 1 .. L - 1`` and the batch: 1 for a head that always attends to
    the previous token (Olsson et al., 2022, Sec. 2.2).

    Args:
        weights: ``(N, H, L, L)`` attention weights, ``L >= 2``; row ``t``
            holds query ``t``'s weights over the keys.

    Returns:
        ``(H,)`` scores in [0, 1], in ``weights``' dtype.

    Raises:
        TypeError: if ``weights`` is not a floating tensor.
        ValueError: if ``weights`` is not ``(N, H, L, L)`` with ``L >= 2``.
    """
    weights = _check_weights(weights)
    if weights.size(-1) < 2:
        raise ValueError(
            f"weights must cover L >= 2 positions, got L={weights.size(-1)}"
        )
    # the diagonal below the main one: query t, key t - 1
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def induction_score(weights: Tensor, n: int) -> Tensor:
    """Each head's mean attention from position ``n + j`` (the second
    ``x_j``) to ``j + 1`` (the token after its first occurrence), over
    ``j = 1 .. n - 1`` and the batch, on rows of :func:`repeated_tokens`:
    1 for a perfect induction head (Olsson et al., 2022, Sec. 2.2).

    Args:
        weights: ``(N, H, 2n + 1, 2n + 1)`` attention weights over rows of
            ``repeated_tokens(N, n, ...)``.
        n: tokens in one copy, >= 2.

    Returns:
        ``(H,)`` scores in [0, 1], in ``weights``' dtype.

    Raises:
        TypeError: if ``weights`` is not a floating tensor or ``n`` not an
            int.
        ValueError: if ``n < 2``, or ``weights`` is not
            ``(N, H, 2n + 1, 2n + 1)``, naming both.
    """
    weights = _check_weights(weights)
    check_int("n", n, minimum=2)
    if weights.size(-1) != 2 * n + 1:
        raise ValueError(
            f"weights cover L={weights.size(-1)} positions; rows of n={n} "
            f"repeated tokens have 2n + 1 = {2 * n + 1}"
        )
    # query n + j, key j + 1: entry k of the diagonal n - 1 below the main
    # one is (query n - 1 + k, key k), so j = 1 .. n - 1 is k = 2 .. n
    stripe = weights.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)
    return stripe[..., 2 : n + 1].mean(dim=(0, 2))


def in_context_score(
    loss_per_position: Tensor, early: int, late: int
) -> float:
    """The mean loss at position ``early`` minus the mean loss at position
    ``late``, in the loss's units (nats): how much a model gains from the
    context it has read between them (Olsson et al., 2022, Sec. 2.2, who
    take the 50th and the 500th token).

    Args:
        loss_per_position: ``(..., L)`` per-token losses; leading
            dimensions (the batch) are averaged over.
        early: a position in ``[0, L)``.
        late: a position in ``[0, L)``.

    Returns:
        The score, a float (positive when the later token is predicted
        better).

    Raises:
        TypeError: if ``loss_per_position`` is not a floating tensor of at
            least one dimension, or a position is not an int.
        ValueError: if a position lies outside ``[0, L)``, naming it.
    """
    if (
        not isinstance(loss_per_position, Tensor)
        or not loss_per_position.is_floating_point()
        or loss_per_position.dim() == 0
    ):
        raise TypeError(
            "loss_per_position must be a floating-point Tensor of shape "
            f"(..., L), got {type(loss_per_position).__name__}"
        )
    length = loss_per_position.size(-1)
    for name, position in (("early", early), ("late", late)):
        check_int(name, position)
        if not 0 <= position < length:
            raise ValueError(
                f"{name}={position} lies outside the {length} positions "
                f"[0, {length})"
            )
    per_position = loss_per_position.reshape(-1, length).mean(dim=0)
    return float(per_position[early] - per_position[late])


@contextlib.contextmanager
def ablate_heads(
    model: TinyDecoder, heads: Mapping[int, Sequence[int]]
) -> Iterator[TinyDecoder]:
    """Zero the outputs of the chosen heads for every forward pass inside
    the ``with`` block: each head's ``D`` features of the merged heads are
    set to 0 before the layer's output projection, so the head adds
    nothing to the residual stream (zero ablation; Olsson et al., 2022,
    Sec. 3, ablate heads to measure what they do).

    The model's parameters and buffers are not touched: the ablation is a
    forward pre-hook on each chosen layer's ``out_proj``, removed on leaving
    the block, also when it is left by an exception.

    Args:
        model: a :class:`~tinyformer.models.decoder.TinyDecoder`.
        heads: ``{layer: [head, ...]}``, layers and heads counted from 0.

    Yields:
        ``model``.

    Raises:
        TypeError: if ``model`` is not a ``TinyDecoder``, ``heads`` not a
            mapping, or a layer or head not an int.
        ValueError: naming it, for a layer or head the model does not have.
    """
    if not isinstance(model, TinyDecoder):
        raise TypeError(
            f"model must be a TinyDecoder, got {type(model).__name__}"
        )
    if not isinstance(heads, Mapping):
        raise TypeError(
            "heads must map a layer to its heads, e.g. {1: [0, 2]}, got "
            f"{type(heads).__name__}"
        )
    num_layers, num_heads = len(model.layers), model.config.num_heads
    head_dim = model.config.head_dim
    chosen: dict[int, list[int]] = {}
    for layer, layer_heads in heads.items():
        check_int("layer", layer)
        if not 0 <= layer < num_layers:
            raise ValueError(
                f"layer {layer} does not exist: the model has layers "
                f"0 .. {num_layers - 1}"
            )
        if isinstance(layer_heads, (str, bytes)) or not isinstance(
            layer_heads, Sequence
        ):
            raise TypeError(
                f"heads[{layer}] must be a sequence of heads, got "
                f"{type(layer_heads).__name__}"
            )
        for head in layer_heads:
            check_int("head", head)
            if not 0 <= head < num_heads:
                raise ValueError(
                    f"head {head} of layer {layer} does not exist: each "
                    f"layer has heads 0 .. {num_heads - 1}"
                )
        chosen[layer] = sorted(set(layer_heads))

    def zero(head_list: list[int]):
        def hook(_module: object, args: tuple[Tensor, ...]) -> tuple:
            merged = args[0].clone()  # (N, L, H * D)
            for head in head_list:
                merged[..., head * head_dim : (head + 1) * head_dim] = 0
            return (merged, *args[1:])

        return hook

    handles = [
        model.layers[layer].attn.out_proj.register_forward_pre_hook(
            zero(head_list)
        )
        for layer, head_list in chosen.items()
        if head_list
    ]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def chance_loss(vocab_size: int) -> float:
    """``log(V - 1)`` nats: the loss of a uniform guess over the ``V - 1``
    tokens that :func:`repeated_tokens` draws from."""
    check_int("vocab_size", vocab_size, minimum=2)
    return math.log(vocab_size - 1)


@dataclass(frozen=True)
class InductionLabConfig(TomlConfig):
    """The induction lab's settings, the ``[lab]`` table of the preset
    ``induction``.

    Attributes:
        vocab_size: ``V``, tokens 1 .. V - 1 drawn, 0 is ``BOS``.
        n: the longest copy during training (rows of up to ``2n + 1``
            tokens), and the copy of the evaluation rows.
        min_n: the shortest copy during training: each step draws its copy
            length from ``min_n .. n``, so that the distance from a token
            to its earlier occurrence varies and a head cannot find it by
            position alone.
        steps: AdamW steps, each on a fresh batch.
        batch_size: rows per step.
        learning_rate: AdamW's rate after a linear warm-up over 5 % of the
            steps, > 0.
        eval_every: steps between two evaluations on the fixed batch.
        eval_size: rows of the fixed evaluation batch (and of each length
            test).
        eval_seed: the seed of the evaluation rows, the same for every
            model.
        seeds: one model per seed (its weights and its training rows).
        length_factors: test at copies of ``factor * n`` tokens.
    """

    toml_table: ClassVar[str] = "lab"

    vocab_size: int = 64
    n: int = 16
    min_n: int = 4
    steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 1e-3
    eval_every: int = 25
    eval_size: int = 128
    eval_seed: int = 12345
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    length_factors: tuple[int, ...] = (1, 2, 4, 8)

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=3)
        check_int("n", self.n, minimum=2)
        check_int("min_n", self.min_n, minimum=2)
        if self.min_n > self.n:
            raise ValueError(f"min_n={self.min_n} exceeds n={self.n}")
        for name in ("steps", "batch_size", "eval_every", "eval_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_seed", self.eval_seed, minimum=0)
        check_positive_number("learning_rate", self.learning_rate)
        for name, minimum in (("seeds", 0), ("length_factors", 1)):
            values = tuple(getattr(self, name))
            if not values:
                raise ValueError(f"{name} is empty")
            for value in values:
                check_int(name, value, minimum=minimum)
            object.__setattr__(self, name, values)

    @property
    def max_len(self) -> int:
        """The longest row tested, ``2 n max(length_factors) + 1`` tokens:
        the rows a ``"learned"`` or ``"sinusoidal"`` table needs."""
        return 2 * self.n * max(self.length_factors) + 1


def copy_loss(logits: Tensor, ids: Tensor, n: int) -> Tensor:
    """Per-row losses (nats) of the predictions of ``x_2 .. x_n`` in the
    second copy, the tokens an induction head can predict: ``(N, n - 1)``.

    ``logits`` ``(N, 2n + 1, V)`` are the model's next-token logits on
    ``ids`` ``(N, 2n + 1)``; position ``n + j`` predicts ``x_{j+1}`` at
    ``n + j + 1``, for ``j = 1 .. n - 1``."""
    predicted = logits[:, n + 1 : 2 * n]  # (N, n - 1, V)
    targets = ids[:, n + 2 :]  # (N, n - 1)
    return F.cross_entropy(
        predicted.transpose(1, 2), targets, reduction="none"
    )


def copy_accuracy(logits: Tensor, ids: Tensor, n: int) -> float:
    """The share of ``x_2 .. x_n`` in the second copy that the model's
    most likely next token gets right (arguments as :func:`copy_loss`)."""
    predicted = logits[:, n + 1 : 2 * n].argmax(dim=-1)  # (N, n - 1)
    return float((predicted == ids[:, n + 2 :]).double().mean())


@torch.no_grad()
def head_scores(
    model: TinyDecoder, ids: Tensor, n: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Every head's previous-token and induction score on ``ids`` (rows of
    :func:`repeated_tokens` with copies of ``n``), and the per-row loss of
    the second copy.

    Returns:
        ``(previous, induction, loss)``: ``(num_layers, H)`` float64 each,
        and ``(N, n - 1)`` (:func:`copy_loss`).
    """
    model.eval()
    logits, weights = model(ids, need_weights=True)
    previous = torch.stack([previous_token_score(w) for w in weights])
    induction = torch.stack([induction_score(w, n) for w in weights])
    return (
        previous.double(),
        induction.double(),
        copy_loss(logits, ids, n),
    )


@dataclass
class InductionRun:
    """A model trained on repeated random tokens and what was measured on
    the fixed evaluation rows as it trained.

    Attributes:
        model: the trained model (eval mode).
        steps: the steps after which it was evaluated (0: untrained).
        loss: the second copy's mean loss (nats) at each of ``steps``.
        previous: ``(len(steps), num_layers, H)`` previous-token scores.
        induction: ``(len(steps), num_layers, H)`` induction scores.
        train_loss: the training loss of every step (all positions).
    """

    model: TinyDecoder
    steps: list[int]
    loss: list[float]
    previous: Tensor
    induction: Tensor
    train_loss: list[float] = field(default_factory=list)


def evaluation_rows(lab: InductionLabConfig, factor: int = 1) -> Tensor:
    """The fixed evaluation rows, copies of ``factor * n`` tokens, drawn
    from ``lab.eval_seed`` (the same for every model)."""
    generator = torch.Generator().manual_seed(lab.eval_seed + factor)
    return repeated_tokens(
        lab.eval_size, factor * lab.n, lab.vocab_size, generator=generator
    )


def train_induction_model(
    model_config: DecoderConfig, lab: InductionLabConfig, seed: int
) -> InductionRun:
    """A fresh :class:`~tinyformer.models.decoder.TinyDecoder` trained
    with the next-token loss on every position of fresh rows of
    :func:`repeated_tokens` (copies of ``lab.min_n .. lab.n`` tokens, one
    length a step), evaluated every ``lab.eval_every`` steps on rows of
    copies of ``lab.n``.

    ``torch.manual_seed(seed)`` fixes the initial weights; a generator
    seeded with ``seed`` draws the training rows.

    Raises:
        TypeError: if a config has the wrong type.
        ValueError: if the model's vocabulary differs from the lab's, or
            its table is shorter than ``lab.max_len``.
    """
    if not isinstance(model_config, DecoderConfig) or not isinstance(
        lab, InductionLabConfig
    ):
        raise TypeError(
            "model_config must be a DecoderConfig and lab an "
            "InductionLabConfig"
        )
    check_int("seed", seed, minimum=0)
    if model_config.vocab_size != lab.vocab_size:
        raise ValueError(
            f"model_config.vocab_size={model_config.vocab_size} differs "
            f"from the lab's vocab_size={lab.vocab_size}"
        )
    torch.manual_seed(seed)
    model = TinyDecoder(model_config)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=lab.learning_rate,
        weight_decay=0.0,
        betas=(0.9, 0.98),
        foreach=True,
    )
    warm_up = max(1, lab.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warm_up)
    )
    data = torch.Generator().manual_seed(seed)
    evaluation = evaluation_rows(lab)
    steps, losses, previous, induction, train_loss = [], [], [], [], []

    def evaluate(step: int) -> None:
        prev, ind, loss = head_scores(model, evaluation, lab.n)
        steps.append(step)
        losses.append(float(loss.mean()))
        previous.append(prev)
        induction.append(ind)

    evaluate(0)
    for step in range(1, lab.steps + 1):
        model.train()
        n = int(torch.randint(lab.min_n, lab.n + 1, (), generator=data))
        ids = repeated_tokens(
            lab.batch_size, n, lab.vocab_size, generator=data
        )
        logits = model(ids)  # (N, 2n + 1, V)
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        train_loss.append(loss.item())
        if step % lab.eval_every == 0 or step == lab.steps:
            evaluate(step)
    model.eval()
    return InductionRun(
        model,
        steps,
        losses,
        torch.stack(previous),
        torch.stack(induction),
        train_loss,
    )


def drop_step(run: InductionRun, threshold: float) -> int | None:
    """The first evaluation step at which the second copy's loss is below
    ``threshold`` nats, or None if it never is."""
    for step, loss in zip(run.steps, run.loss, strict=True):
        if loss < threshold:
            return step
    return None


@torch.no_grad()
def length_accuracy(
    model: TinyDecoder, lab: InductionLabConfig
) -> list[float]:
    """The second copy's next-token accuracy (:func:`copy_accuracy`) on
    the fixed rows of copies ``factor * n``, for each of
    ``lab.length_factors``."""
    model.eval()
    scores = []
    for factor in lab.length_factors:
        ids = evaluation_rows(lab, factor)
        scores.append(copy_accuracy(model(ids), ids, factor * lab.n))
    return scores


def _lab_job(
    job: tuple[DecoderConfig, InductionLabConfig, int],
) -> tuple[InductionRun, list[float]]:
    """Train one model and test it at every length (a worker's job)."""
    model_config, lab, seed = job
    run = train_induction_model(model_config, lab, seed)
    return run, length_accuracy(run.model, lab)


def run_induction_lab(
    model_configs: Sequence[DecoderConfig],
    lab: InductionLabConfig,
    *,
    seeds: Sequence[Sequence[int]] | None = None,
    workers: int = 1,
    executor: Executor | None = None,
) -> list[list[tuple[InductionRun, list[float]]]]:
    """Train a model for every config and seed and test it at every length
    of ``lab`` (:func:`length_accuracy`): ``result[c][k]`` is ``(run,
    accuracies)`` of ``model_configs[c]`` with its ``k``-th seed.

    ``seeds`` gives each config its seeds (default: ``lab.seeds`` for
    every config). ``workers`` processes train side by side
    (``tinyformer.tools.jobs.run_jobs``), or ``executor`` runs the
    jobs; the numbers are the same either way, since each job seeds its
    own weights and rows.

    Raises:
        ValueError: if ``seeds`` does not give one sequence per config.
    """
    seeds = (
        [lab.seeds] * len(model_configs) if seeds is None else list(seeds)
    )
    if len(seeds) != len(model_configs):
        raise ValueError(
            f"seeds gives {len(seeds)} sequences of seeds for "
            f"{len(model_configs)} model configs"
        )
    jobs = [
        (config, lab, seed)
        for config, config_seeds in zip(model_configs, seeds, strict=True)
        for seed in config_seeds
    ]
    done = iter(run_jobs(_lab_job, jobs, workers, executor=executor))
    return [[next(done) for _ in config_seeds] for config_seeds in seeds]
