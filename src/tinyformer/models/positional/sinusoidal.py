"""Sinusoidal positional encoding: a fixed table added to the embeddings
(Vaswani et al., 2017, Sec. 3.5).

Shapes: ``N`` batch size, ``L`` sequence length, ``E`` model width
``d_model``."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.tools.checks import (
    check_floating_tensor,
    check_int,
    check_probability,
)

__all__ = [
    "SINUSOIDAL",
    "SinusoidalPositionalEncoding",
    "fit_shift_matrix",
    "pair_wavelengths",
    "position_from_encoding",
    "relative_shift_matrix",
    "sinusoidal_positional_encoding",
]


def check_base(base: object) -> float:
    """``base`` as a float, if it is a finite real number greater than 1
    (shared by the rotary module)."""
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(
            f"base must be a real number, got {type(base).__name__} {base!r}"
        )
    if not math.isfinite(base) or base <= 1.0:
        raise ValueError(
            f"base={base} must be a finite number greater than 1"
        )
    return float(base)


def pair_wavelengths(d_model: int, *, base: float = 10000.0) -> Tensor:
    """Wavelength of each sin/cos pair: ``2*pi * base^(2i/d_model)`` tokens
    (Vaswani et al., 2017, Sec. 3.5).

    Pair ``i`` occupies columns ``2i`` (sine) and ``2i+1`` (cosine) of the
    encoding table. Its angle grows by ``base^(-2i/d_model)`` radians per
    token, so it repeats every ``2*pi*base^(2i/d_model)`` tokens: from
    ``2*pi`` for the first pair, whatever the base, to
    ``2*pi*base^((E-2)/E)`` for the last.

    Args:
        d_model: encoding width E, a positive int.
        base: wavelength constant, a finite number greater than 1.

    Returns:
        float64 tensor of shape ``(ceil(E / 2),)``, in tokens, increasing.

    Raises:
        TypeError: if ``d_model`` is not an int or ``base`` not a number.
        ValueError: if ``d_model < 1`` or ``base <= 1``, naming the value.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    base = check_base(base)
    # the even column index 2i
    pair = torch.arange(0, d_model, 2, dtype=torch.float64)
    return 2 * math.pi * base ** (pair / d_model)


