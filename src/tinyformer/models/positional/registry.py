"""The positional schemes by name: the one list the models, the configs and
the labs read.

A new scheme is its file (a :class:`~tinyformer.models.positional.scheme.PositionalScheme`
beside its functions), one line below, its tests and its text.
"""

from __future__ import annotations

from tinyformer.models.positional.alibi import ALIBI, ALIBI_ASYMMETRIC
from tinyformer.models.positional.learned import LEARNED
from tinyformer.models.positional.rotary import ROTARY
from tinyformer.models.positional.scheme import NONE, PositionalScheme
from tinyformer.models.positional.sinusoidal import SINUSOIDAL
from tinyformer.models.positional.t5 import T5

__all__ = [
    "DECODER_POSITIONAL_SCHEMES",
    "POSITIONAL_SCHEMES",
    "SCHEMES",
    "positional_scheme",
]

#: Every scheme, by the name a config's ``positional`` field takes.
SCHEMES: dict[str, PositionalScheme] = {
    scheme.name: scheme
    for scheme in (
        NONE,
        SINUSOIDAL,
        LEARNED,
        ROTARY,
        ALIBI,
        ALIBI_ASYMMETRIC,
        T5,
    )
}
#: The names of the encoder's schemes (all of them).
POSITIONAL_SCHEMES: tuple[str, ...] = tuple(SCHEMES)
#: The names of the schemes a causal decoder may use.
DECODER_POSITIONAL_SCHEMES: tuple[str, ...] = tuple(
    name for name, scheme in SCHEMES.items() if scheme.decoder
)


def positional_scheme(
    name: object, *, decoder: bool = False
) -> PositionalScheme:
    """The scheme called ``name``.

    Args:
        name: one of :data:`~tinyformer.models.positional.registry.POSITIONAL_SCHEMES`.
        decoder: if True, only the schemes of
            :data:`~tinyformer.models.positional.registry.DECODER_POSITIONAL_SCHEMES` are accepted.

    Raises:
        ValueError: naming ``positional`` and the names allowed, for an
            unknown name (or one a decoder may not use).
    """
    allowed = DECODER_POSITIONAL_SCHEMES if decoder else POSITIONAL_SCHEMES
    if not isinstance(name, str) or name not in allowed:
        raise ValueError(
            f"positional={name!r} must be one of {list(allowed)}"
        )
    return SCHEMES[name]
