"""Floor 3: the chapters' experiments: ``tasks``, ``training``, ``extrapolation``,
``long_context``, ``language``, with their ``presets`` and ``data``. They train and measure the
models of :mod:`tinyformer.models`; they never draw (that is :mod:`tinyformer.plotting`)."""