def sinusoidal_positional_encoding(
    seq_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] = cos(...)
    (Vaswani et al., 2017, Sec. 3.5).

    Sine and cosine are interleaved, as in the paper: column ``2i`` holds
    the sine of pair ``i`` and column ``2i+1`` its cosine. An odd
    ``d_model`` is allowed: the same formula fills every column, so the last
    column is the sine of a pair whose cosine would fall outside the table.
    The angles are computed in float64 and cast to ``dtype`` at the end, so
    half-precision tables are as accurate as their dtype allows even at long
    lengths.

    Args:
        seq_len: number of positions L (tokens), >= 0.
        d_model: encoding width E, >= 1.
        base: wavelength constant, > 1; the slowest pair has wavelength
            ``2*pi*base^(2*floor((E-1)/2)/E)`` tokens (see
            :func:`pair_wavelengths`).
        dtype: floating dtype of the result.
        device: device of the result.

    Returns:
        ``(L, E)`` tensor with values in [-1, 1].

    Raises:
        TypeError: if ``seq_len`` or ``d_model`` is not an int, ``base`` not
            a number, or ``dtype`` not a floating dtype.
        ValueError: if ``seq_len < 0``, ``d_model < 1`` or ``base <= 1``,
            naming the value.
    """
    seq_len = check_int("seq_len", seq_len, minimum=0)
    d_model = check_int("d_model", d_model, minimum=1)
    base = check_base(base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype must be a floating torch.dtype, got {dtype!r}"
        )
    # (L, 1)
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    # (ceil(E/2),)
    inv_freq = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    angle = position * inv_freq  # (L, ceil(E/2)), radians
    # (L, 2*ceil(E/2)), interleaved
    table = torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)
    return table[:, :d_model].to(device=device, dtype=dtype)  # (L, E)


def relative_shift_matrix(
    offset: int, d_model: int, *, base: float = 10000.0
) -> Tensor:
    """The fixed linear map ``R_k`` with ``PE[pos + k] = R_k @ PE[pos]`` for
    every pos (Vaswani et al., 2017, Sec. 3.5).

    For pair ``i`` with angular frequency ``w_i = base^(-2i/d_model)``, the
    angle-addition identities give
    ``sin(w(p+k)) = cos(wk) sin(wp) + sin(wk) cos(wp)`` and
    ``cos(w(p+k)) = -sin(wk) sin(wp) + cos(wk) cos(wp)``: a rotation by
    ``w_i k`` radians that does not depend on ``p``. ``R_k`` is block
    diagonal with one such 2x2 block per pair (a 1x1 block cannot exist, so
    ``d_model`` must be even).

    Args:
        offset: the shift k in tokens (any int, negative allowed).
        d_model: encoding width E, a positive even int.
        base: wavelength constant, > 1.

    Returns:
        float64 ``(E, E)`` orthogonal matrix.

    Raises:
        TypeError: if ``offset`` or ``d_model`` is not an int.
        ValueError: if ``d_model`` is odd or < 2, naming the value.
    """
    offset = check_int("offset", offset)
    d_model = check_int("d_model", d_model, minimum=2)
    if d_model % 2:
        raise ValueError(
            f"d_model={d_model} must be even: an odd width has a sine column with no cosine partner"
        )
    base = check_base(base)
    # (E/2,)
    angle = offset * base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    cos, sin = angle.cos(), angle.sin()
    # (E/2, 2, 2)
    blocks = torch.stack(
        (torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2
    )
    return torch.block_diag(*blocks)  # (E, E)


def position_from_encoding(
    encoding: Tensor, *, base: float = 10000.0
) -> Tensor:
    """The positions whose sinusoidal encodings are the rows of ``encoding``,
    read back coarse to fine, as a clock's hands are read.

    Pair ``i`` of a row holds ``(sin, cos)`` of ``pos * w_i``, with
    ``w_i = base^(-2i/d_model)``, so ``atan2`` gives ``pos * w_i`` up to a
    whole number of turns. The slowest pair has the range (one turn every
    ``2*pi * base^((E-2)/E)`` tokens) but little precision; the fastest has
    the precision (one radian a token) but repeats every ``2*pi`` tokens.
    Starting from the slowest pair's estimate, each faster pair keeps the
    number of whole turns that the estimate so far implies and replaces the
    fraction of a turn with its own, finer reading. A row perturbed by a
    small error is still read correctly: each step needs the estimate so far
    within half a wavelength of the next pair.

    Args:
        encoding: ``(N, E)`` floating rows of the interleaved table of
            :func:`sinusoidal_positional_encoding` (sines in the even
            columns), ``E`` even, for positions ``0 <= pos`` below half the
            slowest pair's wavelength, ``pi * base^((E-2)/E)`` (about 23,500
            tokens for E = 64 and the paper's base).
        base: wavelength constant the table was made with, > 1.

    Returns:
        ``(N,)`` int64 positions.

    Raises:
        TypeError: if ``encoding`` is not a floating-point Tensor.
        ValueError: if ``encoding`` is not 2-d with an even, positive width.
    """
    check_floating_tensor("encoding", encoding)
    if (
        encoding.dim() != 2
        or encoding.shape[1] < 2
        or encoding.shape[1] % 2
    ):
        raise ValueError(
            f"encoding must be (N, E) with E even and >= 2, got shape {tuple(encoding.shape)}"
        )
    base = check_base(base)
    d_model = encoding.shape[1]
    rows = encoding.detach().to(torch.float64)
    # (N, E/2): pos * w_i up to whole turns, radians
    angle = torch.atan2(rows[:, 0::2], rows[:, 1::2])
    # (E/2,): radians per token, fastest first
    speed = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    estimate = angle[:, -1] / speed[-1]  # slowest pair: range, (N,)
    for i in range(d_model // 2 - 2, -1, -1):  # faster pairs: precision
        turns = torch.round(
            (estimate * speed[i] - angle[:, i]) / (2 * math.pi)
        )
        estimate = (angle[:, i] + 2 * math.pi * turns) / speed[i]
    return torch.round(estimate).to(torch.int64)  # (N,)


def fit_shift_matrix(table: Tensor, offset: int) -> Tensor:
    """The linear map ``M`` that best takes each row of ``table`` to the row
    ``offset`` further on, ``table[pos + k] ~ M @ table[pos]``, fitted by
    least squares over every pair of rows ``offset`` apart.

    For a sinusoidal table (either layout, any base) with enough positions
    the fit is :func:`relative_shift_matrix` (its columns permuted as the
    table's are): the data alone find the rotation that the angle-addition
    identities derive. With fewer positions than the slow pairs need to
    turn, those pairs barely move across the table and the fit cannot pin
    down their rotation (``torch.linalg.cond`` of the table says how badly).

    Args:
        table: ``(L, E)`` floating rows, one per position.
        offset: the shift k in positions, an int with ``|k| < L``; negative
            shifts back.

    Returns:
        float64 ``(E, E)`` matrix.

    Raises:
        TypeError: if ``table`` is not a floating-point Tensor or ``offset``
            not an int.
        ValueError: if ``table`` is not 2-d, or ``|offset|`` leaves fewer
            row pairs than columns (the fit would not be unique).
    """
    check_floating_tensor("table", table)
    offset = check_int("offset", offset)
    if table.dim() != 2:
        raise ValueError(
            f"table must be (L, E), got shape {tuple(table.shape)}"
        )
    seq_len, d_model = table.shape
    if seq_len - abs(offset) < d_model:
        raise ValueError(
            f"offset={offset} leaves {max(seq_len - abs(offset), 0)} pairs of rows of a table of "
            f"{seq_len} rows, fewer than its {d_model} columns: the fit is not unique"
        )
    rows = table.detach().to(torch.float64)
    before = rows[
        max(0, -offset) : seq_len - max(0, offset)
    ]  # (L - |k|, E)
    after = rows[max(0, offset) : seq_len - max(0, -offset)]  # (L - |k|, E)
    # before @ M.T ~ after, one least-squares problem per output column
    return torch.linalg.lstsq(before, after).solution.T  # (E, E)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal table to a batch-first input, then applies
    dropout (Vaswani et al., 2017, Sec. 3.4-3.5).

    The table is a non-persistent buffer: it follows ``.to(device, dtype)``
    and is not saved in the ``state_dict`` (it is a function of the
    constructor's arguments, not a learned parameter).

    Args:
        d_model: model width E, >= 1.
        max_len: longest sequence L the module accepts, in tokens, >= 1.
        base: wavelength constant, > 1.
        dropout: probability of zeroing an element of the sum during
            training, in [0, 1).

    Raises:
        TypeError, ValueError: for arguments outside the ranges above, naming the value.
    """

    pe: Tensor

    def __init__(
        self,
        d_model: int,
        max_len: int = 5000,
        *,
        base: float = 10000.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_int("max_len", max_len, minimum=1)
        check_probability("dropout", dropout)
        self.d_model = d_model
        self.max_len = max_len
        self.base = base
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe",
            sinusoidal_positional_encoding(max_len, d_model, base=base),
            persistent=False,
        )

    def forward(self, x: Tensor) -> Tensor:
        """Return ``dropout(x + PE[:L])``.

        Args:
            x: ``(N, L, E)`` embeddings with ``L <= max_len``.

        Returns:
            ``(N, L, E)`` tensor of ``x``'s dtype.

        Raises:
            TypeError: if ``x`` is not a floating tensor.
            ValueError: if ``x`` is not 3-D, its last size is not
                ``d_model``, or ``L > max_len``.
        """
        check_floating_tensor("x", x)
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"x must have shape (N, L, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        seq_len = x.size(1)
        if seq_len > self.max_len:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_len={self.max_len}"
            )
        # (N, L, E)
        return self.dropout(x + self.pe[:seq_len].to(dtype=x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base}"


class _SinusoidalRows(nn.Module):
    """The decoder's sinusoidal table: ``x * sqrt(E) + PE[positions]``, the
    token embeddings scaled as in Vaswani et al. (2017, Sec. 3.4). The table
    is a float64 non-persistent buffer, so a float64 model carries no
    float32 rounding."""

    table: Tensor

    def __init__(self, max_len: int, d_model: int, *, base: float) -> None:
        super().__init__()
        self.scale = math.sqrt(d_model)
        table = sinusoidal_positional_encoding(
            max_len, d_model, base=base, dtype=torch.float64
        )
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        table = self.table.to(x.dtype)
        return x * self.scale + table[positions]  # (N, L, E)


class _SinusoidalScheme(PositionalScheme):
    name = "sinusoidal"
    description = "the fixed sinusoidal table, added to the embeddings (Vaswani et al., 2017)"
    table = True

    def encoder_embedding(self, config: Any) -> nn.Module:
        return SinusoidalPositionalEncoding(
            config.d_model,
            config.max_len,
            base=config.base,
            dropout=config.dropout,
        )

    def decoder_embedding(self, config: Any) -> nn.Module:
        return _SinusoidalRows(
            config.max_len, config.d_model, base=config.base
        )


#: The fixed sinusoidal table, the scheme ``"sinusoidal"``.
SINUSOIDAL = _SinusoidalScheme()
