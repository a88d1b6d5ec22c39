"""The coding exercises' checker: right solutions pass, plausible wrong ones fail with the message a student needs.

The reference solutions are in ``tests/exercise_solutions/`` (out of the site's sources); each wrong
solution is a reference solution with one realistic slip put in by a text replacement, so the slip is
visible in this file.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyformer_exercises import EXERCISE_MODULES, EXERCISES, TEMPLATES
from tinyformer_exercises.authoring import template_from_solution
from tinyformer_exercises.checks import CHECKS
from tinyformer_exercises.cli import main

SOLUTIONS = Path(__file__).resolve().parent / "exercise_solutions"

# (exercise id, slip, [(text in the reference solution, replacement)], fragments the report must contain)
WRONG = [
    (
        "causal-mask",
        "wrong polarity (upper triangle)",
        [(".tril()", ".triu()")],
        ["FAIL  2.", "first differing entry: causal_mask(4)[0, 1]: expected False, got True"],
    ),
    (
        "causal-mask",
        "off by one: the diagonal blocked",
        [(".tril()", ".tril(-1)")],
        ["FAIL  1.", "causal_mask(1)[0, 0]: expected True, got False"],
    ),
    (
        "causal-mask",
        "a float mask instead of a bool one",
        [("dtype=torch.bool", "dtype=torch.float32")],
        ["expected: causal_mask(1) with dtype torch.bool", "got:      (1, 1) torch.float32 tensor"],
    ),
    (
        "scaled-dot-product-attention",
        "missing square root: divides by d_k",
        [("math.sqrt(query.size(-1))", "query.size(-1)")],
        [
            "FAIL  1. no mask",
            "first differing entry: weights[0, 0, 0]",
            "tolerance: |got - expected| <= 1e-07",
            "What the failures point to:\n  - your scores are divided by d_k, the width of the queries and keys, not by its square root",
        ],
    ),
    (
        "scaled-dot-product-attention",
        "mask of the wrong polarity (True = blocked)",
        [("masked_fill(~attn_mask,", "masked_fill(attn_mask,")],
        ["pass  1.", "FAIL  4. boolean attn_mask", "attn_mask (4, 5) torch.bool", "first differing entry: weights"],
    ),
    (
        "scaled-dot-product-attention",
        "softmax over the queries instead of the keys",
        [(".softmax(dim=-1)", ".softmax(dim=-2)")],
        ["FAIL  1.", "first differing entry: weights[0, 0, 0]"],
    ),
    (
        "scaled-dot-product-attention",
        "a fully masked row left to the softmax (NaN)",
        [
            (
                ".masked_fill(blocked, 0.0)\n        .softmax(dim=-1)\n        .masked_fill(blocked, 0.0)",
                ".softmax(dim=-1)",
            )
        ],
        ["FAIL  7. a query that may attend to nothing", "weights[0, 1, 0]: expected 0, got nan"],
    ),
    (
        "scaled-dot-product-attention",
        "is_causal aligned at the bottom right, as under a cache",
        [(").tril()", ").tril(key.size(-2) - query.size(-2))")],
        ["pass  7.", "FAIL  8. is_causal=True with L != S", "aligned at the bottom right"],
    ),
    (
        "scaled-dot-product-attention",
        "is_causal replaces attn_mask instead of combining with it",
        [
            (
                "        if attn_mask is None:\n            attn_mask = causal",
                "        if True:\n            attn_mask = causal",
            )
        ],
        ["pass  8.", "FAIL  9. is_causal=True and a boolean attn_mask", "ignores attn_mask"],
    ),
    (
        "split-half-encoding",
        "sines and cosines interleaved (the paper's layout) instead of in two halves",
        [
            (
                "torch.cat((angle.sin(), cosines), dim=1)",
                "torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1)[:, :d_model]",
            )
        ],
        ["FAIL  1.", "first differing entry: PE[0, 1]: expected 0, got 1", "your table interleaves sines and cosines"],
    ),
    (
        "split-half-encoding",
        "exponent i/d_model instead of 2i/d_model",
        [("pair / d_model", "pair / 2 / d_model")],
        ["FAIL  1.", "first differing entry: PE[1, 1]"],
    ),
    (
        "split-half-encoding",
        "an odd width gets as many cosines as sines",
        [("angle[:, : d_model // 2].cos()", "angle.cos()")],
        [
            "pass  1.",
            "FAIL  2. 10 positions, d_model = 7",
            "expected: PE of shape (10, 7)",
            "got:      PE of shape (10, 8)",
        ],
    ),
    (
        "split-half-shift",
        "rotation the wrong way round (the block transposed)",
        [("= sin  #", "= -sin  #"), ("= -sin\n", "= sin\n")],
        ["pass  1.", "FAIL  2. offset 3", "first differing entry: R[0, 8]", "R_k @ PE[pos] == PE[pos + k]"],
    ),
    (
        "split-half-shift",
        "the interleaved layout's R_k (pairs in rows 2i, 2i+1)",
        [
            ("sine = torch.arange(d_model // 2)\n", "sine = torch.arange(0, d_model, 2)\n"),
            ("cosine = sine + d_model // 2\n", "cosine = sine + 1\n"),
        ],
        ["pass  1.", "FAIL  2. offset 3", "your matrix is R_k of the interleaved table"],
    ),
    (
        "split-half-shift",
        "frequency base^(+2i/d_model): the angle multiplied instead of divided",
        [("offset / base **", "offset * base **")],
        ["FAIL  7. R_4 @ PE[pos] == PE[pos + 4]", "shifted[pos] = R_4 @ PE[pos] must equal PE[pos + 4]"],
    ),
    (
        "fused-qkv-heads",
        "split by reshaping straight to (N, H, L, D), without the transpose",
        [
            (
                "part.reshape(\n                batch_size, seq_len, num_heads, head_dim\n            ).transpose(1, 2)",
                "part.reshape(batch_size, num_heads, seq_len, head_dim)",
            )
        ],
        [
            'FAIL  1. layout "gpt2"',
            "first differing entry: q[0, 0, 1, 0]",
            "without the transpose",
        ],
    ),
    (
        "fused-qkv-heads",
        "the per-head layout read as [q | k | v]",
        [('if layout == "gpt2":', 'if layout in ("gpt2", "per-head"):')],
        [
            "pass  1.",
            'FAIL  3. layout "per-head"',
            'you read the layout="per-head" features as if they were laid out "gpt2"',
        ],
    ),
    (
        "fused-qkv-heads",
        "the per-head layout split into q, k, v before the heads",
        [
            (
                "heads = qkv.reshape(\n            batch_size, seq_len, num_heads, 3 * head_dim\n        )\n        return heads.transpose(1, 2).split(head_dim, dim=-1)",
                "heads = qkv.reshape(batch_size, seq_len, 3, num_heads, head_dim)\n        return tuple(heads[:, :, i].transpose(1, 2) for i in range(3))",
            )
        ],
        ["pass  1.", "FAIL  3.", 'laid out "gpt2"'],
    ),
    (
        "multi-head-from-heads",
        "columns of nn.Linear.weight taken as W^Q_h (it stores W transposed)",
        [(f"mha.{p}_proj.weight[rows].T", f"mha.{p}_proj.weight[:, rows]") for p in "qkv"],
        ["FAIL  1. self-attention", "first differing entry: output[0, 0, 0]"],
    ),
    (
        "multi-head-from-heads",
        "scores scaled by sqrt(d_model) instead of sqrt(head_dim)",
        [
            (
                "scaled_dot_product_attention(q, k,",
                "scaled_dot_product_attention(q * (mha.head_dim / mha.d_model) ** 0.5, k,",
            )
        ],
        [
            "FAIL  1. self-attention",
            "pass  4. one head",
            "first differing entry: output",
            "  - your scores are divided by the square root of d_model",
        ],
    ),
    (
        "multi-head-from-heads",
        "no output projection",
        [("return mha.out_proj(torch.cat(heads, dim=-1))", "return torch.cat(heads, dim=-1)")],
        [
            "FAIL  1.",
            "first differing entry: output[0, 0, 0]",
            "  - your output is the heads side by side, without the output projection",
        ],
    ),
    (
        "multi-head-from-heads",
        "calls the module instead of building it",
        [("    heads = []\n", "    return mha(query, key, value, attn_mask=attn_mask)[0]\n")],
        [
            "called the library's own tinyformer.models.attention.MultiHeadAttention.forward (the exercise asks you to write it yourself), at multi_head_attention.py, line"
        ],
    ),
    (
        "feed-forward",
        "nn.Linear.weight used untransposed",
        [("ffn.linear1.weight.T", "ffn.linear1.weight")],
        [
            "FAIL  1.",
            "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied",
            "at position_wise_feed_forward.py, line",
        ],
    ),
    (
        "feed-forward",
        "ReLU whatever the activation",
        [('F.relu if ffn.activation == "relu" else F.gelu', "F.relu")],
        ["pass  1.", "FAIL  2. GELU activation", "first differing entry: output"],
    ),
    (
        "feed-forward",
        "an activation after the second layer too",
        [
            (
                "return hidden @ ffn.linear2.weight.T + ffn.linear2.bias",
                "return F.relu(hidden @ ffn.linear2.weight.T + ffn.linear2.bias)",
            )
        ],
        ["FAIL  1.", "first differing entry: output"],
    ),
    (
        "encoder-layer",
        "post-LN and pre-LN swapped",
        [("if layer.norm_first:", "if not layer.norm_first:")],
        [
            "FAIL  1. post-LN",
            "FAIL  2. pre-LN",
            "first differing entry: output[0, 0, 0]",
            "  - your layer places its norms as the other variant does",
        ],
    ),
    (
        "encoder-layer",
        "LayerNorm inside the residual branch instead of after the sum (post-LN)",
        [("x = layer.norm1(x + attend(x))", "x = x + layer.norm1(attend(x))")],
        ["FAIL  1. post-LN", "pass  2. pre-LN", "first differing entry: output"],
    ),
    (
        "encoder-layer",
        "key_padding_mask read with the opposite polarity (True = a real token)",
        [
            (
                "h, key_padding_mask=key_padding_mask",
                "h, key_padding_mask=None if key_padding_mask is None else ~key_padding_mask",
            )
        ],
        [
            "pass  1. post-LN (the paper)",
            "FAIL  3. post-LN with padding",
            "FAIL  4. pre-LN with padding",
            "  - your layer reads key_padding_mask with the opposite polarity",
        ],
    ),
    (
        "encoder-layer",
        "pre-LN that normalises the residual stream itself",
        [
            (
                "x = x + attend(layer.norm1(x))\n        return x + layer.ffn(layer.norm2(x))",
                "x = layer.norm1(x)\n        x = x + attend(x)\n        x = layer.norm2(x)\n        return x + layer.ffn(x)",
            )
        ],
        [
            "pass  1. post-LN (the paper)",
            "FAIL  2. pre-LN (norm_first=True)",
            "  - your pre-LN layer normalises the residual stream itself",
        ],
    ),
    (
        "encoder-layer",
        "no residual around the feed-forward network",
        [("return layer.norm2(x + layer.ffn(x))", "return layer.norm2(layer.ffn(x))")],
        ["FAIL  1. post-LN", "first differing entry: output"],
    ),
    (
        "apply-rotary",
        "the two pairings swapped (split halves by default)",
        [("if interleaved:", "if not interleaved:")],
        [
            "FAIL  1. interleaved pairs",
            "FAIL  2. split-half pairs",
            "first differing entry: output[0, 1, 0]",
            "What the failures point to:\n  - your result pairs the features the other way",
        ],
    ),
    (
        "apply-rotary",
        "the angle's sign flipped (rotation the wrong way)",
        [
            (
                "first * cos - second * sin,\n        first * sin + second * cos,",
                "first * cos + second * sin,\n        -first * sin + second * cos,",
            )
        ],
        [
            "FAIL  1.",
            "first differing entry: output[0, 1, 0]",
            "(a, b) -> (a cos t - b sin t, a sin t + b cos t)",
            "What the failures point to:\n  - your pairs turn the reverse way, by -t instead of t\n",
        ],
    ),
    (
        "apply-rotary",
        "exponent i/D instead of 2i/D",
        [("pair / head_dim", "pair / 2 / head_dim")],
        ["FAIL  1.", "first differing entry: output[0, 1, 2]", "pass  7. a 2-d x (L, D) with a single pair"],
    ),
    (
        "apply-rotary",
        "explicit positions ignored",
        [("if positions is None:", "if True:")],
        ["pass  1.", "pass  2.", "FAIL  3. explicit positions", "positions=[3, 0, 7, 100, 2]"],
    ),
    (
        "apply-rotary",
        "angles in float32 (torch.arange without a dtype)",
        [("torch.arange(0, head_dim, 2, dtype=torch.float64)", "torch.arange(0, head_dim, 2)")],
        ["pass  1.", "FAIL  8. far positions", "the largest difference is only", "compute the angles in float64"],
    ),
    (
        "apply-rotary",
        "a float64 result whatever the dtype of x",
        [(".to(x.dtype)", "")],
        ["pass  5.", "FAIL  6. float32 x", "expected: output of dtype torch.float32 (the dtype of x)"],
    ),
    (
        "alibi-bias",
        "slopes 2^(-8h/H) for every H, ignoring the rule for H not a power of two",
        [("closest = 2 ** math.floor(math.log2(num_heads))", "closest = num_heads")],
        [
            "pass  1. alibi_slopes(8)",
            "FAIL  2. alibi_slopes(6)",
            "expected slopes: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3",
            "your slopes:     2^-1.333, 2^-2.667",
            "pass  5. alibi_bias(8, 5)",
            "FAIL  6. alibi_bias(6, 3, 5)",
        ],
    ),
    (
        "alibi-bias",
        "bias with the wrong sign (a reward for distance)",
        [("return -slopes[:, None, None] * distance", "return slopes[:, None, None] * distance")],
        ["pass  4.", "FAIL  5. alibi_bias(8, 5)", "first differing entry: bias[0, 0, 1]: expected -0.5, got 0.5"],
    ),
    (
        "alibi-bias",
        "j - i instead of |i - j|",
        [("(query_pos - key_pos).abs()", "key_pos - query_pos")],
        ["FAIL  5.", "first differing entry: bias[0, 1, 0]: expected -0.5, got 0.5", "-m_h * |i - j|"],
    ),
    (
        "repeat-kv-heads",
        "heads tiled with .repeat (head h reads h % H_kv) instead of repeated in place",
        [("x.repeat_interleave(groups, dim=1)", "x.repeat(1, groups, 1, 1)")],
        [
            "FAIL  1.",
            "pass  2. repeat_kv_heads(x (1, 1, 3, 5), num_heads=4)",
            "first differing entry: out[0, 1, 0, 0]",
            "your query heads 0, ..., 5 read key/value heads [0, 1, 0, 1, 0, 1]; they must read [0, 0, 0, 1, 1, 1]",
            "head h reads h % H_kv: .repeat tiles the heads",
            "FAIL  5. causal attention of 6 query heads",
        ],
    ),
    (
        "repeat-kv-heads",
        "repeated along the length (dim 2) instead of the heads",
        [("dim=1)", "dim=2)")],
        [
            "FAIL  1.",
            "expected: out of shape (2, 6, 5, 4)",
            "got:      out of shape (2, 2, 15, 4)",
            "you repeated along the length or the width of x (N, H_kv, S, D), not along its heads",
            "pass  3. repeat_kv_heads(x (2, 3, 4, 2), num_heads=3)",
        ],
    ),
    (
        "kv-cache-step",
        "causal mask aligned at the top left (tril() instead of tril(P))",
        [(".tril(past)", ".tril()")],
        [
            "pass  1. no cache yet",
            "FAIL  2. one new token (L = 1) after P = 5 cached",
            "first differing entry: output[0, 0, 0, 0]",
            "new queries see only the first keys: the causal block must be aligned at the bottom right",
            "query i may see keys j <= 5 + i (tril(5) on the (1, 6) scores)",
            "FAIL  5. a prompt of 3 tokens",
            "the first wrong one is token 3, attended with 3 tokens in the cache",
        ],
    ),
    (
        "kv-cache-step",
        "new keys and values concatenated before the cached ones",
        [("cat((past_key, key)", "cat((key, past_key)"), ("cat((past_value, value)", "cat((value, past_value)")],
        [
            "pass  1. no cache yet",
            "FAIL  2.",
            "first differing entry: keys[0, 0, 0, 0]",
            "your keys are the new ones first, then the cached ones: keys[:, :, :5] must be past_key",
        ],
    ),
    (
        "kv-cache-step",
        "no causal mask at all",
        [("attn_mask=allowed", "attn_mask=None")],
        [
            "FAIL  1. no cache yet",
            "your new queries saw the keys after them: query i may see keys j <= i only",
            "pass  2. one new token (L = 1) after P = 5 cached",
            "token 0 of the prompt is already wrong",
        ],
    ),
    (
        "alibi-cache-bias",
        "new queries counted from position 0 (no offset S - L)",
        [(" + past\n", "\n")],
        [
            "pass  1. alibi_cache_bias(8, 5, 5)",
            "FAIL  2. alibi_cache_bias(8, 1, 6)",
            "first differing entry: bias[0, 0, 0]: expected -2.5, got -0",
            "you counted the new queries from position 0",
            "query i sits at position S - L + i = 5 + i",
            "FAIL  5. the last 2 rows of alibi_cache_bias(4, 6, 6)",
        ],
    ),
    (
        "alibi-cache-bias",
        "the symmetric -m_h * |i - j| without -inf for the future",
        [("distance = query_pos - key_pos", "distance = (query_pos - key_pos).abs()")],
        [
            "FAIL  1. alibi_cache_bias(8, 5, 5)",
            "first differing entry: bias[0, 0, 1]: expected -inf, got -0.5",
            "your bias leaves keys in the queries' future (j > S - L + i) open",
            "yours is the symmetric -m_h * |(S - L + i) - j|",
            "pass  2. alibi_cache_bias(8, 1, 6)",
        ],
    ),
    (
        "scaled-frequencies",
        "interpolation multiplies the speeds by s",
        [("theta = theta / factor", "theta = theta * factor")],
        [
            "pass  1. scaled_frequencies(8, 10000, None, 1)",
            "FAIL  2. scaled_frequencies(8, 10000, 'linear', 4)",
            "first differing entry: theta[0]: expected 0.25, got 4",
            "you multiplied the speeds by s: interpolation slows every pair",
            "pass  3.",
        ],
    ),
    (
        "scaled-frequencies",
        "NTK base multiplied by s, without the exponent D / (D - 2)",
        [("base = base * factor ** (head_dim / (head_dim - 2))", "base = base * factor")],
        [
            "pass  2. scaled_frequencies(8, 10000, 'linear', 4)",
            "FAIL  3. scaled_frequencies(8, 10000, 'ntk', 4)",
            "first differing entry: theta[1]: expected 0.06299605249, got 0.07071067812",
            "you multiplied the base by s: then the slowest pair slows by s^((D - 2) / D), not by s",
            "FAIL  5.",
        ],
    ),
    (
        "yarn-frequencies",
        "the ramp reversed: fast pairs interpolated, slow ones kept",
        [("return (1 - ramp) * theta + ramp * theta / factor", "return ramp * theta + (1 - ramp) * theta / factor")],
        [
            "FAIL  2. yarn_frequencies(16, 10000, 2, 12)",
            "first differing entry: theta[0]: expected 1, got 0.5",
            "your ramp runs the wrong way",
            "pass  5. yarn_frequencies(32, 10000, 1, 512)",
        ],
    ),
    (
        "yarn-frequencies",
        "the ramp's ends not rounded to whole pairs",
        [
            ("math.floor(pair_turning(beta_fast))", "pair_turning(beta_fast)"),
            ("math.ceil(pair_turning(beta_slow))", "pair_turning(beta_slow)"),
        ],
        [
            "FAIL  1. yarn_frequencies(64, 10000, 4, 2048)",
            "first differing entry: theta[9]",
            "you kept the ramp's ends as real numbers",
            "pass  2. yarn_frequencies(16, 10000, 2, 12)",
        ],
    ),
    (
        "sliding-window-mask",
        "a window one key too wide (p - j <= W)",
        [("near = back < window", "near = back <= window")],
        [
            "FAIL  1. sliding_window_mask(6, 6, 3)",
            "first differing entry: mask[3, 0]: expected False, got True",
            "your queries see 4 keys, one more than the window W = 3 holds",
            "pass  5. sliding_window_mask(3, 3, 2, 4)",
        ],
    ),
    (
        "sliding-window-mask",
        "sinks that ignore causality",
        [("return (back >= 0) & (near | sink)", "return ((back >= 0) & near) | sink")],
        [
            "pass  3. sliding_window_mask(2, 9, 4)",
            "FAIL  4. sliding_window_mask(8, 8, 3, 2)",
            "query 0 (position 0) sees key 1, in its future: your sinks escape the causal rule",
            "FAIL  5. sliding_window_mask(3, 3, 2, 4)",
        ],
    ),
    (
        "online-softmax",
        "the running sum not rescaled when the maximum grows",
        [("        norm = norm * torch.exp(m - safe)\n", "")],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "your running sum was not rescaled when the maximum grew",
            "pass  4. online_softmax(scores (2, 5), block_size=16)",
        ],
    ),
    (
        "online-softmax",
        "the rescaling factor inverted, exp(m' - m)",
        [("torch.exp(m - safe)", "torch.exp(safe - m)")],
        [
            "FAIL  1. online_softmax(scores (3, 8), block_size=4)",
            "got nan",
            "an infinite factor met a zero (before the first block the running maximum is -inf)",
        ],
    ),
    (
        "tile-update",
        "the output not rescaled",
        [("    new_acc = correction[..., None] * acc + probs @ value", "    new_acc = acc + probs @ value")],
        [
            "pass  1. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "FAIL  2. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "your output was not rescaled",
            "FAIL  5. your tile_update chained over the 3 key blocks of 11 keys",
        ],
    ),
    (
        "tile-update",
        "the rescaling factor inverted",
        [("torch.exp(running_max - safe)", "torch.exp(safe - running_max)")],
        [
            "FAIL  1. tile_update(state of 4 rows, scores (4, 5), value (5, 3))",
            "NaN in your result where the running maximum is still -inf",
            "you rescaled by exp(m' - m), a factor above 1",
        ],
    ),
    (
        "tile-score-gradient",
        "delta from the tile's own keys",
        [("(grad_out * out).sum(dim=-1, keepdim=True)", "(probs * grad_probs).sum(dim=-1, keepdim=True)")],
        [
            "pass  1. tile_score_gradient for keys 0:6 of 6",
            "FAIL  2. tile_score_gradient for keys 3:7 of 10",
            "you computed delta from this tile alone",
        ],
    ),
    (
        "tile-score-gradient",
        "delta left out",
        [("return probs * (grad_probs - delta)", "return probs * grad_probs")],
        [
            "FAIL  1. tile_score_gradient for keys 0:6 of 6",
            "you left out delta",
        ],
    ),
]


# The exercises that live in one module each (tinyformer_exercises.exercises) keep their wrong solutions there.
for _exercise in EXERCISES.values():
    if (EXERCISE_MODULES / _exercise.template).is_file():
        _module = importlib.import_module(f"tinyformer_exercises.exercises.{Path(_exercise.template).stem}")
        WRONG += [(_exercise.id, *row) for row in _module.WRONG_SOLUTIONS]


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(arg) for arg in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def solution(exercise_id: str) -> Path:
    return SOLUTIONS / EXERCISES[exercise_id].template


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_reference_solution_passes_every_check(capsys: pytest.CaptureFixture[str], exercise_id: str) -> None:
    code, out = run(capsys, exercise_id, solution(exercise_id))
    assert code == 0, out
    assert f"All {len(CHECKS[exercise_id])} checks passed." in out
    assert "FAIL" not in out


@pytest.mark.parametrize(
    ("exercise_id", "slip", "replacements", "fragments"), WRONG, ids=[f"{row[0]}: {row[1]}" for row in WRONG]
)
def test_wrong_solution_fails_with_a_useful_message(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    exercise_id: str,
    slip: str,
    replacements: list[tuple[str, str]],
    fragments: list[str],
) -> None:
    source = solution(exercise_id).read_text()
    for old, new in replacements:
        assert old in source, f"the reference solution no longer contains {old!r}"
        source = source.replace(old, new)
    wrong = tmp_path / EXERCISES[exercise_id].template
    wrong.write_text(source)
    code, out = run(capsys, exercise_id, wrong)
    assert code == 1, out
    for fragment in fragments:
        assert fragment in out, f"{slip}: {fragment!r} missing from\n{out}"
    assert "Traceback" not in out
    assert "tinyformer_exercises" not in out.replace(str(TEMPLATES), "")  # no frame of the checker
    # a mistake is named once, after the failing checks; the rule the checks test, once
    assert out.count("The rule the checks test:") <= 1
    if "What the failures point to:" in out:
        after = out.split("What the failures point to:")[1]
        assert "FAIL" not in after
        named = [line for line in after.splitlines() if line.startswith("  - ")]
        assert named, out
        assert len(named) == len(set(named)), out


def test_every_exercise_has_two_wrong_solutions_and_checks_with_edge_cases() -> None:
    for exercise_id in EXERCISES:
        assert sum(row[0] == exercise_id for row in WRONG) >= 2, exercise_id
        assert len(CHECKS[exercise_id]) >= 3, exercise_id


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_unfinished_template_fails_naming_the_function(capsys: pytest.CaptureFixture[str], exercise_id: str) -> None:
    exercise = EXERCISES[exercise_id]
    code, out = run(capsys, exercise_id, exercise.template_path)
    assert code == 1
    assert f"NOT DONE  {exercise.functions[0]} still raises NotImplementedError." in out
    assert "Traceback" not in out


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_template_is_installed_and_states_its_objective(exercise_id: str) -> None:
    """The template ships with the installed package (package data) and names the objective it assesses."""
    exercise = EXERCISES[exercise_id]
    text = exercise.template_path.read_text()
    assert " ".join(text.split()).count(f"Objective assessed: {exercise.objective}.") == 1
    assert f"nox -s check -- {exercise.id} path/to/{exercise.template}" in text
    assert f"python -m tinyformer_exercises {exercise.id} {exercise.template}" in text
    tree = ast.parse(text)
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert defined == list(exercise.functions)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert ast.get_docstring(node), node.name
            assert isinstance(node.body[-1], ast.Raise), f"{node.name} must only raise NotImplementedError"
            assert len(node.body) == 2, node.name  # the docstring and the raise


def test_file_that_does_not_import_names_file_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = tmp_path / "my_mask.py"
    broken.write_text(
        "import torch\n\n\ndef causal_mask(seq_len):\n    return torhc.ones(seq_len, seq_len)\n\nx = 1 +\n"
    )
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert f"Could not import {broken}" in out
    assert "my_mask.py, line 7: x = 1 +" in out
    assert "SyntaxError: invalid syntax" in out

    broken.write_text("import torch\n\nSIZE = torhc.Size([2])\n\ndef causal_mask(seq_len):\n    return None\n")
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert "my_mask.py, line 3: SIZE = torhc.Size([2])" in out
    assert "NameError: name 'torhc' is not defined" in out
    assert "Traceback" not in out
    assert "checking.py" not in out


def test_error_inside_the_students_function_points_at_their_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = tmp_path / "mask.py"
    broken.write_text(
        "import torch\n\ndef causal_mask(seq_len):\n    ones = torch.ones(seq_len, seq_len)\n    return ones.tril(diagonal=True, k=0)\n"
    )
    code, out = run(capsys, "causal-mask", broken)
    assert code == 1
    assert "calling causal_mask(1) raised TypeError" in out
    assert "at mask.py, line 5: return ones.tril(diagonal=True, k=0)" in out
    assert "Traceback" not in out


def test_missing_function_and_non_tensor_results(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "other.py"
    other.write_text("def causal_mask_v2(seq_len):\n    return None\n")
    code, out = run(capsys, "causal-mask", other)
    assert code == 1
    assert "does not define a function named causal_mask" in out

    other.write_text("def causal_mask(seq_len):\n    return [[True]]\n")
    code, out = run(capsys, "causal-mask", other)
    assert code == 1
    assert "got:      list [[True]]" in out


def test_list_names_every_exercise_and_its_template(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--list")
    assert code == 0
    for exercise in EXERCISES.values():
        line = next(line for line in out.splitlines() if line.split()[:1] == [exercise.id])
        assert line.split()[-1] == str(exercise.template_path)
        assert exercise.template_path.is_file()


def test_command_line_exit_codes(tmp_path: Path) -> None:
    """Through a real interpreter, as nox runs it: usage errors exit 2, failures 1, success 0."""

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tinyformer_exercises", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp_path)

    assert cli("--list").returncode == 0
    unknown = cli("no-such-exercise", str(solution("causal-mask")))
    assert unknown.returncode == 2
    assert "There is no exercise 'no-such-exercise'" in unknown.stdout
    missing = cli("causal-mask", "nowhere.py")
    assert missing.returncode == 2
    assert missing.stdout.startswith("There is no file nowhere.py")
    assert cli("causal-mask", str(EXERCISES["causal-mask"].template_path)).returncode == 1
    passed = cli("causal-mask", str(solution("causal-mask")))
    assert passed.returncode == 0, passed.stdout
    assert re.search(r"All \d+ checks passed", passed.stdout)


# ---------------------------------------------------------------------------------------------------------------
# One file per exercise: the template is made from the reference solution (tinyformer_exercises.authoring)


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_template_is_what_its_reference_solution_gives(exercise_id: str) -> None:
    """Each template is its solution with the marked answer taken out (``nox -s templates`` writes them), so
    the two are never kept by hand: a template edited alone, or a solution changed without ``nox -s
    templates``, fails here."""
    exercise = EXERCISES[exercise_id]
    solution = (SOLUTIONS / exercise.template).read_text()
    assert "# BEGIN SOLUTION" in solution
    made = template_from_solution(solution, name=exercise.template, chapter=exercise.chapter_name)
    assert (TEMPLATES / exercise.template).read_text() == made, f"run nox -s templates ({exercise.template})"
    assert made.count("raise NotImplementedError") >= len(exercise.functions)
    assert "SOLUTION" not in made


def test_templates_folder_holds_exactly_the_exercises_templates() -> None:
    assert sorted(p.name for p in TEMPLATES.glob("*.py")) == sorted({e.template for e in EXERCISES.values()})


def test_a_top_level_block_goes_and_a_function_block_becomes_not_implemented() -> None:
    solution = (
        "import a\n\n# BEGIN SOLUTION\nimport b\n\n\ndef helper():\n    return 2\n# END SOLUTION\n\n\n"
        'def f():\n    """Doc."""\n    # BEGIN SOLUTION\n    return helper()\n    # END SOLUTION\n'
    )
    assert template_from_solution(solution) == 'import a\n\n\ndef f():\n    """Doc."""\n    raise NotImplementedError\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def f():\n    return 1\n", "no # BEGIN SOLUTION ... # END SOLUTION block"),
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n", "s.py:2: # BEGIN SOLUTION is never closed"),
        ("def f():\n    return 1\n    # END SOLUTION\n", "s.py:3: # END SOLUTION without a # BEGIN SOLUTION"),
        (
            "def f():\n    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n",
            "s.py:3: # BEGIN SOLUTION inside the block opened at line 2",
        ),
        ("def f():\n    # BEGIN SOLUTION\n    x = 1\n# END SOLUTION\n", "s.py:4: # END SOLUTION is not indented"),
    ],
)
def test_badly_marked_solutions_are_refused_naming_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        template_from_solution(text, name="s.py")


def test_a_template_names_its_chapter_from_the_table_of_contents() -> None:
    solution = '"""Coding exercise probe.\n\nMore.\n"""\n\n\ndef f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n'
    made = template_from_solution(solution, chapter='chapter 9, "A probe chapter with a title long enough to wrap"')
    assert made.startswith(
        '"""Coding exercise probe (chapter 9, "A probe chapter with a title long enough\nto wrap").\n\nMore.\n'
    )
    with pytest.raises(ValueError, match=re.escape('s.py:1: the docstring does not open with """Coding exercise ID.')):
        template_from_solution(
            '"""Exercise."""\ndef f():\n    # BEGIN SOLUTION\n    pass\n    # END SOLUTION\n', name="s.py", chapter="x"
        )
