"""Coding exercise encoder-layer: write the encoder layer, with residuals
and layer normalisation placed post-LN or pre-LN.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/encoder_layer.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.models.encoder import EncoderLayer
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="encoder-layer",
    functions=("encoder_layer",),
    template="encoder_layer.py",
    chapter="transformer",
    objective="write the encoder layer, with residuals and layer normalisation placed post-LN or pre-LN",
    references=("tinyformer.models.encoder.EncoderLayer.forward",),
)


@reseedable
def _encoder(
    title: str,
    d_model: int,
    num_heads: int,
    d_ff: int,
    shape: tuple[int, int],
    *,
    norm_first: bool,
    padded: bool = False,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        layer = (
            EncoderLayer(d_model, num_heads, d_ff, norm_first=norm_first)
            .double()
            .eval()
        )
        # LayerNorm starts as the identity map; give it weights that show
        with torch.no_grad():
            for norm in (layer.norm1, layer.norm2):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)
        x = _randn(*shape, d_model, seed=seed)
        key_padding_mask = None
        if padded:
            key_padding_mask = torch.zeros(shape, dtype=torch.bool)
            # the last two positions of the first sequence are padding
            key_padding_mask[0, -2:] = True
        text = f"encoder_layer(EncoderLayer({d_model}, {num_heads}, {d_ff}, norm_first={norm_first}), x {(*shape, d_model)}"
        text += (
            ", key_padding_mask with the last 2 keys of sequence 0 = padding)"
            if padded
            else ")"
        )
        with torch.no_grad():
            want, _ = layer(x, key_padding_mask=key_padding_mask)
        got = call(
            f["encoder_layer"],
            text,
            layer,
            x,
            key_padding_mask=key_padding_mask,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise failed.adding(
                f"input: {text}",
                mistakes=_encoder_mistakes(got, layer, x, key_padding_mask),
            ) from None

    return Check(title, run)


FLIPPED_PADDING = "your layer reads key_padding_mask with the opposite polarity: the keys it blocks are the real tokens"

NORMALISED_STREAM = (
    "your pre-LN layer normalises the residual stream itself: the stream that is added to must stay "
    "un-normalised, only each branch's input is normalised"
)

NORMS_SWAPPED = "your layer places its norms as the other variant does (post-LN for pre-LN or the reverse)"


@torch.no_grad()
def _encoder_mistakes(
    got: object,
    layer: EncoderLayer,
    x: Tensor,
    key_padding_mask: Tensor | None,
) -> list[str]:
    """The common mistakes ``got`` matches, recomputed from ``layer``'s
    parts with the library."""
    mistakes = []
    if key_padding_mask is not None:
        flipped, _ = layer(x, key_padding_mask=~key_padding_mask)
        if matches(got, flipped):
            mistakes.append(FLIPPED_PADDING)

    def attend(h: Tensor) -> Tensor:
        return layer.self_attn(h, h, h, key_padding_mask=key_padding_mask)[
            0
        ]

    if layer.norm_first:
        h = layer.norm1(x)
        h = h + attend(h)
        h = layer.norm2(h)
        if matches(got, h + layer.ffn(h)):
            mistakes.append(NORMALISED_STREAM)
    layer.norm_first = not layer.norm_first
    try:
        other, _ = layer(x, key_padding_mask=key_padding_mask)
    finally:
        layer.norm_first = not layer.norm_first
    if matches(got, other):
        mistakes.append(NORMS_SWAPPED)
    return mistakes


CHECKS = [
    _encoder(
        "post-LN (the paper), batch of 2",
        8,
        2,
        16,
        (2, 5),
        norm_first=False,
        seed=1,
    ),
    _encoder(
        "pre-LN (norm_first=True)",
        8,
        2,
        16,
        (2, 5),
        norm_first=True,
        seed=2,
    ),
    _encoder(
        "post-LN with padding",
        6,
        3,
        10,
        (2, 4),
        norm_first=False,
        padded=True,
        seed=3,
    ),
    _encoder(
        "pre-LN with padding",
        6,
        3,
        10,
        (2, 4),
        norm_first=True,
        padded=True,
        seed=4,
    ),
    _encoder("a batch of one", 4, 1, 8, (1, 3), norm_first=False, seed=5),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "post-LN and pre-LN swapped",
        [("if layer.norm_first:", "if not layer.norm_first:")],
        [
            "FAIL  1. post-LN",
            "FAIL  2. pre-LN",
            "first differing entry: output[0, 0, 0]",
            "  - your layer places its norms as the other variant does",
        ],
    ),
    (
        "LayerNorm inside the residual branch instead of after the sum (post-LN)",
        [
            (
                "x = layer.norm1(x + attend(x))",
                "x = x + layer.norm1(attend(x))",
            )
        ],
        [
            "FAIL  1. post-LN",
            "pass  2. pre-LN",
            "first differing entry: output",
        ],
    ),
    (
        "key_padding_mask read with the opposite polarity (True = a real token)",
        [
            (
                "h, key_padding_mask=key_padding_mask",
                "h, key_padding_mask=None if key_padding_mask is None else ~key_padding_mask",
            )
        ],
        [
            "pass  1. post-LN (the paper)",
            "FAIL  3. post-LN with padding",
            "FAIL  4. pre-LN with padding",
            "  - your layer reads key_padding_mask with the opposite polarity",
        ],
    ),
    (
        "pre-LN that normalises the residual stream itself",
        [
            (
                "x = x + attend(layer.norm1(x))\n        return x + layer.ffn(layer.norm2(x))",
                "x = layer.norm1(x)\n        x = x + attend(x)\n        x = layer.norm2(x)\n        return x + layer.ffn(x)",
            )
        ],
        [
            "pass  1. post-LN (the paper)",
            "FAIL  2. pre-LN (norm_first=True)",
            "  - your pre-LN layer normalises the residual stream itself",
        ],
    ),
    (
        "no residual around the feed-forward network",
        [
            (
                "return layer.norm2(x + layer.ffn(x))",
                "return layer.norm2(layer.ffn(x))",
            )
        ],
        ["FAIL  1. post-LN", "first differing entry: output"],
    ),
]
