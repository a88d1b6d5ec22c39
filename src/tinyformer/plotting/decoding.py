"""Figures of chapter 6: next-token training, the masks and biases under a
key-value cache, and what the cache saves. Model code never imports this
module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.labs.language import LanguageModelRun
from tinyformer.plotting.style import (
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
        runs: label to :class:`~tinyformer.labs.language.LanguageModelRun`.
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
            (min(run.steps[0] for run in runs.values()), uniform),
            xytext=(0, -14),
            textcoords="offset points",
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats per character)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize="small", loc="lower left")
    return fig


def _block_panel(
    ax, values: np.ndarray, title: str, *, row_offset: int
) -> None:
    """One ``(L, S)`` panel: blocked cells (``-inf``, or False) white with
    a grey cross; allowed cells blue for a mask, or coloured by value and
    annotated for a bias."""
    rows, columns = values.shape
    is_mask = values.dtype == bool
    blocked = ~values if is_mask else ~np.isfinite(values)
    if is_mask:
        shown = np.where(blocked, np.nan, 1.0)
        ax.imshow(
            shown,
            cmap=ListedColormap([LINE_COLORS[0]]),
            aspect="auto",
            vmin=0.0,
            vmax=1.0,
        )
    else:
        finite = values[~blocked]
        low = float(finite.min())
        ax.imshow(
            np.where(blocked, np.nan, values),
            cmap=SEQUENTIAL_CMAP,
            vmin=low,
            vmax=0.0,
            aspect="auto",
        )
    for (i, j), value in np.ndenumerate(values):
        if blocked[i, j]:
            ax.text(j, i, "×", ha="center", va="center", color="0.45")
        elif not is_mask:
            # dark cells (large penalties) get white text
            ink = "white" if value < 0.5 * low else "black"
            ax.text(
                j,
                i,
                f"{value + 0.0:.2f}",  # + 0.0: no "-0.00"
                ha="center",
                va="center",
                color=ink,
                fontsize="small",
            )
    ax.set_xticks(range(columns))
    ax.set_yticks(range(rows), [str(row_offset + i) for i in range(rows)])
    ax.set_xticks(np.arange(-0.5, columns), minor=True)
    ax.set_yticks(np.arange(-0.5, rows), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_ylabel("query")
    ax.set_title(title, fontsize="medium", loc="left")


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
    fig = _figure(COLUMN_WIDTH, 1.0 + 1.25 * seq_len)
    axes = fig.subplots(3, 1, sharex=True)
    panels = (
        (
            "is_causal's rule, top left: query i sees keys j ≤ i (wrong)",
            top_left,
        ),
        (
            f"bottom right: query {offset} + i sees keys j ≤ {offset} + i",
            bottom_right,
        ),
        ("ALiBi bias of head 0 for the same block", alibi),
    )
    for ax, (title, values) in zip(axes, panels, strict=True):
        grid = (
            values.numpy() if values.dtype == torch.bool else _numpy(values)
        )
        _block_panel(ax, grid, title, row_offset=offset)
    axes[-1].set_xlabel(f"key position (0-{offset - 1} cached)")
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
