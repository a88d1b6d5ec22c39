"""Charts of the sinusoidal encoding beyond the heatmap: columns as waves,
near-collisions, the offset band.

Same conventions as :mod:`tinyformer.plotting.charts`: opaque white figures,
colour-blind-safe colours paired with line styles, nothing registered with
pyplot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.labs.tasks import RelativeBand
from tinyformer.plotting.charts import (
    LINE_COLORS,
    LINE_STYLES,
    SEQUENTIAL_CMAP,
    _figure,
    _numpy,
)

__all__ = [
    "plot_encoding_columns",
    "plot_near_collision",
    "plot_relative_band",
]


def plot_encoding_columns(table: Tensor, columns: Sequence[int]) -> Figure:
    """A few columns of an encoding table drawn as curves against position,
    one panel each.

    Args:
        table: ``(L, E)`` encoding table.
        columns: the column indices to draw (each ``< E``).

    Raises:
        ValueError: if a column index is out of range, naming it.
    """
    values = _numpy(table)
    for column in columns:
        if not 0 <= column < values.shape[1]:
            raise ValueError(
                f"column {column} is outside the table's {values.shape[1]} columns"
            )
    positions = np.arange(values.shape[0])
    fig = _figure(6.4, 1.0 * len(columns) + 0.7)
    # room between one panel's "-1" tick label and the next one's "1"
    fig.get_layout_engine().set(hspace=0.12)
    axes = fig.subplots(len(columns), 1, sharex=True, squeeze=False)[:, 0]
    for n, (ax, column) in enumerate(zip(axes, columns, strict=True)):
        kind = "sin" if column % 2 == 0 else "cos"
        ax.plot(
            positions,
            values[:, column],
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
        )
        ax.set_ylim(-1.15, 1.15)
        ax.set_yticks([-1, 0, 1])
        ax.set_ylabel(
            f"col {column}\n({kind}, i={column // 2})",
            fontsize="small",
            rotation=0,
            ha="right",
            va="center",
        )
    axes[-1].set_xlabel("position (token index)")
    return fig


def plot_near_collision(
    table: Tensor, positions: tuple[int, int]
) -> Figure:
    """Two positions on the first pair's unit circle (left) and their
    distance pair by pair (right).

    Args:
        table: ``(L, E)`` encoding table with ``L > max(positions)`` and
            even ``E``.
        positions: the two positions ``(p, q)`` to compare.
    """
    values = _numpy(table)
    p, q = positions
    fig = _figure(7.0, 3.2)
    circle_ax, bar_ax = fig.subplots(1, 2, width_ratios=(1, 1.6))
    angle = np.linspace(0, 2 * np.pi, 400)
    circle_ax.plot(np.cos(angle), np.sin(angle), color="0.6", linewidth=1)
    for n, position in enumerate((p, q)):
        sin, cos = values[position, 0], values[position, 1]
        circle_ax.plot(
            cos,
            sin,
            marker="o" if n == 0 else "x",
            markersize=10 - 3 * n,
            color=LINE_COLORS[n],
            linestyle="none",
            label=f"pos {position}",
        )
    circle_ax.set_aspect("equal")
    circle_ax.set_xlabel("cos(pos)  (column 1)")
    circle_ax.set_ylabel("sin(pos)  (column 0)")
    circle_ax.set_title("first pair only")
    circle_ax.legend(frameon=False, fontsize="small", loc="center")
    # (E/2,)
    gaps = np.hypot(
        values[p, 0::2] - values[q, 0::2], values[p, 1::2] - values[q, 1::2]
    )
    bar_ax.bar(np.arange(len(gaps)), gaps, color=LINE_COLORS[0], width=0.8)
    bar_ax.set_yscale("log")
    bar_ax.set_xlabel("pair index i")
    bar_ax.set_ylabel(f"distance, pos {p} vs {q}")
    bar_ax.set_title("every pair")
    return fig


def plot_relative_band(band: RelativeBand) -> Figure:
    """The rotation head's weights, encoding-only input (left) and with
    words added (right).

    Args:
        band: the result of
            :func:`tinyformer.labs.tasks.relative_offset_attention`.
    """
    fig = _figure(7.0, 3.5)
    axes = fig.subplots(1, 2)
    image = None
    for ax, weights, title in (
        (axes[0], band.weights, "encoding only"),
        (axes[1], band.weights_words, "encoding + random words"),
    ):
        image = ax.imshow(
            _numpy(weights),
            cmap=SEQUENTIAL_CMAP,
            vmin=0.0,
            vmax=1.0,
            interpolation="nearest",
        )
        ax.set_title(title)
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position p")
    fig.colorbar(
        image, ax=axes.tolist(), label="attention weight", shrink=0.8
    )
    return fig
