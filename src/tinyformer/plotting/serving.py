"""Figures of the chapter "Serving attention": tokens per pass of the model
under speculative decoding, measured against Leviathan et al.'s Eq. 1. Model
code never imports this module."""

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
    _numpy,
)

__all__ = ["plot_tokens_per_pass"]


def plot_tokens_per_pass(
    num_draft_tokens: Sequence[int],
    measured: Tensor,
    predicted: dict[str, Sequence[float]],
) -> Figure:
    """Tokens each pass of the model yields against the drafted tokens per
    pass, gamma: the measured mean with its range over seeds, and one
    predicted curve per acceptance rate.

    Args:
        num_draft_tokens: the gammas (x axis).
        measured: ``(num_seeds, len(num_draft_tokens))`` measured tokens
            per pass of the model.
        predicted: a label to its predicted tokens per pass at each gamma
            (Eq. 1 with that draft's acceptance rate).
    """
    x = np.asarray(num_draft_tokens, dtype=np.float64)
    values = _numpy(measured)
    fig = _figure(COLUMN_WIDTH, 3.0)
    ax = fig.subplots()
    mean = values.mean(axis=0)
    ax.errorbar(
        x,
        mean,
        yerr=np.stack(
            (mean - values.min(axis=0), values.max(axis=0) - mean)
        ),
        fmt="o",
        color="black",
        capsize=3,
        label="measured, trained draft (mean, range over seeds)",
    )
    for k, (label, curve) in enumerate(predicted.items()):
        ax.plot(
            x,
            np.asarray(curve, dtype=np.float64),
            color=LINE_COLORS[k % len(LINE_COLORS)],
            linestyle=LINE_STYLES[k % len(LINE_STYLES)],
            linewidth=1.2,
            label=label,
        )
    ax.plot(
        x,
        x + 1,
        color="grey",
        linestyle=":",
        linewidth=1.0,
        label="every draft kept, gamma + 1",
    )
    ax.set_xlabel("drafted tokens per pass, gamma")
    ax.set_ylabel("tokens per pass of the model")
    ax.set_ylim(bottom=0.8)
    ax.legend(loc="upper left", fontsize="small")
    return fig
