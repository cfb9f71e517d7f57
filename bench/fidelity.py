"""Do pre-started interpreters change what a trial measures? The same configurations, run the old
way (a fresh process started for the trial, nothing else alive) and the new way (the trial given
to a spare started ahead of it, as a sweep does: on Linux forked from the slot's fork server, else
an interpreter pre-started for it, with the slot's next ones beside it), alternating in one run,
so drift of the machine falls on both alike.

    python bench/fidelity.py                                 # the MLP spec's grid on the CPU
    python bench/fidelity.py --device cuda --rounds 5        # on an NVIDIA GPU
    python bench/fidelity.py --spec sweeps/bert_tiny.yaml --configs 4
    python bench/fidelity.py --device cuda --spec sweeps/bert_base_devices.yaml --only batch_size=64
    python bench/fidelity.py --device cuda --overlap         # prepared processes against forked ones

With ``--overlap`` (issue #40 item 2, Linux) the two ways are both forked from one fork server:
"forked" for the trial, as before, against "prepared": forked ahead, its device initialised
(``SparePool.prepare_next``: on CUDA its context) before the configuration arrives, as a sweep now
does while the previous trial's process exits. Between trials no prepared process is left alive,
as in a sweep, where a slot's next process is prepared only once its trial's window is over.

Prints, per configuration, the median throughput each way and their ratio (target: within 1%),
and the CPU seconds the pre-started interpreters used during the new way's timed windows
(target: about zero: they wait on a pipe); with ``--overlap``, also the median ``startup_s`` each
way and how long the prepared processes took to be ready. Trials run through
``orchestrator.launch``, as in a sweep: same harness, same configuration files, same gate before
the window.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.spec import knobs# noqa: E402
from orchestrator.launch import SlotLauncher, fork_server_usable, wait_for_activity  # noqa: E402
from orchestrator.search.space import configurations, make_plan, trial_params  # noqa: E402
from orchestrator.spec.load import load_spec  # noqa: E402
from orchestrator import trialdir  # noqa: E402
from orchestrator.protocol import TrialConfig, config_of  # noqa: E402


def trial_config(spec, plan, sampled: dict, number: int) -> TrialConfig:  # noqa: ANN001
    return config_of({"experiment": spec.experiment, "trial_number": number, "params": trial_params(plan, sampled),
            "not_applied": dict(plan.not_applied), "allow_swap": True,
            "trial": {"warmup_steps": spec.trial.warmup_steps, "measure_steps": spec.trial.measure_steps,
                      "min_measure_s": spec.trial.min_measure_s}})


def run_one(launcher: SlotLauncher, config: TrialConfig, trial_dir: Path, env: dict, timeout_s: float) -> dict:
    run = launcher.start(config, trial_dir, env, timeout_s, [env])
    while not run.exited:
        wait_for_activity([launcher])
        launcher.tick()
    outcome = run.launched().outcome
    if outcome.status != "ok":
        raise SystemExit(f"fidelity: trial {config.params} ended {outcome.status}: {outcome.detail}")
    return {"samples_per_s": outcome.metrics["samples_per_s"], "spare_cpu": run.spare_cpu_in_window,
            "startup_s": outcome.metrics.get("startup_s"), "prepared_s": getattr(run.interp, "prepared_s", None)}


def settle(launcher: SlotLauncher) -> None:
    """No prepared process left alive (a sweep prepares one only after its trial's window)."""
    left = launcher.pool.prepared
    launcher.pool.prepared = launcher.pool.prepare_pending = None
    launcher.prepare_device = None
    if left is not None:
        left.kill()
        while not left.reap():
            wait_for_activity([launcher], 0.05)


def overlap(spec, plan, chosen: list[dict], rounds: int, device: str, work: Path) -> dict:  # noqa: ANN001
    """``--overlap``: each configuration forked for its trial, and prepared ahead, alternating."""
    got: dict = {"forked": [[] for _ in chosen], "prepared": [[] for _ in chosen], "spare_cpu": [],
                 "startup": {"forked": [], "prepared": []}, "prepared_s": []}
    launcher = SlotLauncher(spec.experiment, {}, None, work, None, fixed=dict(spec.fixed))
    number = 0
    try:
        for r in range(rounds):
            for i, sampled in enumerate(chosen):
                config = trial_config(spec, plan, sampled, number)
                env = knobs.trial_env(config.params, device)
                if r == 0 and i == 0:
                    launcher.prewarm(env)
                for way in (("forked", "prepared") if (r + i) % 2 == 0 else ("prepared", "forked")):
                    number += 1
                    settle(launcher)
                    if way == "prepared":
                        launcher.prepare(device)
                        while not all(p.ready or p.returncode is not None for p in launcher.prepared):
                            wait_for_activity([launcher], 0.05)
                            launcher.tick()
                    one = run_one(launcher, replace(config, trial_number=number), trialdir.folder(work, number), env,
                                  spec.trial.timeout_s)
                    got[way][i].append(one["samples_per_s"])
                    got["startup"][way].append(one["startup_s"])
                    if way == "prepared":
                        if one["prepared_s"] is None:
                            raise SystemExit("fidelity: the prepared way's trial did not run in a prepared process")
                        got["prepared_s"].append(one["prepared_s"])
                    if one["spare_cpu"] is not None:
                        got["spare_cpu"].append(one["spare_cpu"])
                    print(f"  round {r + 1} {way:>8}: {sampled} {one['samples_per_s']:,.1f} samples/s, "
                          f"startup_s {one['startup_s']:.3f}", flush=True)
    finally:
        settle(launcher)
        launcher.close()
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=str(ROOT / "sweeps" / "mlp_classifier.yaml"))
    ap.add_argument("--min-measure-s", type=float, default=2.0, help="each timed window at least this long (short windows are noisy)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=3, help="measurements of each configuration each way")
    ap.add_argument("--configs", type=int, default=4, help="the first N configurations of the grid")
    ap.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                    help="keep the grid's configurations with this value (repeatable), then take the first N")
    ap.add_argument("--overlap", action="store_true",
                    help="compare trials in processes prepared ahead (device initialised) with forked ones")
    args = ap.parse_args()
    if bad := [o for o in args.only if "=" not in o]:
        ap.error(f"--only takes KEY=VALUE, got {bad[0]!r}")

    spec = load_spec(args.spec, {"--device": (("device",), args.device),
                                 "--min-measure-s": (("trial", "min_measure_s"), args.min_measure_s)})
    plan = make_plan(spec, args.device)
    chosen = [c for c in configurations(plan) if all(str(c.get(k)) == v for k, v in
                                                     (o.split("=", 1) for o in args.only))][:args.configs]
    if not chosen:
        raise SystemExit(f"fidelity: no configuration of {args.spec} has {' and '.join(args.only)}")
    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:  # the trials' folders go with it
        measure(spec, plan, chosen, args, Path(tmp))


