"""Figures of the chapter "Long context": accuracy against length for the
causal lab and the context extension, the speeds each rotary scaling rule
gives the pairs, and the masks of a sliding window with sinks. Model code
never imports this module."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.models.decoder import sliding_window_mask
from tinyformer.models.positional import RopeScaling, rotary_frequencies
from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    _figure,
    _numpy,
    _plot_seeds,
)

__all__ = ["plot_length_panels", "plot_rope_scaling", "plot_window_masks"]


def plot_length_panels(
    lengths: Sequence[int],
    panels: dict[str, dict[str, Tensor]],
    *,
    train_len: int,
    ceilings: dict[str, Sequence[float]] | None = None,
    marks: dict[str, int] | None = None,
) -> Figure:
    """Accuracy against test length, one panel per entry of ``panels`` side
    by side; in each, one line per scheme (the mean over seeds) with every
    seed as a ring.

    Args:
        lengths: the test lengths in tokens (a log2 axis).
        panels: panel title to ``{line label: (num_seeds, num_lengths)
            accuracies}``; the labels and their styles are shared.
        train_len: L_train, a dashed vertical line in every panel.
        ceilings: panel title to the order-blind ceiling at each length
            (dotted), where it applies.
        marks: panel title to a second length to mark (dotted vertical),
            such as the fine-tune's longest length.
    """
    x = np.asarray(lengths, dtype=np.float64)
    fig = _figure(COLUMN_WIDTH, 3.2)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    labels: list[str] = []
    for ax, (title, lines) in zip(axes, panels.items(), strict=True):
        for label in lines:
            if label not in labels:
                labels.append(label)
        for label, values in lines.items():
            _plot_seeds(
                ax,
                x,
                values,
                n=labels.index(label),
                count=len(lines),
                label=label,
                markersize=4,
            )
        if ceilings and title in ceilings:
            ax.plot(
                x,
                list(ceilings[title]),
                color="black",
                linestyle=":",
                linewidth=1.2,
                label="order-blind ceiling",
            )
        ax.axvline(train_len, color="0.4", linewidth=0.8, linestyle="--")
        if marks and title in marks:
            ax.axvline(
                marks[title], color="0.4", linewidth=0.8, linestyle=":"
            )
        ax.set_title(title, fontsize="medium")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(int(v)) for v in x])
        ax.minorticks_off()
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("test length (tokens)")
    axes[0].set_ylabel("accuracy")
    handles, names = [], []
    for ax in axes:
        for handle, name in zip(
            *ax.get_legend_handles_labels(), strict=True
        ):
            if name not in names:
                handles.append(handle)
                names.append(name)
    fig.legend(
        handles,
        names,
        frameon=False,
        fontsize="small",
        loc="outside lower center",
        ncols=min(len(names), 4),
    )
    return fig


def plot_rope_scaling(
    head_dim: int,
    scalings: dict[str, RopeScaling],
    *,
    base: float = 10000.0,
    seq_len: int | None = None,
) -> Figure:
    """Each rule's speed of every rotated pair divided by the trained speed
    (:func:`~tinyformer.models.positional.rotary_frequencies`), against the pair
    index; 1 keeps a pair, ``1 / s`` interpolates it.

    Args:
        head_dim: the rotated width D.
        scalings: line label to a rule.
        base: the wavelength constant.
        seq_len: the current length for ``"dynamic"`` rules.
    """
    trained = rotary_frequencies(head_dim, base=base)
    index = np.arange(head_dim // 2)
    fig = _figure(COLUMN_WIDTH, 3.0)
    ax = fig.add_subplot()
    for n, (label, scaling) in enumerate(scalings.items()):
        theta = rotary_frequencies(
            head_dim, base=base, scaling=scaling, seq_len=seq_len
        )
        ax.plot(
            index,
            _numpy(theta / trained),
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            marker="o",
            markersize=3,
            label=label,
        )
    ax.set_yscale("log", base=2)
    ax.set_xlabel("rotated pair i (fast to slow)")
    ax.set_ylabel("speed / trained speed")
    ax.legend(frameon=False, fontsize="small", loc="upper right")
    return fig


def plot_window_masks(
    seq_len: int, window: int, num_sink_tokens: int
) -> Figure:
    """Two ``(L, L)`` panels of which keys each query may see: a sliding
    window of ``window`` keys alone, and the same window with the first
    ``num_sink_tokens`` keys kept as sinks
    (:func:`~tinyformer.models.cache.sliding_window_mask`)."""
    fig = _figure(COLUMN_WIDTH, 3.4)
    axes = fig.subplots(1, 2, sharey=True)
    panels = (
        (
            f"window of {window}",
            sliding_window_mask(seq_len, seq_len, window),
        ),
        (
            f"window of {window} + {num_sink_tokens} sink",
            sliding_window_mask(
                seq_len, seq_len, window, num_sink_tokens=num_sink_tokens
            ),
        ),
    )
    colours = ListedColormap(["#f2f2f2", LINE_COLORS[0]])
    for ax, (title, mask) in zip(axes, panels, strict=True):
        ax.imshow(
            mask.numpy(),
            cmap=colours,
            vmin=0,
            vmax=1,
            interpolation="nearest",
        )
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("key j")
        ticks = list(range(0, seq_len, max(1, seq_len // 8)))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
    axes[0].set_ylabel("query i")
    return fig
