"""Benchmark: cached decoding against recomputation and against Hugging Face's ``generate`` (issue 19).

Part of ``nox -s bench`` (``tests/bench_attention.py`` calls :func:`time_decoding` and puts the result in
its report); ``python tests/bench_decoding.py`` runs this section alone. Not a test: speed is reported as
ratios, never asserted.

The model is GPT-2 small's shape scaled to a 2-core CPU (``MODEL``): half the width (384) and half the
layers (6), 6 heads of 64 as in GPT-2, 1024 positions, and a vocabulary cut to 12,288 tokens so that the
LM head's share of the multiply-adds per token stays GPT-2 small's (31 %; with 50,257 tokens it would be
65 %, and that one matrix product would dominate what is timed). A ``GPT2LMHeadModel`` with random weights
(seed 0, float32, eval, dropout 0, SDPA attention) and the ``TinyDecoder`` that
``tinyformer.bridges.hf.from_transformers`` makes of it share every weight. Each batch of ``N`` random prompts of ``PROMPT_LEN`` tokens is extended by
``NEW_TOKENS`` greedy tokens in three ways, alternated in rounds (each side's best median is kept); the prompt
is 32 tokens, not 64, because recomputation's cost grows with the square of the length, and at batch 8 it is
most of the section's time (the section took 2 minutes on 2 cores at a load average of about 1.5):

* ``TinyDecoder.generate(use_cache=True)``, a ``KVCache``;
* ``TinyDecoder.generate(use_cache=False)``, the whole sequence recomputed for every token;
* ``GPT2LMHeadModel.generate(do_sample=False, use_cache=True)``, Hugging Face's ``DynamicCache``; no
  end-of-sequence token (``eos_token_id=None``), so every row runs the full ``NEW_TOKENS``.

All three run under ``torch.inference_mode``. Tokens/s counts new tokens of the whole batch,
``N * NEW_TOKENS`` over the time of one call, the prompt's forward pass included. Before timing, the
three continuations are compared: they must be equal, or diverge only where the two candidate tokens'
logits lie within ``NEAR_TIE`` of each other (random weights give flat logits, and float32 rounding in
two implementations may break such a tie either way); which of the two held goes into the report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch
from benchtools import best_of_rounds
from torch import Tensor
from transformers import GPT2Config, GPT2LMHeadModel

from tinyformer.bridges.hf import from_transformers
from tinyformer.models.decoder import TinyDecoder

MODEL = {"n_embd": 384, "n_head": 6, "n_layer": 6, "n_positions": 1024, "vocab_size": 12288}
PROMPT_LEN = 32
NEW_TOKENS = 64
BATCH_SIZES = (1, 8)
PAD_TOKEN_ID = 0  # no row is padded; Hugging Face's generate asks for one when no eos_token_id is set
NEAR_TIE = 1e-4  # logits closer than this are a tie that float32 rounding may break either way

CACHED = "ours.generate(ids, new_tokens)"
RECOMPUTED = "ours.generate(ids, new_tokens, use_cache=False)"
HUGGING_FACE = "hf_generate(hf, ids, new_tokens)"


def gpt2_pair() -> tuple[GPT2LMHeadModel, TinyDecoder]:
    """The scaled GPT-2 with random weights (seed 0) and the equal ``TinyDecoder``, both float32 and in eval mode."""
    config = GPT2Config(**MODEL, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(config).eval()
    return hf, from_transformers(hf).eval()


def hf_generate(model: GPT2LMHeadModel, ids: Tensor, new_tokens: int) -> Tensor:
    """Hugging Face's greedy decoding with its cache: exactly ``new_tokens`` more tokens per row."""
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        use_cache=True,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=PAD_TOKEN_ID,
    )


