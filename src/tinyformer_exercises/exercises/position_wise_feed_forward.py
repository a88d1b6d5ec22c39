"""Coding exercise feed-forward: write the position-wise feed-forward
network from its two linear layers.

Its metadata (``EXERCISE``, read by the registry without importing this
file), its checks (``CHECKS``) and its wrong solutions (``WRONG_SOLUTIONS``,
which ``tests/test_exercises.py`` runs); the reference solution, from which
the template is written, is
``tests/exercise_solutions/position_wise_feed_forward.py``.
"""

from __future__ import annotations

import torch

from tinyformer.models.encoder import PositionwiseFeedForward
from tinyformer_exercises import Exercise
from tinyformer_exercises.checking import (
    FLOAT64_TOLERANCE,
    Check,
    CheckFailed,
    Functions,
    call,
    compare_close,
    reseedable,
)
from tinyformer_exercises.checking import seeded_randn as _randn

EXERCISE = Exercise(
    id="feed-forward",
    functions=("position_wise_feed_forward",),
    template="position_wise_feed_forward.py",
    chapter="transformer",
    objective="write the position-wise feed-forward network from its two linear layers",
    references=(
        "tinyformer.models.encoder.PositionwiseFeedForward.forward",
    ),
)


@reseedable
def _feed_forward(
    title: str,
    d_model: int,
    d_ff: int,
    shape: tuple[int, ...],
    activation: str,
    seed: int,
) -> Check:
    def run(f: Functions) -> None:
        torch.manual_seed(seed)
        ffn = (
            PositionwiseFeedForward(d_model, d_ff, activation=activation)
            .double()
            .eval()
        )
        x = _randn(*shape, seed=seed)
        text = f"position_wise_feed_forward(PositionwiseFeedForward({d_model}, {d_ff}, activation={activation!r}), x {shape})"
        with torch.no_grad():
            want = ffn(x)
        got = call(
            f["position_wise_feed_forward"],
            text,
            ffn,
            x,
        )
        try:
            compare_close("output", got, want, **FLOAT64_TOLERANCE)
        except CheckFailed as failed:
            raise CheckFailed(f"input: {text}", *failed.lines) from None

    return Check(title, run)


CHECKS = [
    _feed_forward(
        "ReLU, batch of 2, 5 positions, d_model 8, d_ff 32",
        8,
        32,
        (2, 5, 8),
        "relu",
        seed=1,
    ),
    _feed_forward("GELU activation", 8, 16, (2, 3, 8), "gelu", seed=2),
    _feed_forward(
        "a batch of one, odd widths d_model 5, d_ff 7",
        5,
        7,
        (1, 4, 5),
        "relu",
        seed=3,
    ),
    _feed_forward(
        "a 2-d input (positions, d_model): positions never mix",
        6,
        12,
        (7, 6),
        "relu",
        seed=4,
    ),
]

# (slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG_SOLUTIONS = [
    (
        "nn.Linear.weight used untransposed",
        [("ffn.linear1.weight.T", "ffn.linear1.weight")],
        [
            "FAIL  1.",
            "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied",
            "at position_wise_feed_forward.py, line",
        ],
    ),
    (
        "ReLU whatever the activation",
        [('F.relu if ffn.activation == "relu" else F.gelu', "F.relu")],
        [
            "pass  1.",
            "FAIL  2. GELU activation",
            "first differing entry: output",
        ],
    ),
    (
        "an activation after the second layer too",
        [
            (
                "return hidden @ ffn.linear2.weight.T + ffn.linear2.bias",
                "return F.relu(hidden @ ffn.linear2.weight.T + ffn.linear2.bias)",
            )
        ],
        ["FAIL  1.", "first differing entry: output"],
    ),
]
