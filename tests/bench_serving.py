"""Benchmark: what chapter 10's serving methods cost and save in cached decoding, on this machine (issue 36).

Part of ``nox -s bench`` (``tests/bench_attention.py`` calls :func:`time_serving` and puts the result in its
report); ``python tests/bench_serving.py`` runs this section alone. Not a test: speed is reported as ratios,
never asserted.

* **Cached decoding per token, by attention kind.** Decoders of one shape (d_model 384, 6 query heads of 64,
  4 layers, a vocabulary of 4,096, rotary positions, float32, random weights, seed 0) that differ only in how
  keys and values are kept: multi-head (``H_kv = 6``), grouped-query (``H_kv = 2``), multi-query
  (``H_kv = 1``), multi-head latent attention (``kv_lora_rank = 128``, ``qk_rope_head_dim = 32``) in its
  naive and absorbed forms, and the multi-head model with an 8-bit :class:`QuantizedKVCache`. Each extends
  a batch of 8 prompts of 512 tokens by 32 greedy tokens with its cache; the time per new token excludes the
  prompt's pass (the time of prompt plus 32 tokens, less the prompt alone, over 32), and the cache's
  measured bytes after the text. Both are reported as ratios to multi-head attention, alternated in rounds
  (each side's best median is kept).
* **Speculative decoding.** The chapter's *Hamlet* model and its one-layer draft, trained here with the
  chapter's recipe (seed 0), write 200 greedy characters after a 16-character prompt: plain ``generate``
  against ``generate(draft_model=..., num_draft_tokens=gamma)`` for gamma 1, 4 and 8, with the model's
  passes counted (the text is the same, which is checked).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch
from benchtools import best_of_rounds

from tinyformer.labs.language import CharTokenizer, hamlet, train_language_model
from tinyformer.models.decoder import DecoderConfig, TinyDecoder
from tinyformer.models.quantized_cache import QuantizedKVCache

SHAPE = {"vocab_size": 4096, "d_model": 384, "num_heads": 6, "d_ff": 1024, "num_layers": 4, "max_len": 1024}
LLAMA = {"positional": "rotary", "norm": "rms", "activation": "swiglu", "bias": False}
KINDS = {
    "multi-head (H_kv = 6)": {},
    "grouped-query (H_kv = 2)": {"num_kv_heads": 2},
    "multi-query (H_kv = 1)": {"num_kv_heads": 1},
    "latent, naive (d_c = 128, d_R = 32)": {"kv_lora_rank": 128, "qk_rope_head_dim": 32},
    "latent, absorbed": {"kv_lora_rank": 128, "qk_rope_head_dim": 32, "mla_absorbed": True},
    "multi-head, int8 cache": {},
}
BATCH_SIZE, PROMPT_LEN, NEW_TOKENS = 8, 512, 32
GAMMAS = (1, 4, 8)


def _decode(model: TinyDecoder, ids: torch.Tensor, new_tokens: int, int8: bool) -> int:
    """Greedy decoding of ``new_tokens`` tokens with the cache; returns the cache's bytes."""
    cache = QuantizedKVCache(model.config, ids.size(0), nbits=8) if int8 else model.new_cache(ids.size(0))
    logits = model(ids, cache=cache, last_only=True)
    for _ in range(new_tokens):
        token = logits[:, -1].argmax(-1, keepdim=True)
        logits = model(token, cache=cache, last_only=True)
    return cache.nbytes


