"""The figure functions the chapters call. Each returns a new
:class:`matplotlib.figure.Figure`.

Colour maps are perceptually uniform with monotonic lightness (``cividis``,
``viridis``), so the figures read the same with colour-vision deficiency and
in greyscale; backgrounds are opaque white so they stay readable on a dark
page. Model code never imports this module."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from tinyformer.labs.tasks import WordOrderResult
from tinyformer.labs.training import HeadStatistics, TrainingRun
from tinyformer.models.positional import pair_wavelengths

__all__ = [
    "plot_attention_heads",
    "plot_encoding",
    "plot_head_statistics",
    "plot_masks",
    "plot_middle_word_attention",
    "plot_offset_similarity",
    "plot_peak_memory",
    "plot_permutation",
    "plot_scaling",
    "plot_softmax_temperatures",
    "plot_training_curves",
    "plot_wavelengths",
]

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
)
#: Line styles paired with the colours, so lines stay distinct in greyscale.
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)))
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


def plot_training_curves(
    runs: dict[str, TrainingRun], *, chance: float | None = None
) -> Figure:
    """Training loss (log scale) and test accuracy per epoch, one line per
    run.

    Args:
        runs: label to :class:`~tinyformer.labs.training.TrainingRun`.
        chance: if given, a dotted line at this accuracy (the best an
            order-blind model can do).
    """
    fig = _figure(COLUMN_WIDTH, 3.2)
    loss_ax, acc_ax = fig.subplots(1, 2)
    for n, (label, run) in enumerate(runs.items()):
        epochs = np.arange(1, len(run.train_loss) + 1)
        style = {
            "color": LINE_COLORS[n % 6],
            "linestyle": LINE_STYLES[n % 6],
            "label": label,
        }
        loss_ax.plot(epochs, run.train_loss, **style)
        acc_ax.plot(epochs, run.test_accuracy, **style)
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("training loss (nats)")
    if chance is not None:
        acc_ax.axhline(chance, color="0.4", linewidth=0.8, linestyle=":")
        acc_ax.annotate(
            "order-blind ceiling",
            (1, chance),
            xytext=(0, 4),
            textcoords="offset points",
        )
    acc_ax.set_ylim(0, 1.05)
    acc_ax.set_xlabel("epoch")
    acc_ax.set_ylabel("test accuracy")
    acc_ax.legend(frameon=False, fontsize="small", loc="lower right")
    return fig


def plot_head_statistics(stats: dict[str, HeadStatistics]) -> Figure:
    """Heatmaps of where each head looks: one row per head, one column per
    statistic, one panel per model.

    Args:
        stats: label to :class:`~tinyformer.labs.training.HeadStatistics`.
    """
    columns = ["previous", "1st item", "2nd item", "verb"]
    # Two panels per row at most (the colour bar takes a free slot, or goes
    # beside the last row), so that the figure fits the text column with its
    # numbers readable.
    per_row = min(len(stats), 2)
    rows = -(-len(stats) // per_row)
    fig = _figure(COLUMN_WIDTH, 4.3 * rows)
    axes = np.atleast_1d(
        fig.subplots(rows, per_row, squeeze=False, sharey=True)
    ).ravel()
    for ax in axes[len(stats) :]:
        ax.set_axis_off()
    image = None
    for ax, (label, s) in zip(axes, stats.items(), strict=False):
        num_layers, num_heads = s.previous.shape
        values = torch.stack(
            (s.previous, s.first_item, s.second_item, s.verb), dim=-1
        ).reshape(-1, 4)
        rows = [
            f"layer {layer}, head {head}"
            for layer in range(num_layers)
            for head in range(num_heads)
        ]
        image = _heatmap(
            ax,
            _numpy(values),
            rows,
            columns,
            vmin=0.0,
            vmax=1.0,
            fmt=".2f",
            aspect="auto",
        )
        plt_labels = ax.get_xticklabels()
        ax.set_xticks(
            range(len(columns)),
            plt_labels,
            rotation=45,
            ha="right",
            rotation_mode="anchor",
        )
        ax.set_title(textwrap.fill(label, 24), fontsize="medium")
    fig.colorbar(
        image,
        ax=axes[: len(stats)].tolist(),
        label="share of attention",
        shrink=0.6,
    )
    return fig


# -- Position beyond sinusoids (rotary, ALiBi, the length-extrapolation lab)
# -----------------------------

__all__ += ["plot_alibi_bias", "plot_extrapolation", "plot_rotary_rotation"]


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
    color = LINE_COLORS[n % 6]
    shift = 1.0 + 0.03 * (n - (count - 1) / 2)
    size = {} if markersize is None else {"markersize": markersize}
    ax.plot(
        x * shift,
        per_seed.mean(axis=0),
        color=color,
        linestyle=LINE_STYLES[n % 6],
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
