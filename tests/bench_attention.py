"""Benchmark: tinyformer against PyTorch on this machine, in one run. ``nox -s bench`` runs it.

Not a test (pytest does not collect it): speed is reported as ratios, never asserted. It measures

* time of ``tinyformer.models.attention.MultiHeadAttention`` over ``torch.nn.MultiheadAttention`` (eval,
  inference mode, no weights returned) at three sizes, with the GFLOP/s each achieves beside a plain
  float32 matmul's;
* time of a forward plus backward pass of the same two (training mode, dropout 0, no weights
  returned) at the same three sizes;
* time of one training step (forward, cross-entropy, backward, AdamW step) of ``TinyTransformer``
  against a model of the same shape and weights built from ``nn.TransformerEncoder``;
* peak memory of the fast path (``need_weights=False``) and of the explicit path (``need_weights=True``)
  at L = 2048, each in a fresh subprocess (peak resident set size above the process's baseline);
* time and peak memory (``tinyformer.bridges.memory.peak_memory``) of ``tinyformer.models.flash.flash_attention`` against
  the explicit path (``scaled_dot_product_attention``, which forms the (N, H, L, S) weights) and
  ``F.scaled_dot_product_attention`` at L = 1024 to 8192, forward and forward plus backward;
* the vectorized encoding against a double loop over positions and columns at (1024, 512);
* tokens/s of cached greedy decoding against recomputation and against Hugging Face's ``generate`` on the
  same weights, at batch sizes 1 and 8 (``tests/bench_decoding.py``);
* cached decoding per token and cache bytes for multi-head, grouped-query, multi-query and latent attention
  (naive and absorbed) and an 8-bit cache, and speculative decoding's passes and time against plain decoding
  (``tests/bench_serving.py``).

Writes ``build/bench/report.json`` and ``build/bench/report.md`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
from pathlib import Path

import bench_decoding
import bench_serving
import torch
from benchtools import best_of_rounds, seconds
from torch import nn
from torch.utils import benchmark

from tinyformer.bridges.memory import peak_memory as profiled_peak
from tinyformer.models.attention import MultiHeadAttention, scaled_dot_product_attention
from tinyformer.models.encoder import EncoderLayer, TinyTransformer, TransformerConfig
from tinyformer.models.flash import flash_attention
from tinyformer.models.positional import sinusoidal_positional_encoding

SIZES = [(8, 128, 256, 8), (4, 512, 256, 8), (1, 2048, 256, 8)]  # (N, L, E, H)


def mha_flops(batch_size: int, seq_len: int, d_model: int) -> float:
    """Multiply-adds x 2 of self-attention: four E x E projections, then Q K^T and weights @ V."""
    projections = 4 * 2 * batch_size * seq_len * d_model * d_model
    attention = 2 * 2 * batch_size * seq_len * seq_len * d_model
    return float(projections + attention)


def time_attention(min_run_time: float) -> list[dict]:
    rows = []
    for batch_size, seq_len, d_model, num_heads in SIZES:
        torch.manual_seed(0)
        reference = nn.MultiheadAttention(d_model, num_heads, batch_first=True).eval()
        ours = MultiHeadAttention.from_torch(reference).eval()
        x = torch.randn(batch_size, seq_len, d_model)
        with torch.inference_mode():
            torch.testing.assert_close(ours(x)[0], reference(x, x, x, need_weights=False)[0], rtol=1e-4, atol=1e-5)
            env = {"ours": ours, "reference": reference, "x": x}
            t_ours, t_torch = best_of_rounds(
                "ours(x)", "reference(x, x, x, need_weights=False)", env=env, min_run_time=min_run_time
            )
        flops = mha_flops(batch_size, seq_len, d_model)
        rows.append(
            {
                "size": {"N": batch_size, "L": seq_len, "E": d_model, "H": num_heads},
                "tinyformer_ms": t_ours * 1e3,
                "torch_ms": t_torch * 1e3,
                "speedup_vs_torch": t_torch / t_ours,
                "tinyformer_gflops": flops / t_ours / 1e9,
                "torch_gflops": flops / t_torch / 1e9,
            }
        )
    return rows


def time_attention_backward(min_run_time: float) -> list[dict]:
    """Forward plus backward of self-attention, training mode (dropout 0), at the three sizes."""
    rows = []
    for batch_size, seq_len, d_model, num_heads in SIZES:
        torch.manual_seed(0)
        reference = nn.MultiheadAttention(d_model, num_heads, batch_first=True).train()
        ours = MultiHeadAttention.from_torch(reference).train()
        x = torch.randn(batch_size, seq_len, d_model, requires_grad=True)
        torch.testing.assert_close(ours(x)[0], reference(x, x, x, need_weights=False)[0], rtol=1e-4, atol=1e-5)
        env = {"ours": ours, "reference": reference, "x": x}
        t_ours, t_torch = best_of_rounds(
            "ours(x)[0].sum().backward()",
            "reference(x, x, x, need_weights=False)[0].sum().backward()",
            env=env,
            min_run_time=min_run_time,
        )
        rows.append(
            {
                "size": {"N": batch_size, "L": seq_len, "E": d_model, "H": num_heads},
                "tinyformer_ms": t_ours * 1e3,
                "torch_ms": t_torch * 1e3,
                "speedup_vs_torch": t_torch / t_ours,
            }
        )
    return rows


class TorchEncoderClassifier(nn.Module):
    """TinyTransformer's computation built from PyTorch's layers: embedding x sqrt(E) + sinusoidal table,
    ``nn.TransformerEncoder``, mean over real tokens, linear classifier."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.scale = math.sqrt(config.d_model)
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.register_buffer("table", sinusoidal_positional_encoding(config.max_len, config.d_model))
        layer = nn.TransformerEncoderLayer(
            config.d_model, config.num_heads, config.d_ff, dropout=config.dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(config.d_model, config.num_classes)

    def forward(self, input_ids: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        x = self.embedding(input_ids) * self.scale + self.table[: input_ids.size(1)]
        x = self.encoder(x, src_key_padding_mask=key_padding_mask)
        keep = (~key_padding_mask).unsqueeze(-1).to(x.dtype)
        return self.classifier((x * keep).sum(dim=1) / keep.sum(dim=1))


TRAINING = {"N": 8, "L": 128}
TRAINING_CONFIG = {"vocab_size": 1000, "num_classes": 10, "d_model": 256, "num_heads": 8, "d_ff": 1024, "num_layers": 2}


def time_training_step(min_run_time: float) -> dict:
    """One AdamW training step of TinyTransformer and of the same model built from nn.TransformerEncoder."""
    config = TransformerConfig(**TRAINING_CONFIG, max_len=TRAINING["L"])
    torch.manual_seed(0)
    reference = TorchEncoderClassifier(config).train()
    ours = TinyTransformer(config).train()
    with torch.no_grad():  # the same weights in both
        ours.layers = nn.ModuleList(EncoderLayer.from_torch(layer) for layer in reference.encoder.layers)
        ours.embedding.weight.copy_(reference.embedding.weight)
        ours.classifier.load_state_dict(reference.classifier.state_dict())
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (TRAINING["N"], TRAINING["L"]), generator=g)
    lengths = torch.randint(TRAINING["L"] // 2, TRAINING["L"] + 1, (TRAINING["N"],), generator=g)
    padding = torch.arange(TRAINING["L"]) >= lengths[:, None]  # True = padding
    labels = torch.randint(0, config.num_classes, (TRAINING["N"],), generator=g)
    torch.testing.assert_close(ours(ids, key_padding_mask=padding), reference(ids, padding), rtol=1e-4, atol=1e-5)

    def step(model, optimizer, call):
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(call(), labels).backward()
        optimizer.step()

    env = {
        "step": step,
        "ours": ours,
        "reference": reference,
        "opt_ours": torch.optim.AdamW(ours.parameters(), lr=1e-4),
        "opt_torch": torch.optim.AdamW(reference.parameters(), lr=1e-4),
        "ids": ids,
        "padding": padding,
    }
    t_ours, t_torch = best_of_rounds(
        "step(ours, opt_ours, lambda: ours(ids, key_padding_mask=padding))",
        "step(reference, opt_torch, lambda: reference(ids, padding))",
        env=env,
        min_run_time=min_run_time,
    )
    return {
        "size": TRAINING | {key: TRAINING_CONFIG[key] for key in ("d_model", "num_heads", "d_ff", "num_layers")},
        "tinyformer_ms": t_ours * 1e3,
        "torch_ms": t_torch * 1e3,
        "speedup_vs_torch": t_torch / t_ours,
    }


def matmul_gflops(min_run_time: float, n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / seconds("a @ b", {"a": a, "b": b}, min_run_time) / 1e9


def encoding_by_loops(seq_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The textbook loop: a Python double loop over positions and even columns."""
    table = torch.zeros(seq_len, d_model, dtype=torch.float64)
    for pos in range(seq_len):
        for col in range(0, d_model, 2):
            angle = pos / base ** (col / d_model)
            table[pos, col] = math.sin(angle)
            table[pos, col + 1] = math.cos(angle)
    return table


def time_encoding(min_run_time: float) -> dict:
    torch.testing.assert_close(sinusoidal_positional_encoding(64, 32, dtype=torch.float64), encoding_by_loops(64, 32))
    env = {"f": sinusoidal_positional_encoding, "loop": encoding_by_loops}
    t_vec = seconds("f(1024, 512)", env, min_run_time)
    t_loop = benchmark.Timer("loop(1024, 512)", globals=env).timeit(1).median  # one run takes seconds
    return {
        "size": {"L": 1024, "E": 512},
        "vectorized_ms": t_vec * 1e3,
        "loop_ms": t_loop * 1e3,
        "speedup": t_loop / t_vec,
    }


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_memory_child(need_weights: bool) -> None:
    """Run in a fresh process: print the peak resident-memory growth (MiB) of one forward pass at L = 2048.

    Linux only: writing 5 to /proc/self/clear_refs resets the high-water mark VmHWM, so the peak of the
    forward pass alone is VmHWM after it minus VmRSS before it.
    """
    torch.manual_seed(0)
    module = MultiHeadAttention(256, 8).eval()
    x = torch.randn(1, 2048, 256)
    with torch.inference_mode():
        module(x[:, :16], need_weights=need_weights)  # warm up allocator and kernels on a tiny input
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kib("VmRSS")
        module(x, need_weights=need_weights)
        peak = _status_kib("VmHWM")
    print(json.dumps({"peak_mib": (peak - before) / 1024}))


def peak_memory() -> dict:
    if not Path("/proc/self/clear_refs").exists():
        return {"fast_path_mib": float("nan"), "explicit_path_mib": float("nan"), "weights_tensor_mib": 128.0}
    result = {}
    for name, flag in (("fast_path", "0"), ("explicit_path", "1")):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", flag], capture_output=True, text=True, check=True
        )
        result[f"{name}_mib"] = json.loads(out.stdout)["peak_mib"]
    # The explicit path stores the (N, H, L, S) float32 weights (and the scores): 2 x 128 MiB here.
    result["weights_tensor_mib"] = 1 * 8 * 2048 * 2048 * 4 / 2**20
    return result


FLASH_LENGTHS = (1024, 2048, 4096, 8192)
FLASH_SHAPE = {"N": 1, "H": 8, "D": 64}
FLASH_PATHS = {
    "flash": lambda q, k, v: flash_attention(q, k, v),
    "explicit": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
    "torch": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
}


def _forward(path, q, k, v) -> None:
    with torch.no_grad():
        path(q, k, v)


def _training(path, q, k, v) -> None:
    path(q, k, v).sum().backward()
    q.grad = k.grad = v.grad = None


def time_flash(min_run_time: float) -> list[dict]:
    """flash_attention, the explicit path and PyTorch's kernel at each length: forward under no_grad and
    forward plus backward, time (best median of alternating rounds) and peak bytes (torch.profiler)."""
    rows = []
    for seq_len in FLASH_LENGTHS:
        torch.manual_seed(0)
        shape = (FLASH_SHAPE["N"], FLASH_SHAPE["H"], seq_len, FLASH_SHAPE["D"])
        q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
        with torch.no_grad():
            torch.testing.assert_close(
                FLASH_PATHS["flash"](q, k, v), FLASH_PATHS["torch"](q, k, v), rtol=1e-4, atol=1e-5
            )
        row = {"L": seq_len, **FLASH_SHAPE}
        for mode, run in (("forward", _forward), ("training", _training)):
            env = {"run": run, "q": q, "k": k, "v": v, **{f"path_{name}": path for name, path in FLASH_PATHS.items()}}
            stmts = [f"run(path_{name}, q, k, v)" for name in FLASH_PATHS]
            times = best_of_rounds(*stmts, env=env, min_run_time=min_run_time)
            for (name, path), t in zip(FLASH_PATHS.items(), times, strict=True):
                row[f"{mode}_{name}_ms"] = t * 1e3
                row[f"{mode}_{name}_mib"] = profiled_peak(run, path, q, k, v).peak_bytes / 2**20
        rows.append(row)
    return rows


def flash_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "",
        f"flash_attention (N = {rows[0]['N']}, H = {rows[0]['H']}, D = {rows[0]['D']}, float32, default blocks) against "
        "the explicit path and F.scaled_dot_product_attention: time in ms and peak memory in MiB (torch.profiler), "
        "with flash_attention's ratios to PyTorch's kernel and to the explicit path.",
        "",
        "| L | pass | flash (ms) | explicit (ms) | torch (ms) | flash / torch time | flash (MiB) | explicit (MiB) | "
        "torch (MiB) | flash / torch memory | flash / explicit memory |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        for mode in ("forward", "training"):
            get = lambda name, unit, mode=mode, row=row: row[f"{mode}_{name}_{unit}"]  # noqa: E731
            label = "forward" if mode == "forward" else "forward + backward"
            lines.append(
                f"| {row['L']} | {label} | {get('flash', 'ms'):.0f} | "
                f"{get('explicit', 'ms'):.0f} | {get('torch', 'ms'):.0f} | {get('flash', 'ms') / get('torch', 'ms'):.2f}x | "
                f"{get('flash', 'mib'):.1f} | {get('explicit', 'mib'):.0f} | {get('torch', 'mib'):.1f} | "
                f"{get('flash', 'mib') / get('torch', 'mib'):.2f}x | 1/{get('explicit', 'mib') / get('flash', 'mib'):.0f} |"
            )
    return lines


def markdown(report: dict) -> str:
    lines = [
        f"# tinyformer benchmark ({report['machine']}, torch {report['torch']}, {report['threads']} threads)",
        "",
        "| N, L, E, H | tinyformer (ms) | nn.MultiheadAttention (ms) | speed-up | tinyformer GFLOP/s | torch GFLOP/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["attention"]:
        s = row["size"]
        lines.append(
            f"| {s['N']}, {s['L']}, {s['E']}, {s['H']} | {row['tinyformer_ms']:.2f} | {row['torch_ms']:.2f} | "
            f"{row['speedup_vs_torch']:.2f}x | {row['tinyformer_gflops']:.1f} | {row['torch_gflops']:.1f} |"
        )
    lines += [
        "",
        "Forward + backward (training mode, dropout 0):",
        "",
        "| N, L, E, H | tinyformer (ms) | nn.MultiheadAttention (ms) | speed-up |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in report["attention_backward"]:
        s = row["size"]
        lines.append(
            f"| {s['N']}, {s['L']}, {s['E']}, {s['H']} | {row['tinyformer_ms']:.2f} | {row['torch_ms']:.2f} | "
            f"{row['speedup_vs_torch']:.2f}x |"
        )
    step = report["training_step"]
    s = step["size"]
    lines += [
        "",
        f"One training step (AdamW), N={s['N']}, L={s['L']}, d_model={s['d_model']}, num_heads={s['num_heads']}, "
        f"d_ff={s['d_ff']}, {s['num_layers']} layers, padded batch: TinyTransformer {step['tinyformer_ms']:.1f} ms, "
        f"nn.TransformerEncoder model {step['torch_ms']:.1f} ms, speed-up {step['speedup_vs_torch']:.2f}x.",
    ]
    memory, enc = report["memory"], report["encoding"]
    lines += [
        "",
        f"Plain float32 matmul (1024^3): {report['matmul_gflops']:.1f} GFLOP/s.",
        "",
        f"Peak memory above baseline at L = 2048: fast path {memory['fast_path_mib']:.1f} MiB, explicit path "
        f"{memory['explicit_path_mib']:.1f} MiB (one (N, H, L, S) float32 tensor is {memory['weights_tensor_mib']:.0f} MiB).",
        "",
        f"Encoding (1024, 512): vectorized {enc['vectorized_ms']:.2f} ms, double loop {enc['loop_ms']:.0f} ms, "
        f"speed-up {enc['speedup']:.0f}x.",
        "",
        *bench_decoding.markdown_lines(report["decoding"]),
        *bench_serving.markdown_lines(report["serving"]),
        *flash_markdown(report["flash"]),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/bench"))
    parser.add_argument("--min-run-time", type=float, default=3.0, help="seconds of timing per measurement")
    parser.add_argument("--memory-child", choices=["0", "1"], help=argparse.SUPPRESS)
    parser.add_argument("--only-flash", action="store_true", help="run only the flash_attention section")
    args = parser.parse_args()
    if args.memory_child is not None:
        peak_memory_child(args.memory_child == "1")
        return
    if args.only_flash:
        text = "\n".join(flash_markdown(time_flash(args.min_run_time))) + "\n"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "flash.md").write_text(text)
        print(text)
        return
    report = {
        "machine": f"{platform.machine()}, {platform.processor() or 'unknown CPU'}",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "attention": time_attention(args.min_run_time),
        "attention_backward": time_attention_backward(args.min_run_time),
        "training_step": time_training_step(args.min_run_time),
        "matmul_gflops": matmul_gflops(args.min_run_time),
        "memory": peak_memory(),
        "encoding": time_encoding(args.min_run_time),
        "decoding": bench_decoding.time_decoding(args.min_run_time),
        "serving": bench_serving.time_serving(args.min_run_time),
        "flash": time_flash(args.min_run_time),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
