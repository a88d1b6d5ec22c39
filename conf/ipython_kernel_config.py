"""Configuration of the kernels that execute the chapters (conf.py points IPYTHONDIR at a copy).

``get_config`` is injected by IPython's config loader.
"""

c = get_config()  # noqa: F821

# The kernels listen on 127.0.0.1 only; ipykernel's start-up warning about unencrypted TCP would
# otherwise be printed by every build. Cell warnings are unaffected: they go to the cell's stderr,
# which fails the build (nb_output_stderr = "error").
c.IPKernelApp.log_level = "ERROR"
# No history database: the kernels are throwaway.
c.HistoryManager.enabled = False
# Start-up of every chapter kernel, before its first cell:
# - every warning is shown once per place, also the DeprecationWarnings Python hides outside __main__;
#   it lands in the cell's stderr, which fails the build;
# - torch, numpy and random start from the book's seed (conf.py exports it), and torch may use only
#   deterministic algorithms, so two builds compute the same bytes.
c.InteractiveShellApp.exec_lines = [
    "import os as _os, random as _random, warnings as _warnings",
    "_warnings.simplefilter('default')",
    "import numpy as _np, torch as _torch",
    "_seed = int(_os.environ['TINYFORMER_SEED'])",
    "_random.seed(_seed); _np.random.seed(_seed); _torch.manual_seed(_seed)",
    "_torch.use_deterministic_algorithms(True)",
    "del _os, _random, _warnings, _np, _torch, _seed",
]
# Every matplotlib figure is also emitted as vector PDF: myst-nb puts it in the PDF edition (the LaTeX
# builder prefers application/pdf), while the site shows the PNG (the HTML builder ignores PDF).
c.InlineBackend.figure_formats = {"png", "pdf"}
# matplotlib-inline 0.2 applies that setting through a traitlets handler that traitlets deprecated
# (DeprecationWarning, which would fail the build): the backend's settings object is created here, once,
# with that one warning silenced; the chapters' `%matplotlib inline` then reuses it.
c.InteractiveShellApp.exec_lines += [
    "import warnings as _warnings, matplotlib_inline.config as _inline_config\n"
    "with _warnings.catch_warnings():\n"
    "    _warnings.filterwarnings('ignore', 'InlineBackend._figure_formats_changed', DeprecationWarning)\n"
    "    _inline_config.InlineBackend.instance(parent=get_ipython())\n"
    "del _warnings, _inline_config",
]
