"""The look every figure of the book shares, and the helpers the chapters' figure
modules draw with. Each figure function returns a new :class:`matplotlib.figure.Figure`.

Colour maps are perceptually uniform with monotonic lightness (``cividis``,
``viridis``), so the figures read the same with colour-vision deficiency and
in greyscale; backgrounds are opaque white so they stay readable on a dark
page; nothing is registered with pyplot. Model code never imports this package."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

__all__ = ["COLUMN_WIDTH", "LINE_COLORS", "LINE_STYLES", "SEQUENTIAL_CMAP"]

#: Sequential colour map for signed values and weights: readable in
#: greyscale and for colour-blind readers.
SEQUENTIAL_CMAP = "cividis"

#: Line colours (Okabe and Ito, 2008), distinguishable with any common
#: colour-vision deficiency.
LINE_COLORS = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
)

#: Line styles paired with the colours, so lines stay distinct in greyscale.
LINE_STYLES = (
    "-",
    "--",
    ":",
    "-.",
    (0, (5, 1, 1, 1)),
    (0, (1, 1)),
    (0, (3, 1, 1, 1, 1, 1)),
)

#: The widest figure, in inches: the page's text column at desktop width
#: (684 px at figure.dpi = 100). A : wider figure is shown scaled down, and
#: its text with it, below the page's small print.
COLUMN_WIDTH = 6.8


def _figure(width: float, height: float) -> Figure:
    """A white, opaque figure that is not registered with pyplot (nothing
    leaks between cells)."""
    return Figure(
        figsize=(width, height), facecolor="white", layout="constrained"
    )


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return (
        x.detach().cpu().to(torch.float64).numpy()
        if isinstance(x, Tensor)
        else np.asarray(x, dtype=np.float64)
    )


def _heatmap(
    ax,
    values,
    row_labels,
    col_labels,
    *,
    vmin: float,
    vmax: float,
    fmt: str | None,
    aspect="equal",
):
    """Heatmap with labelled rows and columns; each cell is annotated with
    its value unless ``fmt`` is None.

    ``aspect`` is imshow's: ``"equal"`` gives square cells, ``"auto"`` lets
    them fill the panel."""
    image = ax.imshow(
        values, cmap=SEQUENTIAL_CMAP, vmin=vmin, vmax=vmax, aspect=aspect
    )
    ax.set_xticks(range(len(col_labels)), col_labels)
    ax.set_yticks(range(len(row_labels)), row_labels)
    if fmt is None:
        return image
    for (i, j), v in np.ndenumerate(values):
        ax.text(
            j,
            i,
            format(v, fmt),
            ha="center",
            va="center",
            color=_ink_on(image.cmap(image.norm(v))),
        )
    return image


def _ink_on(rgba: Sequence[float]) -> str:
    """Black or white, whichever contrasts more with the colour ``rgba``
    (relative luminance and contrast ratio as in WCAG 2.1)."""
    linear = [
        c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
        for c in rgba[:3]
    ]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    # Contrast with black, (L + 0.05) / 0.05, beats contrast with white,
    # 1.05 / (L + 0.05), exactly when L > sqrt(1.05 * 0.05) - 0.05.
    return "black" if luminance > (1.05 * 0.05) ** 0.5 - 0.05 else "white"


def _plot_seeds(
    ax,
    x: np.ndarray,
    values: Tensor,
    *,
    n: int,
    count: int,
    label: str,
    markersize: float | None = None,
) -> None:
    """Line ``n`` of ``count`` on ``ax``: the mean of ``values``
    ``(num_seeds, len(x))`` over seeds, with every seed as a ring; the
    lines are shifted apart on a log x axis so that the rings do not hide
    each other."""
    per_seed = _numpy(values)
    color = LINE_COLORS[n % len(LINE_COLORS)]
    shift = 1.0 + 0.03 * (n - (count - 1) / 2)
    size = {} if markersize is None else {"markersize": markersize}
    ax.plot(
        x * shift,
        per_seed.mean(axis=0),
        color=color,
        linestyle=LINE_STYLES[n % len(LINE_STYLES)],
        marker="o",
        label=label,
        **size,
    )
    for seed_values in per_seed:
        ax.plot(
            x * shift,
            seed_values,
            "o",
            color=color,
            markersize=3,
            alpha=0.6,
            markerfacecolor="none",
        )
