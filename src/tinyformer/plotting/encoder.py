"""Charts of chapter 4, "A miniature Transformer from scratch": training curves and what the trained heads attend to.

The conventions are :mod:`tinyformer.plotting.style`'s."""

from __future__ import annotations

import textwrap

import numpy as np
import torch
from matplotlib.figure import Figure

from tinyformer.labs.training import HeadStatistics, TrainingRun
from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    _figure,
    _heatmap,
    _numpy,
)

__all__ = [
    "plot_head_statistics",
    "plot_training_curves",
]


def plot_training_curves(
    runs: dict[str, TrainingRun], *, chance: float | None = None
) -> Figure:
    """Training loss (log scale) and test accuracy per epoch, one line per
    run.

    Args:
        runs: label to :class:`~tinyformer.labs.training.TrainingRun`.
        chance: if given, a dotted line at this accuracy (the best an
            order-blind model can do).
    """
    fig = _figure(COLUMN_WIDTH, 3.2)
    loss_ax, acc_ax = fig.subplots(1, 2)
    for n, (label, run) in enumerate(runs.items()):
        epochs = np.arange(1, len(run.train_loss) + 1)
        style = {
            "color": LINE_COLORS[n % 6],
            "linestyle": LINE_STYLES[n % 6],
            "label": label,
        }
        loss_ax.plot(epochs, run.train_loss, **style)
        acc_ax.plot(epochs, run.test_accuracy, **style)
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("training loss (nats)")
    if chance is not None:
        acc_ax.axhline(chance, color="0.4", linewidth=0.8, linestyle=":")
        acc_ax.annotate(
            "order-blind ceiling",
            (1, chance),
            xytext=(0, 4),
            textcoords="offset points",
        )
    acc_ax.set_ylim(0, 1.05)
    acc_ax.set_xlabel("epoch")
    acc_ax.set_ylabel("test accuracy")
    acc_ax.legend(frameon=False, fontsize="small", loc="lower right")
    return fig


def plot_head_statistics(stats: dict[str, HeadStatistics]) -> Figure:
    """Heatmaps of where each head looks: one row per head, one column per
    statistic, one panel per model.

    Args:
        stats: label to :class:`~tinyformer.labs.training.HeadStatistics`.
    """
    columns = ["previous", "1st item", "2nd item", "verb"]
    # Two panels per row at most (the colour bar takes a free slot, or goes
    # beside the last row), so that the figure fits the text column with its
    # numbers readable.
    per_row = min(len(stats), 2)
    rows = -(-len(stats) // per_row)
    fig = _figure(COLUMN_WIDTH, 4.3 * rows)
    axes = np.atleast_1d(
        fig.subplots(rows, per_row, squeeze=False, sharey=True)
    ).ravel()
    for ax in axes[len(stats) :]:
        ax.set_axis_off()
    image = None
    for ax, (label, s) in zip(axes, stats.items(), strict=False):
        num_layers, num_heads = s.previous.shape
        values = torch.stack(
            (s.previous, s.first_item, s.second_item, s.verb), dim=-1
        ).reshape(-1, 4)
        rows = [
            f"layer {layer}, head {head}"
            for layer in range(num_layers)
            for head in range(num_heads)
        ]
        image = _heatmap(
            ax,
            _numpy(values),
            rows,
            columns,
            vmin=0.0,
            vmax=1.0,
            fmt=".2f",
            aspect="auto",
        )
        plt_labels = ax.get_xticklabels()
        ax.set_xticks(
            range(len(columns)),
            plt_labels,
            rotation=45,
            ha="right",
            rotation_mode="anchor",
        )
        ax.set_title(textwrap.fill(label, 24), fontsize="medium")
    fig.colorbar(
        image,
        ax=axes[: len(stats)].tolist(),
        label="share of attention",
        shrink=0.6,
    )
    return fig
