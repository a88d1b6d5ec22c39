"""Charts of chapter 1, "Attention from first principles": the softmax at several temperatures, why scores are scaled, and masks.

The conventions are :mod:`tinyformer.plotting.style`'s."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    _figure,
    _heatmap,
    _numpy,
)

__all__ = [
    "plot_masks",
    "plot_scaling",
    "plot_softmax_temperatures",
]


def plot_softmax_temperatures(
    scores: Tensor, scales: Sequence[float], labels: Sequence[str]
) -> Figure:
    """Bar charts of ``softmax(scale * scores)`` for several scales: larger
    scores make a sharper distribution.

    Args:
        scores: ``(S,)`` one row of scores.
        scales: the factors the scores are multiplied by, one panel each.
        labels: the S key labels.
    """
    values = _numpy(scores)
    fig = _figure(COLUMN_WIDTH, 2.6)
    axes = np.atleast_1d(fig.subplots(1, len(scales), sharey=True))
    for n, (ax, scale) in enumerate(zip(axes, scales, strict=True)):
        weights = torch.softmax(
            torch.as_tensor(values * scale), dim=0
        ).numpy()
        ax.bar(
            range(len(values)),
            weights,
            color=LINE_COLORS[n % 6],
            edgecolor="black",
        )
        ax.set_xticks(range(len(values)), labels, rotation=45)
        ax.set_title(f"scores × {scale:g}")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("softmax weight")
    return fig


def plot_scaling(stats: dict[str, list[float]], num_keys: int) -> Figure:
    """Two panels against the key width d_k: the spread of raw dot products,
    and the entropy of the softmax.

    Args:
        stats: output of :func:`tinyformer.labs.tasks.scaling_statistics`.
        num_keys: keys per query S; the entropy ceiling is ``ln(S)``.
    """
    d_k = np.asarray(stats["d_k"])
    fig = _figure(COLUMN_WIDTH, 3.2)
    left, right = fig.subplots(1, 2)
    left.plot(
        d_k, stats["std_raw"], "o", color=LINE_COLORS[0], label="measured"
    )
    left.plot(
        d_k,
        np.sqrt(d_k),
        linestyle="--",
        color=LINE_COLORS[1],
        label=r"$\sqrt{d_k}$",
    )
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("key width $d_k$")
    left.set_ylabel(r"std of $q \cdot k$")
    left.legend(frameon=False)
    right.plot(
        d_k,
        stats["entropy_raw"],
        "o-",
        color=LINE_COLORS[1],
        label=r"softmax($q \cdot k$)",
    )
    right.plot(
        d_k,
        stats["entropy_scaled"],
        "s--",
        color=LINE_COLORS[0],
        label=r"softmax($q \cdot k / \sqrt{d_k}$)",
    )
    right.axhline(
        np.log(num_keys), color="0.4", linewidth=0.8, linestyle=":"
    )
    right.annotate(
        f"ln {num_keys}: uniform",
        (d_k[0], np.log(num_keys)),
        xytext=(0, -12),
        textcoords="offset points",
    )
    right.set_xscale("log", base=2)
    right.set_xlabel("key width $d_k$")
    right.set_ylabel("entropy of the weights (nats)")
    right.set_ylim(0, np.log(num_keys) * 1.1)
    right.legend(frameon=False, fontsize="small", loc="lower left")
    return fig


def plot_masks(
    panels: Sequence[tuple[str, Tensor, Sequence[str], Sequence[str]]],
) -> Figure:
    """Masks or weights as grids, one panel each, with rows (queries) and
    columns (keys) labelled.

    Boolean panels show True (may attend) dark with a tick and False blank;
    float panels are heatmaps of weights in [0, 1] annotated with their
    values, sharing one labelled colour bar.

    Args:
        panels: ``(title, values, row_labels, column_labels)`` per panel;
            ``values`` is ``(L, S)``.
    """
    # At most two panels per row, so that the figure fits the text column
    # with its numbers readable; a lone panel gets room for its colour bar.
    per_row = min(len(panels), 2)
    num_rows = -(-len(panels) // per_row)
    fig = _figure(
        COLUMN_WIDTH * per_row / 2 + (0.9 if per_row == 1 else 0.0),
        3.4 * num_rows + 0.3,
    )
    axes = np.atleast_1d(
        fig.subplots(num_rows, per_row, squeeze=False)
    ).ravel()
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    image, weight_axes = None, []
    for n, (ax, (title, values, rows, columns)) in enumerate(
        zip(axes, panels, strict=False)
    ):
        if values.dtype == torch.bool:
            grid = values.to(torch.float64).numpy()
            ax.imshow(grid, cmap="Greys", vmin=-0.25, vmax=1.4)
            for (i, j), allowed in np.ndenumerate(grid):
                ax.text(
                    j,
                    i,
                    "✓" if allowed else "",
                    ha="center",
                    va="center",
                    color="white",
                )
            ax.set_xticks(range(len(columns)), columns, rotation=45)
            ax.set_yticks(range(len(rows)), rows)
        else:
            image = _heatmap(
                ax,
                _numpy(values),
                rows,
                columns,
                vmin=0.0,
                vmax=1.0,
                fmt=".2f",
            )
            ax.tick_params(axis="x", labelrotation=45)
            weight_axes.append(ax)
        ax.set_title(title, fontsize="medium")
        if n % per_row == 0:
            ax.set_ylabel("query")
        elif list(rows) == list(panels[n - 1][2]):
            # The same queries as the panel to the left: its row labels
            # serve both, and the cells keep room for their numbers.
            ax.tick_params(axis="y", labelleft=False)
        if n >= len(panels) - per_row:
            ax.set_xlabel("key")
    if image is not None:
        fig.colorbar(
            image,
            ax=weight_axes,
            label="attention weight",
            shrink=0.8,
            fraction=0.05,
            aspect=25,
        )
    return fig