def measure(spec, plan, chosen: list[dict], args: argparse.Namespace, work: Path) -> None:  # noqa: ANN001
    if args.overlap:
        if not fork_server_usable():
            raise SystemExit("fidelity: --overlap needs the fork server (Linux, ORCHESTRATE_FORK unset)")
        report_overlap(spec, chosen, overlap(spec, plan, chosen, args.rounds, args.device, work), args)
        return
    fresh = {"fresh": [[] for _ in chosen], "pre-started": [[] for _ in chosen]}
    spare_cpu: list[float] = []
    # the new way, as a sweep runs it: one launcher for the whole run, its spares refilled as used
    warm = SlotLauncher(spec.experiment, {}, None, work, None, fixed=dict(spec.fixed))
    number = 0
    try:
        for r in range(args.rounds):
            for i, sampled in enumerate(chosen):
                config = trial_config(spec, plan, sampled, number)
                env = knobs.trial_env(config.params, args.device)
                order = ("fresh", "pre-started") if (r + i) % 2 == 0 else ("pre-started", "fresh")
                for way in order:
                    number += 1
                    trial_dir = trialdir.folder(work, number)
                    if way == "fresh":  # nothing pre-started alive: the old launcher's situation
                        warm.close()
                        cold = SlotLauncher(spec.experiment, {}, None, work, None, prestart=0, fixed=dict(spec.fixed))
                        try:
                            got = run_one(cold, config, trial_dir, env, spec.trial.timeout_s)
                        finally:
                            cold.close()
                        warm = SlotLauncher(spec.experiment, {}, None, work, None, fixed=dict(spec.fixed))
                        warm.pending = [env]  # pre-started for the next pre-started run
                    else:
                        got = run_one(warm, config, trial_dir, env, spec.trial.timeout_s)
                        if got["spare_cpu"] is not None:
                            spare_cpu.append(got["spare_cpu"])
                    fresh[way][i].append(got["samples_per_s"])
                    print(f"  round {r + 1} {way:>11}: {sampled} {got['samples_per_s']:,.1f} samples/s",
                          flush=True)
    finally:
        warm.close()

    spares = "a fork server (one import, a forked process per trial)" if fork_server_usable() else \
        "one pre-started interpreter per trial"
    print(f"\nfidelity: {spec.name} on {args.device}, {args.rounds} rounds, alternating order; spares: {spares}")
    print(f"{'configuration':<58} {'fresh':>12} {'pre-started':>12} {'ratio':>7}   spread between rounds")
    ratios = []
    for i, sampled in enumerate(chosen):
        a, b = statistics.median(fresh["fresh"][i]), statistics.median(fresh["pre-started"][i])
        ratios.append(b / a)
        label = ", ".join(f"{k}={v}" for k, v in sampled.items())
        spread = "  ".join(f"{way} {(max(v) - min(v)) / statistics.median(v):.1%}"
                           for way, v in (("fresh", fresh["fresh"][i]), ("pre-started", fresh["pre-started"][i])))
        print(f"{label:<58} {a:>12,.1f} {b:>12,.1f} {b / a:>7.3f}   {spread}")
    worst = max(abs(r - 1) for r in ratios)
    print(f"throughput ratio pre-started / fresh: median {statistics.median(ratios):.3f}, "
          f"worst {1 + worst if max(ratios) - 1 >= 1 - min(ratios) else 1 - worst:.3f} "
          f"(target within 1%: {'PASS' if worst <= 0.01 else 'FAIL'})")
    if spare_cpu:
        print(f"pre-started interpreters' CPU during the timed windows: median {statistics.median(spare_cpu) * 1000:.0f} ms, "
              f"max {max(spare_cpu) * 1000:.0f} ms over {len(spare_cpu)} windows")



