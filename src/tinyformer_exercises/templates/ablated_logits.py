"""Coding exercise ablate-heads (chapter 9, "What attention learns: induction
heads").

Objective assessed: remove chosen heads from a trained decoder by zeroing
their outputs, and leave the model as it was.

Write the body of the function below, then check it, offline, from this
file's folder, in an environment with tinyformer installed,

    python3 -m tinyformer_exercises ablate-heads ablated_logits.py

or from a clone of the book's repository, giving the path of this file,

    nox -s check -- ablate-heads path/to/ablated_logits.py

You may use torch and the model's own modules (``model.layers[i].attn``
and its ``out_proj``, forward hooks, ...), but not tinyformer's
``ablate_heads``."""

from torch import Tensor

from tinyformer.models.decoder import TinyDecoder


def ablated_logits(
    model: TinyDecoder,
    input_ids: Tensor,
    heads: dict[int, list[int]],
) -> Tensor:
    """The model's next-token logits on ``input_ids`` with the outputs of
    the chosen heads set to zero before their layer's output projection,
    so that they add nothing to the residual stream.

    Args:
        model: a ``TinyDecoder``; each layer's attention
            (``model.layers[i].attn``) merges its heads into ``(N, L, E)``,
            head ``h`` in features ``h * D .. (h + 1) * D - 1``
            (``D = model.config.head_dim``), then applies ``out_proj``.
        input_ids: ``(N, L)`` token ids.
        heads: ``{layer: [head, ...]}``, counted from 0.

    Returns:
        ``(N, L, V)`` logits. The model is left as it was: its weights
        unchanged, no hook left behind.
    """
    raise NotImplementedError
