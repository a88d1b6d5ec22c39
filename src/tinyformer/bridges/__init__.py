"""Floor 2: the library next to other libraries: ``hf`` (Hugging Face models into tinyformer's),
``memory`` (peak and retained memory), ``flops`` (operation counts)."""