def report_overlap(spec, chosen: list[dict], got: dict, args: argparse.Namespace) -> None:  # noqa: ANN001
    print(f"\nfidelity: {spec.name} on {args.device}, {args.rounds} rounds, alternating order; both ways forked "
          "from one fork server: for the trial (forked) or ahead of it, its device initialised (prepared)")
    print(f"{'configuration':<58} {'forked':>12} {'prepared':>12} {'ratio':>7}   spread between rounds")
    ratios = []
    for i, sampled in enumerate(chosen):
        a, b = statistics.median(got["forked"][i]), statistics.median(got["prepared"][i])
        ratios.append(b / a)
        label = ", ".join(f"{k}={v}" for k, v in sampled.items())
        spread = "  ".join(f"{way} {(max(v) - min(v)) / statistics.median(v):.1%}"
                           for way, v in (("forked", got["forked"][i]), ("prepared", got["prepared"][i])))
        print(f"{label:<58} {a:>12,.1f} {b:>12,.1f} {b / a:>7.3f}   {spread}")
    worst = max(abs(r - 1) for r in ratios)
    print(f"throughput ratio prepared / forked: median {statistics.median(ratios):.3f}, "
          f"worst {1 + worst if max(ratios) - 1 >= 1 - min(ratios) else 1 - worst:.3f} "
          f"(target within 1%: {'PASS' if worst <= 0.01 else 'FAIL'})")
    for way in ("forked", "prepared"):
        values = [v for v in got["startup"][way] if v is not None]
        print(f"startup_s, {way}: median {statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})")
    print(f"prepared processes, fork to ready (the device initialised ahead): median "
          f"{statistics.median(got['prepared_s']):.3f} s ({min(got['prepared_s']):.3f}-{max(got['prepared_s']):.3f})")
    if got["spare_cpu"]:
        print(f"the fork server's CPU during the timed windows: median {statistics.median(got['spare_cpu']) * 1000:.0f} ms, "
              f"max {max(got['spare_cpu']) * 1000:.0f} ms over {len(got['spare_cpu'])} windows")


if __name__ == "__main__":
    main()