def time_kinds(min_run_time: float) -> list[dict]:
    """Per kind: milliseconds per new token and cache bytes, and both as ratios to multi-head attention."""
    ids = torch.randint(0, SHAPE["vocab_size"], (BATCH_SIZE, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    rows = []
    for name, fields in KINDS.items():
        torch.manual_seed(0)
        model = TinyDecoder(DecoderConfig(**SHAPE, **LLAMA, **fields)).eval()
        int8 = "int8" in name
        env = {"decode": _decode, "model": model, "ids": ids, "int8": int8, "n": NEW_TOKENS}
        with torch.inference_mode():
            nbytes = _decode(model, ids, NEW_TOKENS, int8)
            t_full, t_prompt = best_of_rounds(
                "decode(model, ids, n, int8)", "decode(model, ids, 0, int8)", env=env, min_run_time=min_run_time
            )
        rows.append({"kind": name, "ms_per_token": 1000 * (t_full - t_prompt) / NEW_TOKENS, "cache_bytes": nbytes})
    base = rows[0]
    for row in rows:
        row["time_vs_mha"] = row["ms_per_token"] / base["ms_per_token"]
        row["bytes_vs_mha"] = row["cache_bytes"] / base["cache_bytes"]
    return rows


def time_speculative(min_run_time: float) -> dict:
    """Plain against speculative greedy decoding of the chapter's Hamlet model: passes and time."""
    tokenizer = CharTokenizer(hamlet())
    ids = tokenizer.encode(hamlet())
    split = int(0.9 * ids.numel())
    config = DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=64, num_heads=4, d_ff=176, num_layers=2, **LLAMA)
    models = {}
    for name, shape in (("model", config), ("draft", config.replace(d_model=32, num_heads=2, d_ff=88, num_layers=1))):
        torch.manual_seed(0)
        models[name] = TinyDecoder(shape)
        train_language_model(models[name], ids[:split], ids[split:], steps=240, batch_size=24, seq_len=64, seed=0)
        models[name].eval()
    prompt = ids[split : split + 16][None]
    model, draft = models["model"], models["draft"]
    env = {"model": model, "draft": draft, "prompt": prompt}
    rows = []
    with torch.inference_mode():
        plain = model.generate(prompt, 200)
        for gamma in GAMMAS:
            out = model.speculative_generate(draft, prompt, 200, num_draft_tokens=gamma)
            env["gamma"] = gamma
            t_plain, t_spec = best_of_rounds(
                "model.generate(prompt, 200)",
                "model.generate(prompt, 200, draft_model=draft, num_draft_tokens=gamma)",
                env=env,
                min_run_time=min_run_time,
            )
            rows.append(
                {
                    "gamma": gamma,
                    "target_passes": out.target_passes,
                    "draft_passes": out.draft_passes,
                    "plain_ms": 1000 * t_plain,
                    "speculative_ms": 1000 * t_spec,
                    "time_vs_plain": t_spec / t_plain,
                    "same_text": bool(torch.equal(out.sequences, plain)),
                }
            )
    return {"new_tokens": 200, "rows": rows}


def time_serving(min_run_time: float) -> dict:
    load_start = os.getloadavg()
    kinds = time_kinds(min_run_time)
    speculative = time_speculative(min_run_time)
    return {
        "shape": SHAPE,
        "batch_size": BATCH_SIZE,
        "prompt_len": PROMPT_LEN,
        "new_tokens": NEW_TOKENS,
        "kinds": kinds,
        "speculative": speculative,
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
    }


def markdown_lines(serving: dict) -> list[str]:
    """The serving section of ``build/bench/report.md``."""
    s = serving["shape"]
    start, end = serving["load_average"]["start"], serving["load_average"]["end"]
    lines = [
        "",
        f"Cached greedy decoding by attention kind (d_model={s['d_model']}, {s['num_heads']} query heads, "
        f"{s['num_layers']} layers, float32, random weights), batch {serving['batch_size']}, "
        f"{serving['prompt_len']}-token prompts, {serving['new_tokens']} new tokens; time per new token without the "
        f"prompt's pass, and the cache's bytes after the text, as ratios to multi-head attention (1-minute load "
        f"average {start[0]:.2f} at the start, {end[0]:.2f} at the end):",
        "",
        "| attention | ms per token | time vs MHA | cache (MiB) | bytes vs MHA |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in serving["kinds"]:
        lines.append(
            f"| {row['kind']} | {row['ms_per_token']:.2f} | {row['time_vs_mha']:.2f}x | "
            f"{row['cache_bytes'] / 2**20:.1f} | {row['bytes_vs_mha']:.3f}x |"
        )
    spec = serving["speculative"]
    lines += [
        "",
        f"Speculative greedy decoding of the chapter's Hamlet model with its one-layer draft, {spec['new_tokens']} "
        "characters; the model's passes, and time as a ratio to plain decoding (plain: "
        f"{spec['new_tokens']} passes):",
        "",
        "| gamma | model passes | draft passes | plain (ms) | speculative (ms) | time vs plain | same text |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in spec["rows"]:
        lines.append(
            f"| {row['gamma']} | {row['target_passes']} | {row['draft_passes']} | {row['plain_ms']:.1f} | "
            f"{row['speculative_ms']:.1f} | {row['time_vs_plain']:.2f}x | {'yes' if row['same_text'] else 'no'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench/serving"))
    parser.add_argument("--min-run-time", type=float, default=3.0, help="seconds of timing per measurement")
    args = parser.parse_args()
    report = {
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown CPU'}",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "serving": time_serving(args.min_run_time),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    title = (
        f"# tinyformer serving benchmark ({report['machine']}, torch {report['torch']}, {report['threads']} threads)"
    )
    text = "\n".join([title, *markdown_lines(report["serving"])]) + "\n"
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
