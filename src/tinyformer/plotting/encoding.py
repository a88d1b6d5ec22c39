"""Charts of the sinusoidal encoding beyond the heatmap: columns as waves,
near-collisions, the offset band.

Same conventions as :mod:`tinyformer.plotting.style`: opaque white figures,
colour-blind-safe colours paired with line styles, nothing registered with
pyplot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.labs.tasks import RelativeBand, WordOrderResult
from tinyformer.models.positional import pair_wavelengths
from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    SEQUENTIAL_CMAP,
    _figure,
    _heatmap,
    _numpy,
)

__all__ = [
    "plot_encoding",
    "plot_encoding_columns",
    "plot_middle_word_attention",
    "plot_near_collision",
    "plot_offset_similarity",
    "plot_permutation",
    "plot_relative_band",
    "plot_wavelengths",
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


def plot_encoding(table: Tensor, *, title: str | None = None) -> Figure:
    """Heatmap of a positional-encoding table: position down, encoding
    dimension across.

    Args:
        table: ``(L, E)`` encoding, values in [-1, 1].
        title: optional axes title.
    """
    values = _numpy(table)
    fig = _figure(COLUMN_WIDTH, 3.6)
    ax = fig.add_subplot()
    image = ax.imshow(
        values,
        aspect="auto",
        cmap=SEQUENTIAL_CMAP,
        vmin=-1.0,
        vmax=1.0,
        interpolation="nearest",
    )
    ax.set_xlabel("encoding dimension (column 2i: sin, 2i + 1: cos)")
    ax.set_ylabel("position (token index)")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, label="value")
    return fig


def plot_wavelengths(
    d_model: int, bases: Sequence[float] = (100.0, 10000.0, 1000000.0)
) -> Figure:
    """Wavelength of each sin/cos pair, in tokens, on a log scale, one line
    per base.

    Args:
        d_model: encoding width E.
        bases: the wavelength constants to compare.
    """
    fig = _figure(6.4, 3.6)
    ax = fig.add_subplot()
    for n, base in enumerate(bases):
        wavelength = pair_wavelengths(d_model, base=base).numpy()
        ax.plot(
            np.arange(len(wavelength)),
            wavelength,
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            label=f"base = {base:g}",
        )
    ax.axhline(2 * np.pi, color="0.4", linewidth=0.8)
    # Just above the line at its right end, where every curve is far higher:
    # clear of the x-axis.
    ax.annotate(
        "2π: the first pair, whatever the base",
        (1, 2 * np.pi),
        xycoords=("axes fraction", "data"),
        xytext=(-2, 3),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize="small",
        color="0.3",
    )
    ax.set_yscale("log")
    ax.set_xlabel("pair index i (columns 2i and 2i + 1)")
    ax.set_ylabel("wavelength (tokens)")
    ax.legend(frameon=False)
    return fig


def plot_offset_similarity(
    table: Tensor, starts: Sequence[int], max_offset: int
) -> Figure:
    """Dot product of the encodings of positions p and p + k, against the
    offset k, for several p.

    Args:
        table: ``(L, E)`` encoding with ``L > max(starts) + max_offset``.
        starts: the positions p, one line each.
        max_offset: the largest offset k plotted.
    """
    values = _numpy(table)
    offsets = np.arange(max_offset + 1)
    fig = _figure(6.4, 3.4)
    ax = fig.add_subplot()
    for n, start in enumerate(starts):
        similarity = values[start + offsets] @ values[start]
        ax.plot(
            offsets,
            similarity,
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            label=f"p = {start}",
        )
    ax.set_xlabel("offset k (tokens)")
    ax.set_ylabel("PE[p] · PE[p + k]")
    ax.legend(frameon=False, title="start position")
    return fig


def plot_permutation(
    output: Tensor,
    permuted_output: Tensor,
    tokens: Sequence[str],
    permuted_tokens: Sequence[str],
) -> Figure:
    """Attention outputs of a sequence and of a permutation of it, side by
    side, rows labelled by token.

    Args:
        output: ``(L, E)`` output for ``tokens``.
        permuted_output: ``(L, E)`` output for ``permuted_tokens``.
        tokens, permuted_tokens: the row labels.
    """
    a, b = _numpy(output), _numpy(permuted_output)
    low, high = min(a.min(), b.min()), max(a.max(), b.max())
    fig = _figure(COLUMN_WIDTH, 0.45 * len(tokens) + 1.6)
    axes = fig.subplots(1, 2)
    columns = [str(j) for j in range(a.shape[1])]
    for ax, values, labels, title in (
        (axes[0], a, tokens, "original order"),
        (axes[1], b, permuted_tokens, "permuted order"),
    ):
        image = _heatmap(
            ax, values, labels, columns, vmin=low, vmax=high, fmt=None
        )
        ax.set_title(title)
        ax.set_xlabel("output feature")
    fig.colorbar(image, ax=axes, label="output value", shrink=0.8)
    return fig


def plot_middle_word_attention(
    results: Sequence[WordOrderResult], query_word: str
) -> Figure:
    """Bar chart of the attention the middle word pays to each word, per
    sentence, with and without the encoding.

    Args:
        results: output of :func:`tinyformer.labs.tasks.middle_word_attention`.
        query_word: the middle word, for the title.
    """
    words = [w for w in results[0].weights if w != query_word]
    fig = _figure(COLUMN_WIDTH, 3.2)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, with_encoding in zip(axes, (False, True), strict=True):
        chosen = [r for r in results if r.with_encoding == with_encoding]
        width = 0.8 / len(chosen)
        for n, result in enumerate(chosen):
            x = np.arange(len(words)) + (n - (len(chosen) - 1) / 2) * width
            ax.bar(
                x,
                [result.weights[w] for w in words],
                width,
                color=LINE_COLORS[n],
                hatch=("", "//")[n % 2],
                edgecolor="black",
                label=" ".join(result.sentence),
            )
        ax.set_xticks(range(len(words)), [f'to "{w}"' for w in words])
        ax.set_title(
            "with the encoding" if with_encoding else "without the encoding"
        )
    axes[0].set_ylabel(f'weight from "{query_word}"')
    # Below both panels, where no bar can reach it.
    fig.legend(
        *axes[1].get_legend_handles_labels(),
        frameon=False,
        fontsize="small",
        loc="outside lower center",
    )
    return fig
