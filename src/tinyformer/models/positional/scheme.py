"""What a positional scheme is to the models: one object per scheme, with the
hooks the encoder (:class:`~tinyformer.models.encoder.TinyTransformer`) and the
decoder (:class:`~tinyformer.models.decoder.TinyDecoder`) call. The schemes
themselves live beside their functions (``sinusoidal.py``, ``learned.py``,
``rotary.py``, ``alibi.py``, ``t5.py``) and are registered by name in
:mod:`tinyformer.models.positional.registry`.

Position can enter a Transformer in three places, and a scheme says which:

* **added to the embeddings** (``encoder_embedding``, ``decoder_embedding``):
  a vector per position, from a table of ``max_len`` rows (``table`` is True;
  longer inputs are refused);
* **rotating queries and keys** (``rotary`` is True): every attention layer
  turns them by their positions before the dot product;
* **a bias on the scores** (``score_bias``): a module that maps query and key
  positions to ``(..., H, L, S)`` numbers added to every layer's scores,
  computed once per forward pass and shared by the layers. Under a key-value
  cache the decoder passes the positions of the cached keys, so the bias is
  the full pass's.

Shapes: ``N`` batch size, ``L`` queries, ``S`` keys, ``E`` model width
``d_model``, ``H`` heads ``num_heads``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

__all__ = ["NONE", "PositionalScheme"]


class PositionalScheme:
    """A way of giving a model the positions of its tokens; this base class is
    the scheme ``"none"`` (no positional information at all).

    A scheme holds no weights: its hooks build the modules that do, and the
    model keeps them (so they follow ``.to()`` and the ``state_dict``). A
    config passed to a hook is a
    :class:`~tinyformer.models.encoder.TransformerConfig` or a
    :class:`~tinyformer.models.decoder_config.DecoderConfig`; the hooks read
    the fields both have (``d_model``, ``num_heads``, ``max_len``, ``base``,
    ``dropout``, ``relative_attention_num_buckets``,
    ``relative_attention_max_distance``).

    Attributes:
        name: the value of the configs' ``positional`` field.
        description: one line for tables and error messages.
        table: True if positions come from a table of ``max_len`` rows, so
            that a position at or past ``max_len`` is refused.
        rotary: True if every attention layer rotates its queries and keys
            (:func:`~tinyformer.models.positional.apply_rotary`).
        decoder: True if a causal decoder may use the scheme.
    """

    name: ClassVar[str] = "none"
    description: ClassVar[str] = "no positional information"
    table: ClassVar[bool] = False
    rotary: ClassVar[bool] = False
    decoder: ClassVar[bool] = True

    def check(self, config: Any, *, causal: bool) -> None:
        """Refuse a config this scheme cannot build (``causal``: whether the
        config is a decoder's).

        Raises:
            ValueError: naming the field and its value.
        """

    def encoder_embedding(self, config: Any) -> nn.Module:
        """The encoder's module from the scaled token embeddings ``(N, L, E)``
        to the layers' input ``(N, L, E)``: position vectors added (if any),
        then dropout. Positions are ``0 .. L - 1``."""
        return nn.Dropout(config.dropout)

    def decoder_embedding(self, config: Any) -> nn.Module | None:
        """The decoder's module ``(x, positions) -> x`` that adds the vectors of
        ``positions`` ``(N, L)`` to the token embeddings ``x`` ``(N, L, E)``,
        or None if nothing is added."""
        return None

    def rotate(
        self, q: Tensor, k: Tensor, positions: Tensor, config: Any
    ) -> tuple[Tensor, Tensor]:
        """Queries ``(N, H, L, D)`` and keys ``(N, H_kv, L, D)`` as the
        attention should see them, for integer ``positions`` ``(N, 1, L)``
        (the cache offset included); unchanged unless ``rotary``."""
        return q, k

    def score_bias(self, config: Any, *, causal: bool) -> nn.Module | None:
        """A module ``(query_positions, key_positions, *, dtype) -> bias``
        whose bias ``(..., H, L, S)`` is added to every layer's scores, or
        None. Positions are integer tensors ``(..., L)`` and ``(..., S)``;
        ``causal`` says whether the model is a decoder."""
        return None

    def __repr__(self) -> str:
        return f"<positional scheme {self.name!r}: {self.description}>"


#: The scheme ``"none"``: nothing tells the model where a token sits.
NONE = PositionalScheme()