def same_tokens(model: TinyDecoder, ours: Tensor, theirs: Tensor) -> bool:
    """True if the two ``(N, L + new)`` continuations are equal; False if some row diverges at a near-tie.

    Raises:
        AssertionError: if a row diverges where ``model``'s logits of the two tokens differ by
            ``NEAR_TIE`` or more, naming the row, the position and the gap.
    """
    if torch.equal(ours, theirs):
        return True
    for row in range(ours.size(0)):
        differ = (ours[row] != theirs[row]).nonzero()
        if differ.numel() == 0:
            continue
        position = int(differ[0])
        logits = model(ours[row : row + 1, :position])[0, -1]  # (V,), after the common prefix
        mine, other = int(ours[row, position]), int(theirs[row, position])
        gap = float((logits[mine] - logits[other]).abs())
        assert gap < NEAR_TIE, (
            f"row {row} diverges at position {position}: token {mine} against {other}, whose logits differ "
            f"by {gap:.3g}, more than a rounding tie ({NEAR_TIE:g})"
        )
    return False


def time_decoding(
    min_run_time: float,
    *,
    prompt_len: int = PROMPT_LEN,
    new_tokens: int = NEW_TOKENS,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
) -> dict:
    """Tokens/s of cached decoding, recomputation and Hugging Face's ``generate`` at each batch size."""
    load_start = os.getloadavg()
    hf, ours = gpt2_pair()
    generator = torch.Generator().manual_seed(1)
    rows = []
    for batch_size in batch_sizes:
        ids = torch.randint(0, MODEL["vocab_size"], (batch_size, prompt_len), generator=generator)
        env = {"ours": ours, "hf": hf, "hf_generate": hf_generate, "ids": ids, "new_tokens": new_tokens}
        with torch.inference_mode():
            cached = ours.generate(ids, new_tokens)
            same_recomputed = same_tokens(ours, cached, ours.generate(ids, new_tokens, use_cache=False))
            same_hf = same_tokens(ours, cached, hf_generate(hf, ids, new_tokens))
            t_cached, t_recomputed, t_hf = best_of_rounds(
                CACHED, RECOMPUTED, HUGGING_FACE, env=env, min_run_time=min_run_time
            )
        tokens = batch_size * new_tokens
        rows.append(
            {
                "N": batch_size,
                "cached_tokens_per_s": tokens / t_cached,
                "recomputed_tokens_per_s": tokens / t_recomputed,
                "hf_tokens_per_s": tokens / t_hf,
                "speedup_vs_recomputation": t_recomputed / t_cached,
                "speedup_vs_hf": t_hf / t_cached,
                "same_tokens_as_recomputation": same_recomputed,
                "same_tokens_as_hf": same_hf,
            }
        )
    return {
        "model": MODEL,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "rows": rows,
    }


def markdown_lines(decoding: dict) -> list[str]:
    """The decoding section of ``build/bench/report.md``."""
    m = decoding["model"]
    start, end = decoding["load_average"]["start"], decoding["load_average"]["end"]
    lines = [
        f"Greedy decoding, GPT-2 shape scaled (d_model={m['n_embd']}, {m['n_head']} heads, {m['n_layer']} layers, "
        f"vocab_size={m['vocab_size']}, float32), {decoding['prompt_len']}-token prompts, "
        f"{decoding['new_tokens']} new tokens; new tokens per second of the whole batch, prompt included "
        f"(1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end):",
        "",
        "| N | cached (tok/s) | recomputed (tok/s) | Hugging Face generate (tok/s) | cache speed-up | vs Hugging Face "
        "| same tokens (recomputed, HF) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in decoding["rows"]:
        same = ", ".join(
            "yes" if row[key] else "near-tie" for key in ("same_tokens_as_recomputation", "same_tokens_as_hf")
        )
        lines.append(
            f"| {row['N']} | {row['cached_tokens_per_s']:.1f} | {row['recomputed_tokens_per_s']:.1f} | "
            f"{row['hf_tokens_per_s']:.1f} | {row['speedup_vs_recomputation']:.2f}x | {row['speedup_vs_hf']:.2f}x | "
            f"{same} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench/decoding"))
    parser.add_argument("--min-run-time", type=float, default=3.0, help="seconds of timing per measurement")
    args = parser.parse_args()
    report = {
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown CPU'}",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "decoding": time_decoding(args.min_run_time),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    title = (
        f"# tinyformer decoding benchmark ({report['machine']}, torch {report['torch']}, {report['threads']} threads)"
    )
    text = "\n".join([title, "", *markdown_lines(report["decoding"])]) + "\n"
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
