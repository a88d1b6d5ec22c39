"""Charts of chapter 5, "Position beyond sinusoids": the rotary rotation, ALiBi's biases and the length-extrapolation lab.

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
    SEQUENTIAL_CMAP,
    _figure,
    _numpy,
    _plot_seeds,
)

__all__ = [
    "plot_alibi_bias",
    "plot_extrapolation",
    "plot_rotary_rotation",
]


def plot_rotary_rotation(
    pairs: Sequence[tuple[str, Tensor]],
    offsets: Tensor,
    scores: Sequence[tuple[str, Tensor]],
) -> Figure:
    """Left: one feature pair of a rotated vector, position by position, in
    its plane. Right: query-key scores against the offset, one line per
    query position.

    Args:
        pairs: ``(label, points)`` with ``points`` of shape ``(L, 2)``, the
            pair at positions ``0 .. L-1``.
        offsets: ``(K,)`` offsets ``n - m`` in tokens.
        scores: ``(label, values)`` with ``values`` of shape ``(K,)``, the
            score at each offset.
    """
    fig = _figure(COLUMN_WIDTH, 3.6)
    plane, score_ax = fig.subplots(
        1, 2, gridspec_kw={"width_ratios": [1, 1.3]}
    )
    angle = np.linspace(0, 2 * np.pi, 200)
    for n, (label, points) in enumerate(pairs):
        xy = _numpy(points)
        radius = np.hypot(*xy[0])
        plane.plot(
            radius * np.cos(angle),
            radius * np.sin(angle),
            color="0.85",
            linewidth=0.8,
        )
        color = LINE_COLORS[n % 6]
        plane.plot(
            xy[:, 0],
            xy[:, 1],
            "o",
            color=color,
            markersize=3.5,
            label=label,
        )
        num_arrows = min(4, len(xy))
        step = np.hypot(*(xy[1] - xy[0])) if len(xy) > 1 else radius
        for pos in range(num_arrows):
            plane.annotate(
                "",
                xy[pos],
                (0, 0),
                arrowprops={
                    "arrowstyle": "->",
                    "color": color,
                    "linewidth": 1.0,
                },
            )
            # A slow pair's arrowheads nearly touch: number only the first
            # (below its tip) and the last (beside it), not all four.
            if step >= 0.3 * radius:
                offset, ha, va = (3, 3), "left", "bottom"
            elif pos == 0:
                offset, ha, va = (0, -4), "center", "top"
            elif pos == num_arrows - 1:
                offset, ha, va = (5, 0), "left", "center"
            else:
                continue
            plane.annotate(
                str(pos),
                xy[pos],
                xytext=offset,
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize="small",
                color=color,
            )
    plane.set_aspect("equal")
    plane.set_xlabel("first feature of the pair")
    plane.set_ylabel("second feature of the pair")
    plane.legend(
        frameon=False,
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
    )
    k = _numpy(offsets)
    for n, (label, values) in enumerate(scores):
        score_ax.plot(
            k,
            _numpy(values),
            color=LINE_COLORS[n % 6],
            linestyle=LINE_STYLES[n % 6],
            label=label,
        )
    score_ax.set_xlabel("offset $n - m$ (tokens)")
    score_ax.set_ylabel(r"score $q_m \cdot k_n$")
    score_ax.legend(
        frameon=False,
        fontsize="small",
        title="query position $m$",
        title_fontsize="small",
        ncols=len(scores),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
    )
    return fig


def plot_alibi_bias(bias: Tensor, slopes: Tensor) -> Figure:
    """Left: the ``(L, S)`` bias of the head with the steepest slope as a
    heatmap. Right: each head's bias along one query row, against the key
    position.

    Args:
        bias: ``(H, L, S)`` ALiBi bias (``-m_h |i - j|``).
        slopes: ``(H,)`` the slopes ``m_h``.
    """
    values, m = _numpy(bias), _numpy(slopes)
    num_heads, seq_len_q, seq_len_k = values.shape
    fig = _figure(COLUMN_WIDTH, 3.8)
    heat, lines = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    image = heat.imshow(
        values[0], cmap=SEQUENTIAL_CMAP, interpolation="nearest"
    )
    heat.set_xlabel("key position j")
    heat.set_ylabel("query position i")
    heat.set_title(f"head 0, slope {m[0]:g}")
    fig.colorbar(
        image, ax=heat, label="bias added to the score", shrink=0.8
    )
    row = seq_len_q // 2
    for h in range(num_heads):
        lines.plot(
            np.arange(seq_len_k),
            values[h, row],
            color=LINE_COLORS[h % 6],
            linestyle=LINE_STYLES[h % 6],
            marker="o",
            markersize=2.5,
            label=f"head {h}: m = {m[h]:g}",
        )
    lines.axvline(row, color="0.4", linewidth=0.8, linestyle=":")
    lines.set_xlabel(f"key position j (query i = {row})")
    lines.set_ylabel("bias −m |i − j|")
    # below both panels: inside the right one, the lines and the query's
    # dotted line would run through it
    fig.legend(
        frameon=False,
        fontsize="small",
        ncols=2,
        loc="outside lower center",
    )
    # room between the colour bar's label and the right panel's y-label
    fig.get_layout_engine().set(wspace=0.08)
    return fig


def plot_extrapolation(
    lengths: Sequence[int],
    accuracy: dict[str, Tensor],
    *,
    train_len: int,
    ceiling: Sequence[float] | None = None,
    reflection_ceiling: Sequence[float] | None = None,
    chance: float | None = None,
) -> Figure:
    """Test accuracy against sequence length, one line per scheme (the mean
    over seeds, with each seed as a dot).

    Args:
        lengths: the evaluation lengths in tokens.
        accuracy: scheme to a ``(num_seeds, num_lengths)`` tensor of
            accuracies.
        train_len: the longest training length, marked with a vertical line.
        ceiling: the order-blind ceiling at each length (dotted), if given.
        reflection_ceiling: the reflection-blind ceiling at each length
            (dash-dotted), if given.
        chance: the chance rate (a grey line), if given.
    """
    x = np.asarray(lengths, dtype=np.float64)
    fig = _figure(6.8, 3.8)
    ax = fig.add_subplot()
    for n, (scheme, values) in enumerate(accuracy.items()):
        _plot_seeds(ax, x, values, n=n, count=len(accuracy), label=scheme)
    if ceiling is not None:
        ax.plot(
            x,
            list(ceiling),
            color="black",
            linestyle=":",
            linewidth=1.2,
            label="order-blind ceiling",
        )
    if reflection_ceiling is not None:
        ax.plot(
            x,
            list(reflection_ceiling),
            color="0.3",
            linestyle="-.",
            linewidth=1.0,
            label="reflection-blind ceiling",
        )
    if chance is not None:
        ax.axhline(chance, color="0.5", linewidth=0.8, label="chance")
    ax.axvline(train_len, color="0.4", linewidth=0.8, linestyle="--")
    # above the axes, where no data point can sit
    ax.annotate(
        r"$L_{\mathrm{train}}$",
        (train_len, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(0, 3),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize="small",
    )
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(int(v)) for v in x])
    ax.minorticks_off()
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("test sequence length (tokens)")
    ax.set_ylabel("test accuracy")
    ax.legend(
        frameon=False,
        fontsize="small",
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
    )
    return fig
