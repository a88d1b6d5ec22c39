"""tinyformer: the small PyTorch library behind the *tinyformer* textbook.

The package is built in floors. Read the models first; the rest is what the chapters need
around them. A module imports from its own floor and the floors below it, never from a floor
above (``tests/test_layout.py`` walks every import and fails on one that does, or on a circle).

Floor 4, :mod:`tinyformer.plotting`: the figures the chapters draw.
    ``style`` (the shared look), then one module per chapter: ``attention`` (1),
    ``encoding`` (2), ``multihead`` (3), ``encoder`` (4), ``beyond`` (5), ``decoding`` (6),
    ``context`` (7), ``flash`` (8), ``induction`` (9), ``serving`` (10); and ``diagrams`` (schematics drawn
    from the library's objects).
Floor 3, :mod:`tinyformer.labs`: the chapters' experiments.
    ``lab`` (what the length labs share: settings, mean and spread over seeds),
    ``tasks`` (small seeded experiments), ``training`` (the encoder's training loop and
    chapter 4's head findings), ``extrapolation`` (chapter 5's length lab, encoders),
    ``long_context`` (chapter 7's length lab, causal decoders), ``language`` (Hamlet, a
    character tokenizer, next-token training), ``induction`` (chapter 9's induction heads:
    repeated tokens, head scores, ablation, the lab), ``serving`` (chapter 10's reserved cache
    memory, cache quality and draft acceptance), ``presets`` (TOML presets) and ``data``.
Floor 2, :mod:`tinyformer.bridges`: the library next to other libraries.
    ``hf`` (Hugging Face's GPT-2, Llama, Mistral and dense DeepSeek-V3 into a :class:`TinyDecoder`), ``memory``
    (peak and retained memory), ``flops`` (operation counts with PyTorch's FLOP counter).
Floor 1, :mod:`tinyformer.models`: what the book teaches.
    ``attention`` (scaled dot-product and multi-head attention; Vaswani et al., 2017,
    Sec. 3.2), ``positional`` (sinusoidal, learned, rotary with its context extensions,
    ALiBi), ``encoder`` (the encoder layer and :class:`TinyTransformer`), ``decoder_config``
    (a decoder's recipe), ``cache`` (the key-value cache and the causal masks), ``decoder``
    (the causal decoder-only language model and generation), ``latent_attention``
    (multi-head latent attention, DeepSeek-V2), ``quantized_cache`` (a cache in a few bits,
    KIVI), ``paged_cache`` (a cache in blocks, PagedAttention), ``speculative`` (speculative
    decoding's rejection rule), ``flash`` (the online softmax and FlashAttention's tiles).
Floor 0, :mod:`tinyformer.tools`: plumbing.
    ``checks`` (argument checks with clear errors), ``config`` (configs read from mappings
    and TOML), ``jobs`` (runs a lab's grid on an executor), ``moved`` (the import paths of
    edition 0.2.0).

The coding exercises' checker is a package of its own, :mod:`tinyformer_exercises`, shipped in
the same wheel; it imports tinyformer, and tinyformer never imports it.

The import paths of edition 0.2.0 (``tinyformer.attention``, ``tinyformer.positional``,
``tinyformer.transformer``, ``tinyformer.decoder``, ``tinyformer.hf``, ``tinyformer.flash``,
``tinyformer.long_context``, ...) still work: each names the module that now lives on a floor
(:data:`tinyformer.tools.moved.MOVED`), so ``tinyformer.attention is
tinyformer.models.attention``.

Shape legend, used in every docstring: ``N`` batch size, ``L`` target (query) length, ``S``
source (key/value) length, ``E`` model width ``d_model``, ``H`` number of heads ``num_heads``,
``D`` head width ``head_dim = E // H``."""

from tinyformer.tools import moved as _moved

__version__ = "0.3.0"

_moved.install()
