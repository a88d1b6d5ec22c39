"""Figures of the chapter "Attention without the matrix": the tiles
:func:`~tinyformer.models.flash.flash_attention` visits, drawn from the schedule it
runs. Model code never imports this module."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from tinyformer.models.flash import tile_schedule
from tinyformer.plotting.style import COLUMN_WIDTH, LINE_COLORS, _figure

__all__ = ["plot_tiles"]

# light fills with dark numbers, so that the figure reads on a light page
_FILL = {"full": "#cfe3f1", "diagonal": "#f8d5bf", "skipped": "white"}
_EDGE = {
    "full": LINE_COLORS[0],
    "diagonal": LINE_COLORS[1],
    "skipped": "0.6",
}
_STYLE = {"full": "-", "diagonal": "-", "skipped": "--"}
_LABEL = {
    "full": "computed",
    "diagonal": "computed with the causal mask",
    "skipped": "skipped",
}


def _patch(kind: str, **where: float) -> Patch:
    kwargs = {
        "facecolor": _FILL[kind],
        "edgecolor": _EDGE[kind],
        "linestyle": _STYLE[kind],
        "linewidth": 1.5,
    }
    return Rectangle(**where, **kwargs) if where else Patch(**kwargs)


def plot_tiles(
    seq_len: int, *, block_size_q: int, block_size_k: int
) -> Figure:
    """The ``(L, L)`` score matrix cut into tiles of ``block_size_q`` rows
    and ``block_size_k`` columns, without and with the causal rule, each
    computed tile numbered in the order the forward visits it
    (:func:`~tinyformer.models.flash.tile_schedule`).

    Args:
        seq_len: L, the number of queries and of keys.
        block_size_q: rows per query block.
        block_size_k: columns per key block.

    Raises:
        TypeError, ValueError: as :func:`~tinyformer.models.flash.tile_schedule`.
    """
    fig = _figure(COLUMN_WIDTH, 3.9)
    axes = fig.subplots(1, 2)
    for ax, is_causal in zip(axes, (False, True), strict=True):
        tiles = tile_schedule(
            seq_len,
            seq_len,
            block_size_q=block_size_q,
            block_size_k=block_size_k,
            is_causal=is_causal,
        )
        step = 0
        for tile in tiles:
            ax.add_patch(
                _patch(
                    tile.kind,
                    xy=(tile.k_start, tile.q_start),
                    width=tile.k_stop - tile.k_start,
                    height=tile.q_stop - tile.q_start,
                )
            )
            if tile.kind != "skipped":
                step += 1
                # on a diagonal tile, below the diagonal line
                x, y = (0.3, 0.7) if tile.kind == "diagonal" else (0.5, 0.5)
                ax.text(
                    tile.k_start + x * (tile.k_stop - tile.k_start),
                    tile.q_start + y * (tile.q_stop - tile.q_start),
                    str(step),
                    ha="center",
                    va="center",
                    color="black",
                    fontsize="large",
                    fontweight="bold",
                )
        if is_causal:  # the diagonal j = i that cuts the orange tiles
            ax.plot([0, seq_len], [0, seq_len], color="black", linewidth=1)
        ax.set_xlim(0, seq_len)
        ax.set_ylim(seq_len, 0)
        ax.set_aspect("equal")
        ax.set_title(
            "causal: tiles after the diagonal skipped"
            if is_causal
            else "full attention",
            fontsize="medium",
        )
        ax.set_xlabel("key j")
        ax.set_xticks(list(range(0, seq_len + 1, block_size_k)))
        ax.set_yticks(list(range(0, seq_len + 1, block_size_q)))
    axes[0].set_ylabel("query i")
    fig.legend(
        [_patch(kind) for kind in _LABEL],
        list(_LABEL.values()),
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize="medium",
    )
    return fig
