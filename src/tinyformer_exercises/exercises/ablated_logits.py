"""Coding exercise ablate-heads: remove chosen heads from a trained decoder
by zeroing their outputs, and leave the model as it was.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is ``tests/exercise_solutions/ablated_logits.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinyformer.labs.induction import ablate_heads, repeated_tokens
from tinyformer.models.decoder import TinyDecoder
from tinyformer.models.decoder_config import DecoderConfig
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    matches,
    reseedable,
)

EXERCISE = Exercise(
    id="ablate-heads",
    functions=("ablated_logits",),
    template="ablated_logits.py",
    chapter="induction-heads",
    objective="remove chosen heads from a trained decoder by zeroing their outputs, and leave the model as it was",
    references=("tinyformer.labs.induction.ablate_heads",),
)

READING = (
    "inside layer i's attention the heads are merged side by side into (N, L, E), head h in features "
    "h * D .. (h + 1) * D - 1; an ablated head's features are set to 0 there, before out_proj, and every "
    "other computation is the model's own"
)


def _model(positional: str, attention_only: bool, seed: int) -> TinyDecoder:
    """A small float64 decoder of 2 layers of 4 heads, weights from
    ``seed`` (spread wider than at initialisation, so that every head
    matters)."""
    config = DecoderConfig(
        vocab_size=16,
        d_model=16,
        num_heads=4,
        d_ff=32,
        num_layers=2,
        positional=positional,
        max_len=32,
        attention_only=attention_only,
    )
    torch.manual_seed(seed)
    model = TinyDecoder(config).double().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def _logits(model: TinyDecoder, ids: Tensor, heads: dict) -> Tensor:
    with torch.no_grad(), ablate_heads(model, heads):
        return model(ids)


def _hints(
    got: object, model: TinyDecoder, ids: Tensor, heads: dict
) -> list[str]:
    hints = []
    if matches(got, _logits(model, ids, {})):
        hints.append(
            "your logits are the model's own: no head was ablated (heads counted from 0, "
            "model.layers[i].attn for layer i)"
        )
    for shift, name in ((-1, "the layer before"), (1, "the layer after")):
        shifted = {
            layer + shift: chosen
            for layer, chosen in heads.items()
            if 0 <= layer + shift < len(model.layers)
        }
        if (
            shifted
            and len(shifted) == len(heads)
            and matches(got, _logits(model, ids, shifted))
        ):
            hints.append(
                f"you ablated the heads of {name} each chosen one: layers are counted from 0, "
                "model.layers[i] is layer i"
            )
    return hints


@reseedable
def _ablation(
    title: str,
    heads: dict[int, list[int]],
    *,
    positional: str = "rotary",
    attention_only: bool = True,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        model = _model(positional, attention_only, seed)
        ids = repeated_tokens(
            2, 5, 16, generator=torch.Generator().manual_seed(seed)
        )
        want = _logits(model, ids, heads)
        text = f"ablated_logits(model, input_ids {tuple(ids.shape)}, heads={heads})"
        got = call(f["ablated_logits"], text, model, ids.clone(), heads)
        try:
            compare_close("logits", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(
                f"input: {text}; a {positional} decoder of 2 layers of 4 heads"
                + (", attention only" if attention_only else ""),
                *failed.lines,
                mistakes=_hints(got, model, ids, heads),
                reading=READING,
            ) from None

    return Check(title, run)


CHECKS = [
    _ablation("one head of layer 1", {1: [2]}, seed=1),
    _ablation(
        "two heads of layer 0 and one of layer 1",
        {0: [0, 3], 1: [1]},
        seed=2,
    ),
    _ablation("no head: the model's own logits", {}, seed=3),
    _ablation("every head of layer 0", {0: [0, 1, 2, 3]}, seed=4),
    _ablation(
        "a decoder with feed-forward layers and learned positions",
        {1: [0]},
        positional="learned",
        attention_only=False,
        seed=5,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "the head's features zeroed after the output projection",
        [
            (
                ".attn.out_proj.register_forward_pre_hook(",
                ".attn.out_proj.register_forward_hook(",
            ),
            ("def hook(module, args):", "def hook(module, args, output):"),
            ("merged = args[0].clone()", "merged = output.clone()"),
            ("return (merged,)", "return merged"),
        ],
        ["FAIL  1. one head of layer 1", "first differing entry: logits"],
    ),
    (
        "layers counted from 1",
        [("model.layers[layer].attn", "model.layers[layer - 1].attn")],
        [
            "FAIL  1.",
            "you ablated the heads of the layer before each chosen one",
        ],
    ),
]
