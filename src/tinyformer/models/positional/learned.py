"""Learned absolute position embeddings: one trained vector per position
(Vaswani et al., 2017, Sec. 3.5 and Table 3, row E).

Shapes: ``N`` batch size, ``L`` sequence length, ``E`` model width
``d_model``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import (
    check_floating_tensor,
    check_int,
    check_non_negative,
    check_probability,
)

__all__ = ["LEARNED", "LearnedPositionalEmbedding"]


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned ``(max_len, E)`` table to a batch-first input, then
    applies dropout (Vaswani et al., 2017, Table 3, row E).

    Row ``pos`` of the table is a parameter trained like any other weight;
    the model gets one vector per position and nothing ties position 7 to
    position 8. Vaswani et al. report that such embeddings score nearly the
    same as the sinusoidal table (Table 3, row E) and keep the sinusoids
    because they "may allow the model to extrapolate to sequence lengths
    longer than the ones encountered during training" (Sec. 3.5). A learned
    table cannot: it has no row for a position past ``max_len``, and the
    rows of positions never seen in training keep their initial values (a
    row receives a gradient only when some training input reaches it).
    Initialised from ``N(0, init_std^2)``, as in GPT-2 and BERT
    (``init_std = 0.02``).

    Args:
        max_len: number of rows, the longest sequence L accepted, in tokens,
            >= 1.
        d_model: model width E, >= 1.
        init_std: standard deviation of the initial rows, >= 0.
        dropout: probability of zeroing an element of the sum during
            training, in [0, 1).

    Raises:
        TypeError: if ``max_len`` or ``d_model`` is not an int.
        ValueError: if ``max_len`` or ``d_model`` is < 1, ``init_std`` < 0
            or ``dropout`` outside [0, 1).
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        init_std: float = 0.02,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        init_std = check_non_negative("init_std", init_std)
        # (max_len, E), row pos = position pos
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=init_std)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(self, x: Tensor) -> Tensor:
        """Return ``dropout(x + weight[:L])``.

        Args:
            x: ``(N, L, E)`` embeddings with ``L <= max_len``.

        Returns:
            ``(N, L, E)`` tensor of ``x``'s dtype.

        Raises:
            TypeError: if ``x`` is not a floating tensor.
            ValueError: if ``x`` is not 3-D or its last size is not
                ``d_model``, or if ``L > max_len``, naming both lengths.
        """
        check_floating_tensor("x", x)
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"x must have shape (N, L, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        seq_len = x.size(1)
        if seq_len > self.max_len:
            raise ValueError(
                f"sequence length {seq_len} exceeds "
                f"max_len={self.max_len}: the learned table has no row "
                f"for position {self.max_len}"
            )
        # (N, L, E)
        return self.dropout(x + self.weight[:seq_len].to(dtype=x.dtype))

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


class _LearnedRows(nn.Embedding):
    """The decoder's learned table, ``(max_len, E)``: ``x + weight[positions]``
    (GPT-2's ``wpe``). An ``nn.Embedding``, so the decoder initialises it
    as the token embedding and its weight is ``position_embed.weight``."""

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:  # type: ignore[override]
        return x + super().forward(positions)  # (N, L, E)


class _LearnedScheme(PositionalScheme):
    name = "learned"
    description = "a learned vector per position, added to the embeddings"
    table = True

    def encoder_embedding(self, config: Any) -> nn.Module:
        # Rows start at the scale of the scaled token embeddings (unit
        # variance), as GPT-2 starts its position and token tables at one
        # scale; at 0.02 they would be drowned by the tokens.
        return LearnedPositionalEmbedding(
            config.max_len,
            config.d_model,
            init_std=1.0,
            dropout=config.dropout,
        )

    def decoder_embedding(self, config: Any) -> nn.Module:
        return _LearnedRows(config.max_len, config.d_model)


#: A learned table of absolute positions, the scheme ``"learned"``.
LEARNED = _LearnedScheme()
