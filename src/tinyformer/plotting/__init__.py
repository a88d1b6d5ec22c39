"""The figure functions the chapters call. Each returns a new
:class:`matplotlib.figure.Figure`.

Data charts live in :mod:`tinyformer.plotting.charts` and
:mod:`tinyformer.plotting.encoding`, schematic diagrams in
:mod:`tinyformer.plotting.diagrams`; every public name is re-exported here,
so ``from tinyformer.plotting import plot_encoding`` works. Model code never
imports this package."""

from tinyformer.plotting import (
    charts,
    context,
    decoding,
    diagrams,
    encoding,
    flash,
)
from tinyformer.plotting.charts import *  # noqa: F403
from tinyformer.plotting.context import *  # noqa: F403
from tinyformer.plotting.decoding import *  # noqa: F403
from tinyformer.plotting.diagrams import *  # noqa: F403
from tinyformer.plotting.encoding import *  # noqa: F403
from tinyformer.plotting.flash import *  # noqa: F403

__all__ = sorted(
    {
        *charts.__all__,
        *context.__all__,
        *decoding.__all__,
        *diagrams.__all__,
        *encoding.__all__,
        *flash.__all__,
    }
)
