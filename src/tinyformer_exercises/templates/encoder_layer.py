"""Coding exercise encoder-layer (chapter 4, "A miniature Transformer from
scratch").

Objective assessed: write the encoder layer, with residuals and layer
normalisation placed post-LN or pre-LN.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises encoder-layer encoder_layer.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- encoder-layer path/to/encoder_layer.py

Calling ``layer(x)`` itself is refused by the checker: build it from the
layer's parts."""

import torch
from torch import Tensor

from tinyformer.models.encoder import EncoderLayer


def encoder_layer(
    layer: EncoderLayer,
    x: Tensor,
    *,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """One encoder layer: self-attention and a feed-forward network, each
    wrapped in a residual and LayerNorm (Sec. 3.1).

    Post-LN (``layer.norm_first`` is False, the paper)::

        x = LayerNorm(x + SelfAttention(x))
        x = LayerNorm(x + FFN(x))

    Pre-LN (``layer.norm_first`` is True)::

        x = x + SelfAttention(LayerNorm(x))
        x = x + FFN(LayerNorm(x))

    Use the parts of ``layer``: ``layer.self_attn`` (a
    ``MultiHeadAttention``; call it as
    ``layer.self_attn(h, key_padding_mask=key_padding_mask)``, which returns
    ``(output, weights)``), ``layer.ffn``, ``layer.norm1`` (around the
    attention) and ``layer.norm2`` (around the FFN). Ignore dropout (the
    checker uses none).

    Args:
        layer: the layer whose parts to use.
        x: ``(N, L, E)`` input.
        key_padding_mask: None or bool ``(N, L)`` with **True = padding**
            (ignored as a key).

    Returns:
        ``(N, L, E)`` output.
    """

    raise NotImplementedError
