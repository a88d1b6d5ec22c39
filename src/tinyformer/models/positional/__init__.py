"""Where each token sits: the positional schemes of the book, one module per
idea.

* ``tinyformer.models.positional.sinusoidal``: the fixed sinusoidal table (Vaswani
  et al., 2017, Sec. 3.5).
* ``tinyformer.models.positional.learned``: a learned table of absolute positions
  (Sec. 3.5, Table 3, row E).
* ``tinyformer.models.positional.rotary``: rotary embeddings of queries and keys
  (Su et al., 2024).
* ``tinyformer.models.positional.scaling``: rotary context extension (position
  interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3).
* ``tinyformer.models.positional.alibi``: linear distance biases on the scores
  (Press et al., 2022).
* ``tinyformer.models.positional.t5``: T5's learned bias per bucket of
  distance (Raffel et al., 2020).
* ``tinyformer.models.positional.scheme``: what a scheme is to the models (the
  hooks they call); each file above defines its scheme object.
* ``tinyformer.models.positional.registry``: the schemes by name, the one list
  of names.

Every public name is re-exported here, so
``from tinyformer.models.positional import X`` works for all of them. Shapes: ``N``
batch size, ``L`` sequence length, ``E`` model width ``d_model``, ``H``
heads, ``D`` head width."""

from tinyformer.models.positional.alibi import (
    ALiBiBias,
    alibi_bias,
    alibi_slopes,
)
from tinyformer.models.positional.learned import LearnedPositionalEmbedding
from tinyformer.models.positional.registry import (
    DECODER_POSITIONAL_SCHEMES,
    POSITIONAL_SCHEMES,
    SCHEMES,
    positional_scheme,
)
from tinyformer.models.positional.rotary import apply_rotary, rotary_angles
from tinyformer.models.positional.scaling import (
    ROPE_SCALING_TYPES,
    RopeScaling,
    rotary_frequencies,
)
from tinyformer.models.positional.scheme import PositionalScheme
from tinyformer.models.positional.sinusoidal import (
    SinusoidalPositionalEncoding,
    fit_shift_matrix,
    pair_wavelengths,
    position_from_encoding,
    relative_shift_matrix,
    sinusoidal_positional_encoding,
)
from tinyformer.models.positional.t5 import (
    T5RelativePositionBias,
    t5_relative_position_bucket,
)

__all__ = [
    "DECODER_POSITIONAL_SCHEMES",
    "POSITIONAL_SCHEMES",
    "ROPE_SCALING_TYPES",
    "SCHEMES",
    "ALiBiBias",
    "LearnedPositionalEmbedding",
    "PositionalScheme",
    "RopeScaling",
    "SinusoidalPositionalEncoding",
    "T5RelativePositionBias",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "fit_shift_matrix",
    "pair_wavelengths",
    "position_from_encoding",
    "positional_scheme",
    "relative_shift_matrix",
    "rotary_angles",
    "rotary_frequencies",
    "sinusoidal_positional_encoding",
    "t5_relative_position_bucket",
]
