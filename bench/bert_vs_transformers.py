"""Training throughput of ``experiments.bert`` against Hugging Face's ``BertForMaskedLM``, one GPU.

    python bench/bert_vs_transformers.py                       # bert-base, batches 32..256, fp32 + bf16
    python bench/bert_vs_transformers.py --out bench.csv       # also write the table (.csv or .json)
    python bench/bert_vs_transformers.py --device cpu --model-preset tiny --batches 4 8 --steps 3  # smoke

Both models get the same architecture (the preset), dropout 0.1, the same synthetic batch (random
ids, 15% of positions labelled, the rest -100), the same loss (cross-entropy over every position's
logits), AdamW (fused on CUDA), float32 weights and, for bfloat16, autocast. Each (model, precision,
batch) point runs in a fresh subprocess (this script with ``--one``) so allocator state and caches
do not leak between points. Warm-up steps are not measured; the window starts and ends with a
device synchronize and is timed with ``time.perf_counter``; per-step CUDA events give the spread.
Peak memory is ``torch.cuda.max_memory_allocated`` over the window.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("hf", "ours")
RESULT_PREFIX = "RESULT "
GIB = 1024**3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu for a smoke run")
    p.add_argument("--model-preset", default="bert-base", help="a preset of experiments.bert")
    p.add_argument("--batches", type=int, nargs="+", default=[32, 64, 128, 256])
    p.add_argument("--precisions", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5, help="unmeasured steps before the window")
    p.add_argument("--steps", type=int, default=20, help="measured steps")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900, help="seconds per point")
    p.add_argument("--out", type=Path, help="write the results here: .json, else CSV")
    p.add_argument("--one", nargs=3, metavar=("MODEL", "PRECISION", "BATCH"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# One point, in its own process


def build_model(name: str, preset: str, device: Any, seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """(model, forward(ids) -> logits, facts) for ``hf`` or ``ours``, float32, on ``device``."""
    import torch

    sys.path.insert(0, str(ROOT))
    from experiments import bert

    _, config = bert.resolve_config({"model": preset})
    dropout = 0.1
    if name == "ours":
        model = bert.make_model(config, dropout, device, bert.device_generator(device, seed))
        return model, model, {}

    import transformers

    hf_config = transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position, type_vocab_size=bert.TYPE_VOCAB_SIZE,
        hidden_act="gelu", hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
        layer_norm_eps=bert.LAYER_NORM_EPS)
    torch.manual_seed(seed)
    model = transformers.AutoModelForMaskedLM.from_config(hf_config, attn_implementation="sdpa")
    model = model.to(device=device, dtype=torch.float32)
    facts = {"attn_implementation": model.config._attn_implementation,
             "transformers_version": transformers.__version__}
    return model, lambda ids: model(input_ids=ids).logits, facts


def measure(name: str, precision: str, batch_size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Train ``name`` for warm-up + measured steps; return throughput, spread and peak memory."""
    import torch
    from torch.nn import functional as F

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, forward, facts = build_model(name, args.model_preset, device, args.seed)
    model.train()
    vocab = model.config.vocab_size

    # The same batch for both models: same seed, same generator, same device.
    g = torch.Generator(device=device).manual_seed(args.seed)
    ids = torch.randint(1, vocab, (batch_size, args.seq_len), device=device, generator=g)
    masked = torch.rand(batch_size, args.seq_len, device=device, generator=g) < 0.15
    labels = torch.where(masked, ids, -100)
    inputs = torch.where(masked, 0, ids)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=cuda)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bfloat16"
                else contextlib.nullcontext())

    def train_step() -> torch.Tensor:
        with autocast:
            logits = forward(inputs)
            loss = F.cross_entropy(logits.view(-1, vocab), labels.view(-1), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(args.warmup):
        train_step()
    if cuda:
        torch.cuda.synchronize()  # sync point: the window starts with an idle device
        torch.cuda.reset_peak_memory_stats()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)] if cuda else []
    marks: list[float] = []
    t0 = time.perf_counter()
    if cuda:
        events[0].record()
    for i in range(args.steps):
        loss = train_step()
        if cuda:
            events[i + 1].record()
        else:
            marks.append(time.perf_counter())  # CPU ops are synchronous: the step is done
    if cuda:
        torch.cuda.synchronize()  # sync point: the window ends when the device is done
    elapsed = time.perf_counter() - t0

    if cuda:
        step_ms = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    else:
        step_ms = [(b - a) * 1000 for a, b in zip([t0, *marks], marks)]
    mean_ms = statistics.fmean(step_ms)
    return {
        "model": name, "precision": precision, "batch": batch_size,
        "samples_per_s": batch_size * args.steps / elapsed,
        "step_time_ms_p50": statistics.median(step_ms),
        "step_time_cv": statistics.pstdev(step_ms) / mean_ms if len(step_ms) > 1 else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / GIB if cuda else None,
        "loss": loss.item(),  # after the window: deliberate host read
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "torch_version": torch.__version__,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        **facts,
    }


