"""Figures of the chapter "What attention learns": the second copy's loss
against training steps for models of one and two layers, and the weights
of a previous-token head and an induction head on one row of repeated
tokens. Model code never imports this module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    SEQUENTIAL_CMAP,
    _figure,
    _numpy,
)

__all__ = ["plot_copy_loss", "plot_head_patterns"]


def plot_copy_loss(
    steps: Sequence[int],
    curves: dict[str, Tensor],
    *,
    chance: float,
    drops: Sequence[int] = (),
) -> Figure:
    """The second copy's loss against training steps: one line per seed,
    one colour and style per model in ``curves``.

    Args:
        steps: the evaluation steps (x axis).
        curves: a label to its losses ``(num_seeds, len(steps))``, nats.
        chance: ``log(V - 1)`` nats, a dotted horizontal line.
        drops: steps to mark with a short tick on the x axis (each seed's
            drop), or none.
    """
    x = np.asarray(steps, dtype=np.float64)
    fig = _figure(COLUMN_WIDTH, 3.0)
    ax = fig.subplots()
    for k, (label, losses) in enumerate(curves.items()):
        color = LINE_COLORS[k % len(LINE_COLORS)]
        for i, seed_losses in enumerate(_numpy(losses)):
            ax.plot(
                x,
                seed_losses,
                color=color,
                linestyle=LINE_STYLES[k % len(LINE_STYLES)],
                linewidth=1.2,
                alpha=0.85,
                label=label if i == 0 else None,
            )
    ax.axhline(
        chance,
        color="black",
        linestyle=":",
        linewidth=1.0,
        label="chance, log(V - 1)",
    )
    if drops:
        ax.plot(
            list(drops),
            [0.0] * len(drops),
            "|",
            color="black",
            markersize=10,
            label="drop below chance / 2",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("loss on the second copy (nats)")
    ax.set_ylim(bottom=-0.1)
    ax.legend(loc="upper right", fontsize="small")
    return fig


def plot_head_patterns(
    patterns: dict[str, Tensor], tokens: Sequence[int], *, n: int
) -> Figure:
    """Attention weights of chosen heads on one row of repeated tokens,
    side by side: row ``t`` is query ``t``'s weights over the keys.

    Args:
        patterns: a panel title to the head's ``(L, L)`` weights.
        tokens: the row's ``L = 2n + 1`` token ids, to label the axes.
        n: tokens in one copy; dashed lines mark where the second copy
            starts.
    """
    fig = _figure(COLUMN_WIDTH, 3.5)
    axes = fig.subplots(1, len(patterns), squeeze=False)[0]
    labels = [str(t) for t in tokens]
    every = max(1, len(labels) // 8)
    ticks = list(range(0, len(labels), every))
    image = None
    for ax, (title, weights) in zip(axes, patterns.items(), strict=True):
        image = ax.imshow(
            _numpy(weights), cmap=SEQUENTIAL_CMAP, vmin=0.0, vmax=1.0
        )
        for line in (ax.axhline, ax.axvline):
            line(n + 0.5, color="white", linewidth=0.8, linestyle="--")
        ax.set_title(title, fontsize="medium")
        ax.set_xticks(ticks, [labels[t] for t in ticks])
        ax.set_yticks(ticks, [labels[t] for t in ticks])
        ax.set_xlabel("key (token)")
        ax.set_ylabel("query (token)")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="weight")
    return fig
