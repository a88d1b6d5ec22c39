"""Floor 1: the models the book teaches, one module per idea: ``attention``, ``positional``,
``encoder``, ``cache``, ``latent_attention``, ``decoder``, ``speculative``, ``flash``. They import :mod:`tinyformer.tools` and each
other, nothing above."""
