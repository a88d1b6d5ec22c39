"""Floor 4: the figure functions the chapters call, one module per chapter
(``attention`` 1, ``encoding`` 2, ``multihead`` 3, ``encoder`` 4, ``beyond``
5, ``decoding`` 6, ``context`` 7, ``flash`` 8, ``induction`` 9, ``serving``
10), the
schematic ``diagrams``,
and the shared look, :mod:`tinyformer.plotting.style`. Each function returns
a new :class:`matplotlib.figure.Figure`; every public name is re-exported
here, so ``from tinyformer.plotting import plot_encoding`` works. Model code
never imports this package."""

from tinyformer.plotting import (
    attention,
    beyond,
    context,
    decoding,
    diagrams,
    encoder,
    encoding,
    flash,
    induction,
    multihead,
    serving,
)
from tinyformer.plotting.attention import *  # noqa: F403
from tinyformer.plotting.beyond import *  # noqa: F403
from tinyformer.plotting.context import *  # noqa: F403
from tinyformer.plotting.decoding import *  # noqa: F403
from tinyformer.plotting.diagrams import *  # noqa: F403
from tinyformer.plotting.encoder import *  # noqa: F403
from tinyformer.plotting.encoding import *  # noqa: F403
from tinyformer.plotting.flash import *  # noqa: F403
from tinyformer.plotting.induction import *  # noqa: F403
from tinyformer.plotting.multihead import *  # noqa: F403
from tinyformer.plotting.serving import *  # noqa: F403

__all__ = sorted(
    {
        *attention.__all__,
        *beyond.__all__,
        *context.__all__,
        *decoding.__all__,
        *diagrams.__all__,
        *encoder.__all__,
        *encoding.__all__,
        *flash.__all__,
        *induction.__all__,
        *multihead.__all__,
        *serving.__all__,
    }
)
