"""Run by every chapter kernel at start-up (``ipython_kernel_config.py``, ``exec_files``): each figure's
PNG names the size of its smallest text.

A figure drawn for the page's column (about 6.8 inches, shown at 680 CSS pixels) is shown at about half
its size on a 390-pixel phone, where its smallest labels would be 5 to 6 pixels tall. The PNG the inline
backend makes (retina: twice the pixels) is made here instead, the same way (IPython's
``retina_figure``, ``bbox_inches="tight"``), with the size in points of the figure's smallest visible
text in its description (a PNG text chunk). ``conf/_ext/tinyformer_site.py`` reads it and gives the
figure, on a phone, the width at which that text is 9 CSS pixels; a wider figure scrolls sideways in its
box, and a tap opens the full image.
"""

from IPython import get_ipython as _get_ipython
from IPython.core.pylabtools import retina_figure as _retina_figure
from matplotlib.figure import Figure as _Figure
from matplotlib.text import Text as _Text

#: How the PNG describes itself, followed by the size of its smallest text in points.
DESCRIPTION = "tinyformer figure; smallest text"


def _smallest_text(figure) -> float:
    sizes = [t.get_fontsize() for t in figure.findobj(_Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes, default=0.0)


def _retina_png(figure):
    metadata = {"Description": f"{DESCRIPTION} {_smallest_text(figure):.2f} pt"}
    return _retina_figure(figure, base64=True, bbox_inches="tight", metadata=metadata)


def _register_png(*_):
    # `%matplotlib inline` (every chapter's first cell) sets the inline backend's PNG formatter up anew,
    # so before every cell a formatter the backend set is replaced by this one; where none is set (a
    # kernel without the backend's formatters), none is added.
    png = _get_ipython().display_formatter.formatters["image/png"]
    if png.type_printers.get(_Figure) not in (None, _retina_png):
        png.for_type(_Figure, _retina_png)


_register_png()
_get_ipython().events.register("pre_run_cell", _register_png)
