"""Several orchestrators on one PostgreSQL study, for real: connections, the study lock, the limit.

    python bench/cluster.py                                   # 16 orchestrators, 200 configurations, grid
    python bench/cluster.py --sampler auto                    # the same with the default search
    python bench/cluster.py --orchestrators 4 --trials 24 --json /tmp/cluster.json

Starts a throwaway PostgreSQL server from this machine's binaries (``tests/servers.py``), one
database for the study and one for MLflow, and N ``orchestrate spec.yaml`` processes, each in its
own folder, all on the same study: ``experiments.faults`` (a tiny CPU model), a fixed batch size
and ``--trials`` hidden sizes. Every orchestrator names itself in its connection URLs
(``application_name=orch-<i>``), so a sampler thread can count each one's connections in
``pg_stat_activity`` every 0.2 s, and writes a timeline (``ORCHESTRATE_TIMELINE``) in which the
study lock (``orchestrator.store.coordination.StudyLock``) records when it was asked for, taken and
released.

Prints and (``--json``) writes:

- wall time and results per second;
- invariants: every orchestrator exited 0; no configuration measured twice; none left RUNNING
  or WAITING; with ``--sampler grid`` every configuration measured exactly once;
- connections: the most any one orchestrator held on each database at one time, against the
  bound the code sets (study: ``study.POOL``'s 2 + 2 and the lock's own connection; MLflow: its
  pool of 2 and one overflow, ``outage.mlflow_pool``), and the server's total;
- the lock: how long a proposal (a hold in which a trial was asked for) held it, median and 90th
  percentile, how long proposals waited for it, and the share of the wall time it was held at
  all. Proposals are serialized by the lock, so 1 / (median hold) is the most proposals per
  second the study can take, and with trials of ``T`` seconds each orchestrator asks for one
  every ``T`` s: the limit is about ``T / (median hold)`` orchestrators (``--trial-s``, 2 s by
  default: the headline's fastest trials on an H100).

Exits 1 if an invariant breaks or a bound is exceeded, else 0. On the 2-core CPU the
orchestrators and their trials compete for the cores, so the hold times are upper bounds (the
lock's holder is often descheduled); see docs/scale.md for the recorded figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from servers import PostgresServer, start_postgres

ORCHESTRATE = str(Path(sys.executable).with_name("orchestrate"))
STUDY_BOUND = 5  # study.POOL: pool_size 2 + max_overflow 2, plus StudyLock's own connection
MLFLOW_BOUND = 3  # outage.mlflow_pool: MLFLOW_SQLALCHEMYSTORE_POOL_SIZE 2 + MAX_OVERFLOW 1
SAMPLE_S = 0.2


def spec_text(name: str, storage: str, tracking: str, trials: int, sampler: str) -> str:
    hidden = list(range(8, 8 + trials))
    return (f"name: {name}\n"
            "experiment: experiments.faults\n"
            "device: cpu\n"
            f"storage: {storage}\n"
            f"tracking_uri: {tracking}\n"
            "fixed: {batch_size: 4}\n"
            f"space: {{hidden_size: {hidden}}}\n"
            f"search: {{sampler: {sampler}, grace_period_s: 30, seed: 0}}\n"
            "trial: {warmup_steps: 1, measure_steps: 1, min_measure_s: 0, timeout_s: 120}\n")


def with_app(url: str, app: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={app}"


class ConnectionSampler(threading.Thread):
    """Counts connections per (database, application_name) every ``SAMPLE_S`` seconds and keeps
    the most seen at once for each, and the most on the server in all."""

    def __init__(self, pg: PostgresServer) -> None:
        super().__init__(daemon=True)
        self.pg, self.done = pg, threading.Event()
        self.peak: dict[tuple[str, str], int] = defaultdict(int)
        self.peak_total = 0
        self.samples = 0

    def run(self) -> None:
        conn = self.pg.connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.done.is_set():
                    cur.execute("SELECT datname, application_name, count(*) FROM pg_stat_activity "
                                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                                "GROUP BY 1, 2")
                    rows = cur.fetchall()
                    for db, app, n in rows:
                        self.peak[(db or "", app or "")] = max(self.peak[(db or "", app or "")], n)
                    self.peak_total = max(self.peak_total, sum(n for *_, n in rows))
                    self.samples += 1
                    self.done.wait(SAMPLE_S)
        finally:
            conn.close()

    def most_per_orchestrator(self, database: str) -> int:
        return max((n for (db, app), n in self.peak.items() if db == database and app.startswith("orch-")),
                   default=0)


def lock_figures(event_files: list[Path], wall: float, trial_s: float) -> dict[str, Any]:
    """From every orchestrator's timeline: how long each proposal (a hold of the study lock in
    which a trial was asked for: ``ask_end``) held the lock and waited for it; and the share of
    the wall time the lock was held at all (start-up and stale checks hold it too)."""
    held: list[float] = []
    waited: list[float] = []
    all_held = 0.0
    for path in event_files:
        if not path.exists():
            continue
        wait_at = held_at = None
        asked = False
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            if e["event"] == "lock_wait":
                wait_at, held_at, asked = e["t"], None, False
            elif e["event"] == "lock_held" and wait_at is not None:
                held_at = e["t"]
            elif e["event"] == "ask_end" and held_at is not None:
                asked = True
            elif e["event"] == "lock_released" and held_at is not None and wait_at is not None:
                all_held += e["t"] - held_at
                if asked:
                    held.append(e["t"] - held_at)
                    waited.append(held_at - wait_at)
                wait_at = held_at = None
    if not held:
        return {"proposals": 0}
    median = statistics.median(held)
    p90 = statistics.quantiles(held, n=10)[-1] if len(held) >= 10 else max(held)
    return {"proposals": len(held), "held_median_s": median, "held_p90_s": p90,
            "waited_median_s": statistics.median(waited), "held_share_of_wall": all_held / wall,
            "proposals_per_s_max": 1.0 / median, "orchestrators_at_limit": trial_s / median}


def phase_figures(event_files: list[Path]) -> dict[str, Any]:
    """Start-up (from the first event to the last orchestrator's ``loop_start``: probes, fork
    servers, opening the stores) against the proposing that follows (to the last ``ask_end``)."""
    events = [json.loads(line) for path in event_files if path.exists()
              for line in path.read_text().splitlines() if line.strip()]
    loops = [e["t"] for e in events if e["event"] == "loop_start"]
    asks = [e["t"] for e in events if e["event"] == "ask_end"]
    if not loops or not asks:
        return {}
    startup = max(loops) - min(e["t"] for e in events)
    proposing = max(asks) - min(loops)
    return {"startup_s": startup, "proposing_s": proposing, "asked": len(asks),
            "asked_per_s": len(asks) / proposing if proposing > 0 else None}


def study_figures(storage: str, name: str, trials: int, sampler: str) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    found = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    measured: dict[int, int] = defaultdict(int)
    for t in found:
        if t.user_attrs.get("status") == "ok" and "repeat_of" not in t.user_attrs:
            measured[t.params["hidden_size"]] += 1
    twice = sorted(h for h, n in measured.items() if n > 1)
    unfinished = [t.number for t in found if not t.state.is_finished()]
    missing = sorted(set(range(8, 8 + trials)) - set(measured)) if sampler == "grid" else []
    return {"trials": len(found), "measured": sum(measured.values()), "configurations": len(measured),
            "measured_twice": twice, "unfinished": unfinished, "missing": missing}


def run(pg: PostgresServer, orchestrators: int, trials: int, sampler: str, trial_s: float,
        root: Path) -> dict[str, Any]:
    """N orchestrators on one new study on ``pg`` until they all exit; their folders under ``root``."""
    name = f"cluster_{sampler}"
    storage, tracking = pg.new_database("study"), pg.new_database("runs")
    study_db, runs_db = storage.rsplit("/", 1)[1], tracking.rsplit("/", 1)[1]
    sampler_thread = ConnectionSampler(pg)
    sampler_thread.start()
    procs, folders = [], []
    started = time.monotonic()
    for i in range(orchestrators):
        folder = root / f"o{i:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        app = f"orch-{i:02d}"
        (folder / "spec.yaml").write_text(spec_text(name, with_app(storage, app), with_app(tracking, app),
                                                   trials, sampler))
        events = folder / "events.jsonl"
        events.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "ORCHESTRATE_TIMELINE": str(events)}
        with open(folder / "output.txt", "w") as out:
            procs.append(subprocess.Popen([ORCHESTRATE, "spec.yaml", "--no-check"], cwd=folder, env=env,
                                          stdout=out, stderr=subprocess.STDOUT))
        folders.append(folder)
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - started
    sampler_thread.done.set()
    sampler_thread.join()
    study = study_figures(storage, name, trials, sampler)
    lock = lock_figures([f / "events.jsonl" for f in folders], wall, trial_s)
    phases = phase_figures([f / "events.jsonl" for f in folders])
    failed = [(i, c, (folders[i] / "output.txt").read_text()[-2000:]) for i, c in enumerate(codes) if c != 0]
    figures = {
        "orchestrators": orchestrators, "configurations": trials, "sampler": sampler, "wall_s": wall,
        "results_per_s": study["trials"] / wall, "exit_codes": codes, "study": study, "lock": lock,
        "phases": phases,
        "connections": {
            "study_most_per_orchestrator": sampler_thread.most_per_orchestrator(study_db),
            "study_bound": STUDY_BOUND,
            "mlflow_most_per_orchestrator": sampler_thread.most_per_orchestrator(runs_db),
            "mlflow_bound": MLFLOW_BOUND,
            "server_total_most": sampler_thread.peak_total, "samples": sampler_thread.samples},
        "failed_output": failed, "trial_s": trial_s,
    }
    return figures


def verdicts(f: dict[str, Any]) -> list[tuple[str, bool]]:
    s, c = f["study"], f["connections"]
    checks = [("every orchestrator exited 0", all(code == 0 for code in f["exit_codes"])),
              ("no configuration measured twice", not s["measured_twice"]),
              ("no trial left RUNNING or WAITING", not s["unfinished"]),
              (f"study connections per orchestrator <= {c['study_bound']}",
               c["study_most_per_orchestrator"] <= c["study_bound"]),
              (f"MLflow connections per orchestrator <= {c['mlflow_bound']}",
               c["mlflow_most_per_orchestrator"] <= c["mlflow_bound"])]
    if f["sampler"] == "grid":
        checks.append(("every configuration measured exactly once", not s["missing"]
                       and s["configurations"] == f["configurations"]))
    return checks


def report(f: dict[str, Any]) -> bool:
    s, c, lock = f["study"], f["connections"], f["lock"]
    print(f"{f['orchestrators']} orchestrators, {f['configurations']} configurations, sampler {f['sampler']}: "
          f"{f['wall_s']:.1f} s wall, {s['trials']} trials ({f['results_per_s']:.2f}/s), "
          f"{s['measured']} measured")
    print(f"connections at once: study {c['study_most_per_orchestrator']} per orchestrator "
          f"(bound {c['study_bound']}), MLflow {c['mlflow_most_per_orchestrator']} (bound {c['mlflow_bound']}), "
          f"server {c['server_total_most']} in all ({c['samples']} samples every {SAMPLE_S} s)")
    p = f.get("phases") or {}
    if p.get("asked_per_s"):
        print(f"phases: start-up {p['startup_s']:.1f} s (until every orchestrator's loop ran), then "
              f"{p['asked']} trials asked in {p['proposing_s']:.1f} s ({p['asked_per_s']:.1f}/s)")
    if lock.get("proposals"):
        print(f"study lock: {lock['proposals']} proposals held it {lock['held_median_s'] * 1000:.0f} ms "
              f"(median; p90 {lock['held_p90_s'] * 1000:.0f} ms) after waiting "
              f"{lock['waited_median_s'] * 1000:.0f} ms (median); held {lock['held_share_of_wall']:.0%} of the wall")
        print(f"limit: {lock['proposals_per_s_max']:.1f} proposals/s -> about "
              f"{lock['orchestrators_at_limit']:.0f} orchestrators with trials of "
              f"{f['trial_s']:.0f} s before proposals queue for the lock")
    ok = True
    for label, passed in verdicts(f):
        ok &= passed
        print(f"  {'PASS' if passed else 'FAIL'}  {label}")
    for i, code, tail in f["failed_output"]:
        print(f"--- orchestrator {i} exited {code}:\n{tail}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orchestrators", type=int, default=16)
    parser.add_argument("--trials", type=int, default=200, help="configurations (hidden sizes) in the study")
    parser.add_argument("--sampler", choices=("grid", "auto"), default="grid")
    parser.add_argument("--trial-s", type=float, default=2.0, help="trial length for the scale limit")
    parser.add_argument("--keep", type=Path, help="put the orchestrators' folders here (kept)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="cluster-"))
    with contextlib.contextmanager(start_postgres)() as pg:
        figures = run(pg, args.orchestrators, args.trials, args.sampler, args.trial_s, root)
    ok = report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
