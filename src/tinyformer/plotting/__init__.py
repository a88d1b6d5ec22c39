"""The figure functions the chapters call. Each returns a new :class:`matplotlib.figure.Figure`.

Data charts live in :mod:`tinyformer.plotting.charts`, schematic diagrams in
:mod:`tinyformer.plotting.diagrams`; every public name is re-exported here, so
``from tinyformer.plotting import plot_encoding`` works. Model code never imports this package.
"""

from tinyformer.plotting.charts import *  # noqa: F403
from tinyformer.plotting.charts import __all__ as _charts_all

__all__ = [*_charts_all]
