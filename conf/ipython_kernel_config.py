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
