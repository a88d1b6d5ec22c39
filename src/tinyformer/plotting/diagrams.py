"""Schematic diagrams, drawn from the library's own objects so that they
cannot drift from the code.

Opaque white figures with black ink, so they read the same on a light and a
dark page."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import Tensor

from tinyformer.models.attention import MultiHeadAttention
from tinyformer.models.encoder import EncoderLayer
from tinyformer.plotting.style import LINE_COLORS, LINE_STYLES, _figure

__all__ = [
    "multi_head_shapes",
    "plot_encoder_placements",
    "plot_multi_head_dataflow",
    "plot_rotation_circle",
]


def multi_head_shapes(
    module: MultiHeadAttention, query: Tensor
) -> dict[str, tuple[int, ...]]:
    """The shape of every intermediate tensor of one self-attention forward
    pass of ``module``.

    Forward hooks on the four projections, and wrappers around the module's
    own ``split_heads`` and ``merge_heads`` for the duration of the call,
    record what really flows; the weights come from the explicit path
    (``need_weights=True, average_attn_weights=False``). Nothing is changed
    afterwards.

    Args:
        module: the layer to trace.
        query: ``(N, L, E)`` input, used as query, key and value.

    Returns:
        Ordered ``{step: shape}``: ``input``, ``q_proj``, ``k_proj``,
        ``v_proj``, ``q``, ``k``, ``v`` (after the split), ``weights``,
        ``heads``, ``concatenated``, ``output``.
    """
    shapes: dict[str, tuple[int, ...]] = {"input": tuple(query.shape)}
    split_names = iter(("q", "k", "v"))
    original_split, original_merge = module.split_heads, module.merge_heads

    def split_heads(x: Tensor, num_heads: int | None = None) -> Tensor:
        out = original_split(x, num_heads)
        shapes[next(split_names)] = tuple(out.shape)
        return out

    def merge_heads(x: Tensor) -> Tensor:
        shapes["heads"] = tuple(x.shape)
        out = original_merge(x)
        shapes["concatenated"] = tuple(out.shape)
        return out

    def recorder(name: str):
        def hook(_module, _inputs, output):
            shapes[name] = tuple(output.shape)

        return hook

    handles = [
        getattr(module, n).register_forward_hook(recorder(n))
        for n in ("q_proj", "k_proj", "v_proj")
    ]
    module.split_heads, module.merge_heads = split_heads, merge_heads
    try:
        with torch.no_grad():
            output, weights = module(
                query, need_weights=True, average_attn_weights=False
            )
    finally:
        for handle in handles:
            handle.remove()
        del module.split_heads, module.merge_heads
    shapes["weights"] = tuple(weights.shape)
    shapes["output"] = tuple(output.shape)
    order = (
        "input",
        "q_proj",
        "k_proj",
        "v_proj",
        "q",
        "k",
        "v",
        "weights",
        "heads",
        "concatenated",
        "output",
    )
    return {name: shapes[name] for name in order}


def _box(
    ax,
    x: float,
    y: float,
    text: str,
    *,
    width: float = 2.9,
    height: float = 0.9,
    fill: str = "#E8F1FA",
):
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.05",
            facecolor=fill,
            edgecolor="black",
            linewidth=1,
        )
    )
    ax.text(
        x, y, text, ha="center", va="center", fontsize=8.5, color="black"
    )


def _arrow(
    ax, start: tuple[float, float], end: tuple[float, float]
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=11,
            color="black",
            linewidth=1,
        )
    )


def plot_multi_head_dataflow(shapes: dict[str, tuple[int, ...]]) -> Figure:
    """Multi-head self-attention from input to output, each step labelled
    with its recorded shape.

    Args:
        shapes: the result of :func:`multi_head_shapes`.
    """

    def fmt(name: str) -> str:
        return "(" + ", ".join(str(n) for n in shapes[name]) + ")"

    fig = _figure(7.0, 6.4)
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 12.4)
    ax.set_axis_off()
    _box(
        ax,
        5,
        11.6,
        f"input x  {fmt('input')}  (N, L, E)",
        width=4.6,
        fill="white",
    )
    # q has one row per query position (L), k and v one per key position
    # (S); in self-attention the two lengths are equal.
    columns = {"q": (1.7, "L"), "k": (5.0, "S"), "v": (8.3, "S")}
    for name, (x, length) in columns.items():
        letter = name.upper()
        _arrow(ax, (5, 11.1), (x, 10.15))
        _box(
            ax,
            x,
            9.6,
            f"{name}_proj: $x W^{letter}$\n{fmt(name + '_proj')}",
        )
        _arrow(ax, (x, 9.1), (x, 8.15))
        _box(
            ax,
            x,
            7.6,
            f"split_heads → {name}\n{fmt(name)}  (N, H, {length}, D)",
        )
        _arrow(ax, (x, 7.1), (5 + (x - 5) * 0.4, 6.05))
    _box(
        ax,
        5,
        5.4,
        f"per head: softmax(q kᵀ / √D) v\nweights {fmt('weights')}  (N, H, L, S)",
        width=6.2,
        height=1.1,
        fill="#FDF0E6",
    )
    _arrow(ax, (5, 4.8), (5, 4.05))
    _box(ax, 5, 3.6, f"heads {fmt('heads')}  (N, H, L, D)", width=4.6)
    _arrow(ax, (5, 3.1), (5, 2.65))
    _box(
        ax,
        5,
        2.2,
        f"merge_heads (concatenate) {fmt('concatenated')}  (N, L, E)",
        width=6.2,
    )
    _arrow(ax, (5, 1.7), (5, 1.25))
    _box(
        ax,
        5,
        0.8,
        f"out_proj: $W^O$ → output {fmt('output')}  (N, L, E)",
        width=6.2,
        fill="white",
    )
    return fig


def plot_rotation_circle(
    *, pos: int = 2, offset: int = 3, starts: int = 2
) -> Figure:
    """The first sin/cos pair (one radian per token) on the unit circle:
    positions p and p + k as points, the shift by k drawn as a turn of k
    radians, for ``starts`` starting positions ``pos, pos + 5, ...``.

    Each turn is an arc inside the circle, on a radius of its own and in a
    colour and line style of its own, joined to its two points by dotted
    spokes and named in the legend, so that overlapping turns stay apart.

    Args:
        pos: the first starting position p (tokens).
        offset: the shift k (tokens); the turn is k radians.
        starts: how many starting positions to draw.
    """
    fig = _figure(4.2, 4.7)
    ax = fig.add_subplot()
    angle = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(angle), np.sin(angle), color="0.6", linewidth=1)
    ax.axhline(0, color="0.85", linewidth=0.8)
    ax.axvline(0, color="0.85", linewidth=0.8)
    for n in range(starts):
        p = pos + 5 * n
        radius = 0.78 - 0.2 * n
        color = LINE_COLORS[n % 6]
        style = LINE_STYLES[n % 6]
        for position, marker in ((p, "o"), (p + offset, "s")):
            x, y = np.cos(position), np.sin(position)
            ax.plot(
                x,
                y,
                marker=marker,
                color=color,
                markersize=8,
                linestyle="none",
            )
            ax.plot(
                [radius * x, x],
                [radius * y, y],
                color=color,
                linewidth=0.9,
                linestyle=":",
            )
            ax.annotate(
                f"{position}",
                (x, y),
                xytext=(1.16 * x, 1.16 * y),
                ha="center",
                va="center",
                color="black",
            )
        arc = np.linspace(p, p + offset, 100)
        ax.plot(
            radius * np.cos(arc),
            radius * np.sin(arc),
            color=color,
            linewidth=1.8,
            linestyle=style,
            label=f"{p} → {p + offset}: turn of {offset} rad",
        )
        ax.add_patch(
            FancyArrowPatch(
                (radius * np.cos(arc[-2]), radius * np.sin(arc[-2])),
                (radius * np.cos(arc[-1]), radius * np.sin(arc[-1])),
                arrowstyle="-|>",
                mutation_scale=14,
                color=color,
            )
        )
    ax.set_aspect("equal")
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    ax.set_xlabel("cos(pos)  (column 1)")
    ax.set_ylabel("sin(pos)  (column 0)")
    fig.legend(loc="outside lower center", frameon=False, fontsize="small")
    return fig


def _placement_steps(layer: EncoderLayer) -> list[tuple[str, str]]:
    """The layer's steps from bottom to top as (kind, label); kind is
    "norm", "sublayer" or "add"."""
    attention, ffn = (
        type(layer.self_attn).__name__,
        type(layer.ffn).__name__,
    )
    norm = type(layer.norm1).__name__
    if layer.norm_first:
        return [
            ("norm", norm),
            ("sublayer", attention),
            ("add", "+"),
            ("norm", norm),
            ("sublayer", ffn),
            ("add", "+"),
        ]
    return [
        ("sublayer", attention),
        ("add", "+"),
        ("norm", norm),
        ("sublayer", ffn),
        ("add", "+"),
        ("norm", norm),
    ]


def plot_encoder_placements(
    post_ln: EncoderLayer, pre_ln: EncoderLayer
) -> Figure:
    """Two encoder layers side by side, their steps in the order each
    layer's ``norm_first`` sets.

    The residual connections are drawn as arcs from where each branch starts
    to its ``+``. Box labels are the class names of the layer's own
    submodules.

    Args:
        post_ln: a layer with ``norm_first=False`` (the paper's placement).
        pre_ln: a layer with ``norm_first=True``.

    Raises:
        ValueError: if the layers' ``norm_first`` flags are not False and
            True.
    """
    if post_ln.norm_first or not pre_ln.norm_first:
        raise ValueError(
            f"expected post_ln.norm_first=False and pre_ln.norm_first=True, got {post_ln.norm_first} and {pre_ln.norm_first}"
        )
    fig = _figure(7.0, 5.6)
    axes = fig.subplots(1, 2)
    fills = {"norm": "#FDF0E6", "sublayer": "#E8F1FA", "add": "white"}
    for ax, layer, title in (
        (axes[0], post_ln, "post-LN (the paper)"),
        (axes[1], pre_ln, "pre-LN"),
    ):
        steps = _placement_steps(layer)
        ax.set_xlim(0, 4)
        ax.set_ylim(-0.6, len(steps) + 1.0)
        ax.set_axis_off()
        ax.set_title(title)
        x = 1.6
        ax.text(
            x,
            -0.35,
            "input x",
            ha="center",
            va="center",
            fontsize=9,
            color="black",
        )
        previous_top = -0.15
        for n, (kind, label) in enumerate(steps):
            y = n + 0.4
            if kind == "add":
                ax.add_patch(
                    FancyBboxPatch(
                        (x - 0.22, y - 0.22),
                        0.44,
                        0.44,
                        boxstyle="circle,pad=0.0",
                        facecolor="white",
                        edgecolor="black",
                    )
                )
                ax.text(
                    x,
                    y,
                    "+",
                    ha="center",
                    va="center",
                    fontsize=12,
                    color="black",
                )
                bottom, top = y - 0.22, y + 0.22
                # The residual branch leaves the main path below the
                # sublayer (post-LN) or below the LayerNorm in front of it
                # (pre-LN), and rejoins it at this +.
                first = n - 2 if layer.norm_first else n - 1
                start = first + 0.4 - 0.25 - 0.12
                ax.plot(
                    [x, x + 1.3, x + 1.3],
                    [start, start, y],
                    color=LINE_COLORS[1],
                    linewidth=1.4,
                    linestyle="--",
                )
                _arrow(ax, (x + 1.3, y), (x + 0.22, y))
            else:
                _box(
                    ax, x, y, label, width=2.2, height=0.5, fill=fills[kind]
                )
                bottom, top = y - 0.25, y + 0.25
            _arrow(ax, (x, previous_top), (x, bottom))
            previous_top = top
        ax.text(
            x,
            len(steps) + 0.55,
            "output y",
            ha="center",
            va="center",
            fontsize=9,
            color="black",
        )
        _arrow(ax, (x, previous_top), (x, len(steps) + 0.35))
    ax.text(
        3.0,
        len(_placement_steps(pre_ln)) + 0.55,
        "dashed: residual",
        ha="center",
        fontsize=8,
        color=LINE_COLORS[1],
    )
    return fig
