"""Where a trial's start-up goes: real trials of one configuration of a spec, phase by phase, for
this checkout's code and for others' side by side, alternating.

    python bench/startup.py --device cpu --set model=bert-base --set batch_size=1 --set seq_len=16 \\
        --measure-steps 2 --min-measure-s 0.5 --env OMP_NUM_THREADS=1 --compare /tmp/before
    python bench/startup.py --device cuda --only batch_size=64 --only dtype=bfloat16 \\
        --only activation_checkpointing=False --compare /tmp/before --trials 8

Each trial runs as in a sweep: ``orchestrator.launch.SlotLauncher`` forks it from a fork server that
has imported torch, the harness and the experiment, and run its preload hook with the spec's fixed
parameters where its code has one (one launcher per variant, its server started
and ready before the first trial, all launchers sharing one ``Host``, so that no import runs beside
a timed window). A variant is a checkout's root (``--compare DIR``: ``DIR/orchestrator`` and
``DIR/experiments`` are the trial's code, e.g. ``git archive REV orchestrator experiments | tar -x -C
DIR``); the launcher is always this checkout's. Each round runs every variant once, the order
rotated from round to round, so that drift of the machine falls on all alike.

Per phase (between consecutive marks of the trial's ``timeline``: ``orchestrator/harness/marks.py``)
it prints the median over the trials and the spread (min-max), then ``startup_s`` (the trial's
own figure: its ``device`` mark to ``warmup_done``), the timed window, the throughput and the
window's peak memory: a start-up change must leave the last two as they were (and the losses,
where the variants build the same weights and batches). Then, for
``startup_s`` and the throughput, each variant's ratio to the first one within each round
(paired: slow drift of the machine cancels); two copies of the same code (``--compare`` twice)
give the noise floor beside it. Code from before the marks existed reports ``startup_s`` only.
``process -> trial start`` (from the fork, or from the configuration's arrival at a pre-started
interpreter, to the trial's first mark) is outside ``startup_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec import knobs# noqa: E402
from orchestrator.harness import marks as MK  # noqa: E402
from orchestrator.launch import Host, SlotLauncher, wait_for_activity  # noqa: E402
from orchestrator.search.space import configurations, make_plan, trial_params  # noqa: E402
from orchestrator.spec.load import load_spec  # noqa: E402
from orchestrator import trialdir  # noqa: E402
from orchestrator.protocol import TrialConfig, config_of  # noqa: E402

PHASE_NAMES = {MK.DEVICE_READY: "device init", MK.LIMITS_APPLIED: "limits", MK.BUILT: "build",
               MK.WRAPPED: "checkpointing/compile", MK.OPTIMIZER_READY: "optimizer",
               MK.WARMUP_DONE: "final synchronize"}


def phases(warmup_steps: int) -> list[tuple[str, str, str]]:
    """(label, from mark, to mark) for each phase of ``startup_s``, in order."""
    names = MK.startup_marks(warmup_steps)
    out = []
    for a, b in zip(names, names[1:]):
        label = PHASE_NAMES.get(b) or f"warm-up step {b.rsplit('_', 1)[1]}"
        out.append((label, a, b))
    return out


def figures(result: dict[str, Any], warmup_steps: int) -> dict[str, float | None]:
    """One trial's phase durations (s) and figures (units in their names); None where its code has
    no such mark."""
    tl, m = result.get("timeline", {}), result.get("metrics", {})
    out: dict[str, float | None] = {}
    begun = tl.get("forked", tl.get("config_received"))
    out["process -> trial start"] = tl[MK.DEVICE] - begun if begun and MK.DEVICE in tl else None
    for label, a, b in phases(warmup_steps):
        out[label] = tl[b] - tl[a] if a in tl and b in tl else None
    out["startup_s"] = m.get("startup_s")
    out["window (measure_s)"] = m.get("measure_s")
    out["samples_per_s"] = m.get("samples_per_s")
    out["peak_memory_gib"] = m.get("peak_memory_gib")
    out["loss_first"], out["loss"] = m.get("loss_first"), m.get("loss")
    return out


def trial_config(spec: Any, params: dict[str, Any], number: int) -> TrialConfig:
    """The configuration a sweep sends its trial (``sweep/loop.py``'s ``_prepare``)."""
    return config_of({"experiment": spec.experiment, "trial_number": number, "params": params,
            "not_applied": {}, "allow_swap": True,
            "trial": {"warmup_steps": spec.trial.warmup_steps, "measure_steps": spec.trial.measure_steps,
                      "min_measure_s": spec.trial.min_measure_s}})


def run_trial(launcher: SlotLauncher, launchers: list[SlotLauncher], config: TrialConfig,
              trial_dir: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    run = launcher.start(config, trial_dir, env, timeout_s, [env])
    while not run.exited:
        wait_for_activity(launchers)
        for each in launchers:
            each.tick()
    outcome = run.launched().outcome
    if outcome.status != "ok":
        log = (trial_dir / trialdir.LOG).read_text(errors="replace")[-3000:]
        raise SystemExit(f"startup: trial {config.trial_number} ended {outcome.status}: {outcome.detail}\n{log}")
    return json.loads((trial_dir / trialdir.RESULT).read_text())


def start_servers(launchers: list[SlotLauncher], env: dict[str, str]) -> None:
    """Each variant's fork server started and imported before the first trial (where fork is used)."""
    for launcher in launchers:
        launcher.prewarm(env)
    deadline = time.monotonic() + 300
    while any(not s.ready and s.returncode is None for lr in launchers for s in lr.spares):
        if time.monotonic() > deadline:
            raise SystemExit("startup: a fork server did not finish importing in 300 s")
        wait_for_activity(launchers, 0.2)
        for launcher in launchers:
            launcher.tick()


def cell(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{med:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def print_table(columns: dict[str, list[dict[str, float | None]]], warmup_steps: int) -> None:
    names = list(columns)
    rows = ["process -> trial start", *(p[0] for p in phases(warmup_steps)), "startup_s",
            "window (measure_s)", "samples_per_s", "peak_memory_gib", "loss_first", "loss"]
    width = max(26, *(len(n) + 2 for n in names))
    print(f"\n{'median (min-max)':<24s}" + "".join(f"{n:>{width}s}" for n in names)
          + (f"{'ratio':>8s}" if len(names) >= 2 else ""))
    for row in rows:
        values = {n: [t[row] for t in columns[n] if t.get(row) is not None] for n in names}
        fmt = {"samples_per_s": ".4g", "loss_first": ".4f", "loss": ".4f"}.get(row, ".3f")
        line = f"{row:<24s}" + "".join(f"{cell(values[n], fmt):>{width}s}" for n in names)
        first, last = values[names[0]], values[names[-1]]
        if len(names) >= 2 and first and last and statistics.median(first):
            line += f"{statistics.median(last) / statistics.median(first):>8.2f}"
        print(line)
        if row == "process -> trial start" or row == phases(warmup_steps)[-1][0]:
            print("  " + "-" * (22 + width * len(names)))
    if len(names) >= 2:
        print(f"ratio: {names[-1]} / {names[0]} (medians)")
        print("\nper round, against " + names[0] + " in the same round (paired: the machine's drift cancels):")
        for name in names[1:]:
            for row in ("startup_s", "samples_per_s"):
                ratios = [b[row] / a[row] for a, b in zip(columns[names[0]], columns[name]) if a.get(row) and b.get(row)]
                print(f"  {row:<14s} {name:>{width}s}: {cell(ratios, '.3f')}")


def parse_value(text: str) -> Any:
    """A ``--set`` value as YAML reads it (``8`` an int, ``false`` a bool, ``bert-mini`` a string)."""
    return yaml.safe_load(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "sweeps" / "bert_base_devices.yaml"))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"))
    ap.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                    help="keep the grid's configurations with this value (repeatable); the first one left runs")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="then set this parameter (repeatable; the value read as YAML; null removes it)")
    ap.add_argument("--trials", type=int, default=5, help="trials of each variant (one per round)")
    ap.add_argument("--warmup-steps", type=int, help="override the spec's trial.warmup_steps")
    ap.add_argument("--measure-steps", type=int, help="override the spec's trial.measure_steps")
    ap.add_argument("--min-measure-s", type=float, help="override the spec's trial.min_measure_s")
    ap.add_argument("--cores", help="run the trials on these CPU cores only (e.g. 1 or 0,1), as a CPU slot "
                    "does: torch sizes its thread pools to them (on a busy CPU, one thread per trial is steadier)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set this in every trial's environment (repeatable), e.g. OMP_NUM_THREADS=1")
    ap.add_argument("--compare", action="append", default=[], type=Path, metavar="DIR",
                    help="another checkout's root (its orchestrator/ and experiments/ run the trials); repeatable")
    ap.add_argument("--json", type=Path, help="also write every trial's figures and timeline here")
    args = ap.parse_args()
    for flag, items in (("--only", args.only), ("--set", args.set), ("--env", args.env)):
        if bad := [o for o in items if "=" not in o]:
            ap.error(f"{flag} takes KEY=VALUE, got {bad[0]!r}")

    spec = load_spec(args.spec, {"--device": (("device",), args.device),
                                 "--warmup-steps": (("trial", "warmup_steps"), args.warmup_steps),
                                 "--measure-steps": (("trial", "measure_steps"), args.measure_steps),
                                 "--min-measure-s": (("trial", "min_measure_s"), args.min_measure_s)})
    plan = make_plan(spec, args.device)
    chosen = [c for c in configurations(plan) if all(str(c.get(k)) == v for k, v in
                                                     (o.split("=", 1) for o in args.only))]
    if not chosen:
        raise SystemExit(f"startup: no configuration of {args.spec} has {' and '.join(args.only)}")
    params = trial_params(plan, chosen[0])
    for key, value in (s.split("=", 1) for s in args.set):
        if parse_value(value) is None:
            params.pop(key, None)
        else:
            params[key] = parse_value(value)
    env = knobs.trial_env(params, args.device)
    warmup_steps = spec.trial.warmup_steps

    variants = {(d.name if [c.name for c in args.compare].count(d.name) == 1 else str(d)): d.resolve()
                for d in args.compare}
    variants["this checkout"] = ROOT
    for name, root in variants.items():
        if not (root / "orchestrator" / "harness").is_dir():
            raise SystemExit(f"startup: {name} has no orchestrator/harness: not a checkout's root")
    work = Path(tempfile.mkdtemp(prefix="startup-"))
    os.chdir(work)  # `python -m orchestrator.harness` must find each variant's code, not the cwd's
    host = Host()
    base = os.environ.get("PYTHONPATH", "")
    cores = frozenset(int(c) for c in args.cores.split(",")) if args.cores else None
    extra_env = dict(e.split("=", 1) for e in args.env)
    launchers = {name: SlotLauncher(spec.experiment, {**extra_env, "PYTHONPATH": os.pathsep.join(
                                        p for p in (str(root), base) if p)}, cores, work, None, host=host,
                                    fixed=dict(spec.fixed))
                 for name, root in variants.items()}
    print(f"startup: {spec.experiment} {json.dumps(params)}")
    print(f"trial: warmup_steps {warmup_steps}, measure_steps {spec.trial.measure_steps}, "
          f"min_measure_s {spec.trial.min_measure_s}; {args.trials} trials per variant, alternating"
          + (f"; cores {args.cores}" if args.cores else "") + "".join(f"; {e}" for e in args.env), flush=True)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in variants}
    number = 0
    try:
        start_servers(list(launchers.values()), env)
        names = list(variants)
        for r in range(args.trials):
            for name in names[r % len(names):] + names[:r % len(names)]:
                number += 1
                result = run_trial(launchers[name], list(launchers.values()),
                                   trial_config(spec, params, number), trialdir.folder(work, number), env,
                                   spec.trial.timeout_s)
                results[name].append(result)
                m = result["metrics"]
                print(f"  round {r + 1} {name:>24s}: startup_s {m['startup_s']:.3f}  "
                      f"samples/s {m['samples_per_s']:,.1f}", flush=True)
    finally:
        for launcher in launchers.values():
            launcher.close()

    prov = next(iter(results.values()))[0].get("provenance", {})
    print(f"\ndevice: {args.device} ({prov.get('device_name')}); torch {prov.get('torch_version')}"
          + (f", CUDA {prov['cuda_version']}" if prov.get("cuda_version") else "")
          + f"; {os.cpu_count()} CPUs")
    columns = {n: [figures(r, warmup_steps) for r in rs] for n, rs in results.items()}
    print_table(columns, warmup_steps)
    if args.json:
        args.json.write_text(json.dumps({"params": params, "device": args.device, "provenance": prov,
                                         "figures": columns,
                                         "timelines": {n: [r.get("timeline") for r in rs] for n, rs in results.items()}},
                                        indent=1))


if __name__ == "__main__":
    main()
