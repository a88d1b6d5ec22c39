"""Charts of chapter 3, "Multi-head attention" (also used by chapters 4 and 8): the heads' attention maps and peak memory against length.

The conventions are :mod:`tinyformer.plotting.style`'s."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.plotting.style import (
    COLUMN_WIDTH,
    LINE_COLORS,
    LINE_STYLES,
    _figure,
    _heatmap,
    _numpy,
)

__all__ = [
    "plot_attention_heads",
    "plot_peak_memory",
]


def plot_attention_heads(
    weights: Tensor,
    tokens: Sequence[str],
    *,
    key_tokens: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per head: row i is the distribution of query i over the
    keys.

    Args:
        weights: ``(H, L, S)`` per-head weights of one sequence
            (probabilities).
        tokens: the L query labels.
        key_tokens: the S key labels; defaults to ``tokens``
            (self-attention).
        titles: one title per panel; defaults to "head 0", "head 1", ...
    """
    values = _numpy(weights)
    num_heads = values.shape[0]
    key_tokens = tokens if key_tokens is None else key_tokens
    # At most two panels per row, so that each fits the text column with its
    # numbers readable; the token labels are written once per row and once
    # per column of panels.
    columns = min(num_heads, 2)
    rows = -(-num_heads // columns)
    fig = _figure(COLUMN_WIDTH if columns == 2 else 4.2, 2.9 * rows + 0.5)
    axes = np.atleast_1d(
        fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
    ).ravel()
    image = None
    for h, ax in enumerate(axes):
        if h >= num_heads:
            ax.set_axis_off()
            continue
        image = _heatmap(
            ax, values[h], tokens, key_tokens, vmin=0.0, vmax=1.0, fmt=".2f"
        )
        ax.set_title(titles[h] if titles is not None else f"head {h}")
        ax.tick_params(axis="x", labelrotation=45)
        ax.label_outer()
    fig.colorbar(
        image, ax=axes.tolist(), label="attention weight", shrink=0.6
    )
    return fig


def plot_peak_memory(
    lengths: Sequence[int],
    peaks: dict[str, Sequence[float]],
    *,
    reference: Sequence[float] | None = None,
    reference_label: str = "reference",
) -> Figure:
    """Measured peak memory against sequence length, log-log, one line per
    measured path, with an optional reference line (dashed, grey).

    Args:
        lengths: the sequence lengths L, in tokens.
        peaks: path name to its peak memory at each length, in bytes.
        reference: bytes at each length of a reference curve, such as the
            size of an ``(N, H, L, L)`` float32 tensor, if given.
        reference_label: the legend entry of the reference line.

    Raises:
        ValueError: if a series in ``peaks`` or ``reference`` does not
            have one value per length.
    """
    x = np.asarray(lengths, dtype=np.float64)
    series = dict(peaks)
    if reference is not None:
        series[reference_label] = reference
    for name, values in series.items():
        if len(values) != len(x):
            raise ValueError(
                f"{name!r} has {len(values)} values for {len(x)} lengths"
            )
    mib = 2.0**20
    fig = _figure(COLUMN_WIDTH, 3.6)
    ax = fig.add_subplot()
    for n, (name, values) in enumerate(peaks.items()):
        ax.plot(
            x,
            np.asarray(values, dtype=np.float64) / mib,
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            marker="os^v"[n % 4],
            label=name,
        )
    if reference is not None:
        ax.plot(
            x,
            np.asarray(reference, dtype=np.float64) / mib,
            color="0.4",
            linestyle=(0, (1, 1)),
            linewidth=1.2,
            label=reference_label,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(x, [str(int(v)) for v in x])
    ax.minorticks_off()
    ax.set_xlabel("sequence length L (tokens)")
    ax.set_ylabel("peak memory (MiB)")
    ax.legend(frameon=False, fontsize="small", loc="upper left")
    return fig