def run_one(args: argparse.Namespace) -> None:
    """``--one``: measure a point and print it as one JSON line; an OOM is a result too."""
    import torch

    name, precision, batch = args.one[0], args.one[1], int(args.one[2])
    try:
        result = measure(name, precision, batch, args)
    except torch.OutOfMemoryError:
        result = {"model": name, "precision": precision, "batch": batch, "error": "out of memory"}
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# The sweep, in the parent (which never touches the GPU)


def run_point(name: str, precision: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one point in a fresh subprocess and read its JSON line back."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", name, precision, str(batch),
           "--device", args.device, "--model-preset", args.model_preset, "--seq-len", str(args.seq_len),
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--lr", str(args.lr),
           "--seed", str(args.seed)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if lines:
        return json.loads(lines[-1][len(RESULT_PREFIX):])
    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return {"error": tail[-1] if tail else f"exit code {proc.returncode} without a result"}


def run_harness_point(precision: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """The same point through the real trial harness (``python -m orchestrator.harness``), as a
    sweep runs it: its own synthetic batches made on the device each micro-batch, per-step CUDA
    events, the loss accumulated on the device, fused AdamW."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        config = {"experiment": "experiments.bert", "result_path": str(result_path),
                  "params": {"device": args.device, "model": args.model_preset, "seq_len": args.seq_len,
                             "batch_size": batch, "dtype": precision, "optimizer": "adamw_fused",
                             "lr": args.lr, "seed": args.seed},
                  "trial": {"warmup_steps": args.warmup, "measure_steps": args.steps, "min_measure_s": 0.0}}
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config))
        try:
            proc = subprocess.run([sys.executable, "-m", "orchestrator.harness", str(config_path)],
                                  capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {args.timeout:.0f} s"}
        if not result_path.exists():
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            return {"error": tail[-1] if tail else f"exit code {proc.returncode} without a result"}
        result = json.loads(result_path.read_text())
    if result["status"] != "ok":
        return {"model": "harness", "error": "out of memory" if result["status"] == "oom" else result.get("detail")}
    m = result["metrics"]
    return {"model": "harness", "precision": precision, "batch": batch, "samples_per_s": m["samples_per_s"],
            "step_time_ms_p50": m["step_time_ms_p50"], "step_time_cv": m.get("throughput_cv"),
            "peak_memory_gib": m.get("peak_allocated_gib"), "loss": m.get("loss")}


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def throughput(r: dict[str, Any]) -> str:
    """Samples/s with its spread, or the error."""
    if "samples_per_s" not in r:
        return "oom" if r.get("error") == "out of memory" else "n/a"
    spread = f" ±{r['step_time_cv'] * 100:.1f}%" if r.get("step_time_cv") is not None else ""
    return f"{r['samples_per_s']:,.1f}{spread}"


def ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    return a["samples_per_s"] / b["samples_per_s"] if "samples_per_s" in a and "samples_per_s" in b else None


def flat_row(precision: str, batch: int, hf: dict[str, Any], ours: dict[str, Any],
             harness: dict[str, Any]) -> dict[str, Any]:
    """One line of the CSV/JSON output."""
    row: dict[str, Any] = {"precision": precision, "batch": batch, "ratio_ours_hf": ratio(ours, hf),
                           "ratio_harness_hf": ratio(harness, hf)}
    for prefix, r in (("hf", hf), ("ours", ours), ("harness", harness)):
        for key in ("samples_per_s", "peak_memory_gib", "step_time_ms_p50", "step_time_cv", "loss",
                    "num_parameters", "error"):
            row[f"{prefix}_{key}"] = r.get(key)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        run_one(args)
        return 0

    hf_missing = importlib.util.find_spec("transformers") is None
    points: list[tuple[str, int, dict[str, Any], dict[str, Any], dict[str, Any]]] = []
    for precision in args.precisions:
        for batch in args.batches:
            hf = ({"error": "transformers not installed"} if hf_missing
                  else run_point("hf", precision, batch, args))
            ours = run_point("ours", precision, batch, args)
            harness = run_harness_point(precision, batch, args)
            points.append((precision, batch, hf, ours, harness))
            errors = "".join(f"  [{m}: {r['error']}]" for m, r in (("hf", hf), ("ours", ours), ("harness", harness))
                             if "error" in r)
            print(f"{precision:>9} batch {batch:>4}: hf {throughput(hf):>18}  ours {throughput(ours):>18}  "
                  f"harness {throughput(harness):>18}{errors}", flush=True)

    results = [r for *_, hf, ours, harness in points for r in (hf, ours)]
    first = lambda key, model=None: next((r[key] for r in results  # noqa: E731
                                          if key in r and model in (None, r.get("model"))), None)
    env = {k: first(k) for k in ("device_name", "torch_version", "float32_matmul_precision",
                                 "transformers_version", "attn_implementation")}
    print(f"\n{args.model_preset}, seq_len {args.seq_len}, {args.warmup} warm-up + {args.steps} measured steps "
          f"on {env['device_name']} (torch {env['torch_version']}, transformers "
          f"{env['transformers_version'] or 'not installed'}, hf attention {env['attn_implementation'] or 'n/a'}, "
          f"float32 matmul precision {env['float32_matmul_precision']})")
    n_hf, n_ours = first("num_parameters", "hf"), first("num_parameters", "ours")
    mismatch = n_hf is not None and n_ours is not None and n_hf != n_ours
    print(f"parameters: hf {fmt(n_hf, ',')}, ours {fmt(n_ours, ',')}"
          + ("  (DIFFERENT: the architectures do not match)" if mismatch else ""))

    header = ["precision", "batch", "hf samples/s", "ours samples/s", "harness samples/s", "ours/hf",
              "harness/hf", "hf peak GiB", "ours peak GiB", "harness peak GiB"]
    rows = [flat_row(*p) for p in points]
    table = [[precision, str(batch), throughput(hf), throughput(ours), throughput(harness),
              fmt(row["ratio_ours_hf"], ".3f"), fmt(row["ratio_harness_hf"], ".3f"),
              fmt(hf.get("peak_memory_gib"), ".2f"), fmt(ours.get("peak_memory_gib"), ".2f"),
              fmt(harness.get("peak_memory_gib"), ".2f")]
             for (precision, batch, hf, ours, harness), row in zip(points, rows)]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    for line in (header, ["-" * w for w in widths], *table):
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths)))
    print("ours = experiments.bert in the same bare loop as hf; harness = the same model through "
          "python -m orchestrator.harness, as a sweep trial runs it.\n"
          "± = coefficient of variation of the per-step times (harness: of sub-window throughput); "
          "peak = torch.cuda.max_memory_allocated over the measured window")
    worst = [r["ratio_harness_hf"] for r in rows if r["ratio_harness_hf"] is not None]
    if worst:
        print(f"harness/hf: min {min(worst):.3f} over {len(worst)} points (target >= 0.95)")

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.out.suffix == ".json":
            config = {k: v for k, v in vars(args).items() if k not in ("one", "out")}
            args.out.write_text(json.dumps({"config": config, "environment": env, "rows": rows},
                                           indent=1, default=str))
        else:
            with args.out.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
