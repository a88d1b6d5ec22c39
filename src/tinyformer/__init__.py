"""tinyformer: the small PyTorch library behind the *tinyformer* textbook.

Modules, in reading order (each depends only on the ones before it):

* :mod:`tinyformer.positional`: sinusoidal positional encoding (Vaswani et
  al., 2017, Sec. 3.5).
* :mod:`tinyformer.attention`: scaled dot-product and multi-head attention
  (Sec. 3.2).
* :mod:`tinyformer.decoder`: a causal decoder-only language model with a
  key-value cache and generation; :mod:`tinyformer.hf` converts Hugging
  Face's GPT-2 and Llama into it.
* :mod:`tinyformer.language`: next-token training on Shakespeare.
* :mod:`tinyformer.tasks`: the small, seeded experiments the chapters run.
* :mod:`tinyformer.plotting`: the figure functions the chapters call.

Shape legend, used in every docstring: ``N`` batch size, ``L`` target
(query) length, ``S`` source (key/value) length, ``E`` model width
``d_model``, ``H`` number of heads ``num_heads``, ``D`` head width
``head_dim = E // H``."""

__version__ = "0.2.0"
