"""Figures of chapter 6: next-token training, the masks and biases under a
key-value cache, and what the cache saves. Model code never imports this
module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.language import LanguageModelRun
from tinyformer.plotting.charts import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    SEQUENTIAL_CMAP,
    _figure,
    _numpy,
)

__all__ = ["plot_cache_masks", "plot_decoding_cost", "plot_lm_training"]


def plot_lm_training(runs: dict[str, LanguageModelRun]) -> Figure:
    """Training loss per step, one line per run, with the uniform model's
    loss ``log V`` and each run's held-out loss marked.

    Args:
        runs: label to :class:`~tinyformer.language.LanguageModelRun`.
    """
    fig = _figure(COLUMN_WIDTH, 3.2)
    ax = fig.subplots()
    uniform = None
    for n, (label, run) in enumerate(runs.items()):
        color = LINE_COLORS[n % 6]
        ax.plot(
            run.steps,
            run.train_loss,
            color=color,
            linestyle=LINE_STYLES[n % 6],
            label=f"{label} (held-out {run.val_loss:.2f})",
        )
        ax.plot(run.steps[-1], run.val_loss, "o", color=color)
        uniform = run.uniform_loss
    if uniform is not None:
        ax.axhline(uniform, color="0.4", linewidth=0.8, linestyle=":")
        ax.annotate(
            "uniform guess, log V",
            (0, uniform),
            xytext=(4, -12),
            textcoords="offset points",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats per character)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize="small", loc="lower left")
    return fig


def _grid(
    ax,
    values: np.ndarray,
    title: str,
    *,
    row_offset: int,
    annotate: bool,
) -> object:
    """One ``(L, S)`` panel: blocked cells blank with a cross, allowed
    cells coloured by value (or dark when every value is 0)."""
    blocked = ~np.isfinite(values)
    shown = np.where(blocked, np.nan, values)
    finite = values[~blocked]
    vmin = float(finite.min()) if finite.size else 0.0
    image = ax.imshow(
        shown,
        cmap=SEQUENTIAL_CMAP,
        vmin=min(vmin, -1e-9),
        vmax=0.0,
        aspect="equal",
    )
    for (i, j), value in np.ndenumerate(values):
        if blocked[i, j]:
            ax.text(j, i, "×", ha="center", va="center", color="0.55")
        elif annotate:
            ink = "white" if value < 0.55 * vmin else "black"
            ax.text(
                j,
                i,
                f"{value:.2f}",
                ha="center",
                va="center",
                color=ink,
                fontsize="x-small",
            )
    rows, columns = values.shape
    ax.set_xticks(range(columns))
    ax.set_yticks(range(rows), [str(row_offset + i) for i in range(rows)])
    ax.set_xlabel("key position")
    ax.set_title(title, fontsize="medium")
    return image


def plot_cache_masks(
    top_left: Tensor, bottom_right: Tensor, alibi: Tensor
) -> Figure:
    """Three ``(L, S)`` panels for ``L`` new queries against ``S`` keys,
    the first ``S - L`` of them cached: the causal rule aligned at the top
    left (wrong under a cache), at the bottom right (right), and one ALiBi
    head's bias for the block (``-inf`` where blocked).

    Args:
        top_left: bool ``(L, S)``, True = may attend.
        bottom_right: bool ``(L, S)``, True = may attend.
        alibi: float ``(L, S)`` bias with ``-inf`` for blocked keys.
    """
    seq_len, seq_len_k = bottom_right.shape
    offset = seq_len_k - seq_len
    fig = _figure(COLUMN_WIDTH, 3.0)
    axes = fig.subplots(3, 1)
    panels = (
        ("top-left: query i sees keys j ≤ i (wrong)", top_left, False),
        ("bottom-right: query i sees keys j ≤ P + i", bottom_right, False),
        ("ALiBi bias of one head for the same block", alibi, True),
    )
    image = None
    for ax, (title, values, annotate) in zip(axes, panels, strict=True):
        grid = _numpy(values)
        if values.dtype.is_floating_point:
            image = _grid(
                ax, grid, title, row_offset=offset, annotate=annotate
            )
        else:
            _grid(
                ax,
                np.where(grid > 0, 0.0, -np.inf),
                title,
                row_offset=offset,
                annotate=False,
            )
        ax.set_ylabel("query\nposition")
    for ax in axes[:-1]:
        ax.set_xlabel("")
    if image is not None:
        fig.colorbar(image, ax=axes[-1], label="bias", shrink=0.9)
    return fig


def plot_decoding_cost(
    lengths: Sequence[int],
    series: dict[str, Sequence[float]],
    *,
    ylabel: str,
) -> Figure:
    """One line per way of decoding: a cost per generated token against the
    length of the sequence so far, on log-log axes.

    Args:
        lengths: the sequence lengths (tokens).
        series: label to the cost at each length.
        ylabel: what the cost is, with its unit.
    """
    fig = _figure(COLUMN_WIDTH, 3.2)
    ax = fig.subplots()
    for n, (label, values) in enumerate(series.items()):
        ax.plot(
            lengths,
            values,
            marker="o",
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            label=label,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens so far (prompt + generated)")
    ax.set_ylabel(ylabel)
    ax.legend(frameon=False, fontsize="small")
    return fig
