"""Configuration of the kernels that execute the chapters (conf.py points IPYTHONDIR at a copy).

``get_config`` is injected by IPython's config loader.
"""

c = get_config()  # noqa: F821

# The kernels listen on 127.0.0.1 only; ipykernel's start-up warning about unencrypted TCP would
# otherwise be printed by every build. Cell warnings are unaffected: they go to the cell's stderr,
# which fails the build (nb_output_stderr = "error").
c.IPKernelApp.log_level = "ERROR"
# Figures display as images in every chapter, with or without `%matplotlib inline` in it: the inline
# backend registers the formatters that turn a Figure (shown or glued) into an image. Without them a
# glued or displayed Figure is only the text "<Figure size ...>" (the build then fails on that repr,
# conf/_ext/tinyformer_build.py). `%matplotlib inline` in a chapter changes nothing after this.
c.InteractiveShellApp.matplotlib = "inline"
# An expected error (a cell tagged raises-exception, STYLE.md) shows as its type and message, the way
# a reader meets it: a full traceback walked through torch's internals and put the build machine's
# paths on the page (".../site-packages/torch/nn/modules/module.py"). A cell that fails the build still
# names its source and the error in the build log (nbclient's CellExecutionError).
c.InteractiveShell.xmode = "Minimal"
# No history database: the kernels are throwaway.
c.HistoryManager.enabled = False
# Start-up of every chapter kernel, before its first cell:
# - every warning is shown once per place, also the DeprecationWarnings Python hides outside __main__;
#   it lands in the cell's stderr, which fails the build;
# - torch, numpy and random start from the book's seed (conf.py exports it), torch may use only
#   deterministic algorithms and one thread, so two builds compute the same bytes.
c.InteractiveShellApp.exec_lines = [
    "import os as _os, random as _random, warnings as _warnings",
    "_warnings.simplefilter('default')",
    # matplotlib-inline 0.2.2 names a traitlets observer the pre-4.1 way, and setting
    # InlineBackend.figure_formats (below) makes traitlets warn about it on every chapter's first
    # figure; known upstream (matplotlib-inline's config.py, reported e.g. in
    # kitzeslab/opensoundscape#1043). Only this one warning is silenced.
    "_warnings.filterwarnings('ignore', message=r'InlineBackend\\._figure_formats?_changed is deprecated', category=DeprecationWarning)",
    "import numpy as _np, torch as _torch",
    "_seed = int(_os.environ['TINYFORMER_SEED'])",
    "_random.seed(_seed); _np.random.seed(_seed); _torch.manual_seed(_seed)",
    "_torch.use_deterministic_algorithms(True)",
    # One thread per kernel: chapters execute side by side, one kernel per core
    # (conf/_ext/tinyformer_build.py), and two kernels each running two threads on two cores lose
    # most of their time waiting for each other. The same in a chapter executed alone, so a
    # chapter computes the same bytes however it was executed.
    "_torch.set_num_threads(1)",
    "del _os, _random, _warnings, _np, _torch, _seed",
]
# Figures at twice the pixel density of their size on the page ("retina": a PNG at 2 x figure.dpi, shown
# at figure.dpi), so they stay sharp on high-density screens and when opened full size; the PNG's size
# on the page comes from the output's width and height, which myst-nb passes on, and Sphinx links every
# image with a width to the file itself (html_scaled_image_link), so each figure opens full size.
# savefig.dpi in matplotlibrc does not act here: IPython renders notebook figures at figure.dpi.
# Every figure is also emitted as vector PDF: myst-nb puts it in the PDF edition (the LaTeX builder
# prefers application/pdf), while the site shows the PNG (the HTML builder ignores PDF).
c.InlineBackend.figure_formats = {"retina", "pdf"}
# Each figure's PNG names the size of its smallest text (conf/kernel_figures.py; conf.py names this folder).
import os  # noqa: E402

c.InteractiveShellApp.exec_files = [os.path.join(os.environ["TINYFORMER_CONF"], "kernel_figures.py")]
