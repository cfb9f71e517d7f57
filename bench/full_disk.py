"""Issue #28's new user, on a real full disk: what a sweep says and leaves when a store fills up.

    sudo python bench/full_disk.py                    # this checkout
    sudo python bench/full_disk.py --compare /tmp/old # another checkout's code first, the same way

Needs root (or CAP_SYS_ADMIN) to mount a small tmpfs. Two scenarios, each in a fresh folder with
a 9-configuration CPU sweep (``experiments.faults``, about a second a trial):

- ``mlflow``: the study on a roomy disk, MLflow's SQLite store (``--tracking-uri``) on an 8 MiB
  tmpfs that a watcher fills with zeros once the study holds 2 results;
- ``study``: the other way round (``--storage`` on the tmpfs).

Then the space is freed and the same command runs again, and ``orchestrate check`` (where the
code has it). For each command: its exit code, stderr's lines and tracebacks, stderr's first line,
the summary's lines about MLflow, and what the stores hold (Optuna's and MLflow's own APIs).
"""

from __future__ import annotations

import argparse
import errno
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = textwrap.dedent("""
    name: newuser
    experiment: experiments.faults
    device: cpu
    fixed: {batch_size: 8}
    space:
      hidden_size: [8, 16, 24, 32, 40, 48, 56, 64, 72]
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 3, min_measure_s: 0.3, timeout_s: 60}
    """).lstrip()


def fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def fill_after(study_db: Path, n: int, folder: Path) -> threading.Thread:
    """Fill ``folder`` once the SQLite study at ``study_db`` holds ``n`` finished trials."""
    def watch() -> None:
        while True:
            try:
                con = sqlite3.connect(f"file:{study_db}?mode=ro", uri=True, timeout=1)
                try:
                    (done,) = con.execute("SELECT count(*) FROM trials WHERE state != 'RUNNING'").fetchone()
                finally:
                    con.close()
                if done >= n:
                    fill(folder)
                    return
            except sqlite3.Error:
                pass
            time.sleep(0.05)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def run(code: Path, args: list[str], cwd: Path) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0


def report(label: str, result: tuple[int, str, str, float], whole: bool = False) -> None:
    """A command's outcome; its stdout's lines about MLflow (``whole``: every line)."""
    code, out, err, took = result
    lines = [ln for ln in err.splitlines() if ln.strip()]
    print(f"  {label}: exit {code} in {took:.1f} s; stderr {len(lines)} line(s), "
          f"{err.count('Traceback (most recent call last)')} traceback(s)")
    if lines:
        print(f"    stderr[0]: {lines[0][:400]}")
    for ln in out.splitlines():
        if whole or ln.startswith(("MLflow:", "orchestrate check:")) or "nothing to run" in ln:
            print(f"    stdout: {ln[:300]}")


def stores(code: Path, cwd: Path, storage: str, tracking: str) -> str:
    """What the study and MLflow hold, read through their own APIs (in a subprocess with ``code``)."""
    script = textwrap.dedent("""
        import sys, collections, optuna
        from mlflow.tracking import MlflowClient
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        try:
            trials = optuna.load_study(study_name="newuser", storage=sys.argv[1]).get_trials()
            done = sum(t.state.name == "COMPLETE" for t in trials)
            study = f"study: {len(trials)} trial(s), {done} COMPLETE"
        except Exception as exc:
            study = f"study: none ({type(exc).__name__})"
        try:
            client = MlflowClient(sys.argv[2])
            exp = client.get_experiment_by_name("newuser")
            runs = [] if exp is None else client.search_runs([exp.experiment_id], "tags.role = 'trial'", max_results=1000)
            states = dict(collections.Counter(r.info.status for r in runs))
            with_metric = sum("samples_per_s" in r.data.metrics for r in runs)
            mlflow = f"MLflow: {len(runs)} trial run(s) {states}, {with_metric} with samples_per_s"
        except Exception as exc:
            mlflow = f"MLflow: unreadable ({type(exc).__name__})"
        print(study + "; " + mlflow)
        """)
    proc = subprocess.run([sys.executable, "-c", script, storage, tracking], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}, timeout=300)
    return (proc.stdout.strip() or proc.stderr.strip().splitlines()[-1])


def scenario(code: Path, which: str) -> None:
    project = Path(tempfile.mkdtemp(prefix=f"full_disk_{which}_"))
    small = project / "small"
    small.mkdir()
    (project / "mlruns").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        (project / "spec.yaml").write_text(SPEC)
        storage = f"sqlite:///{small if which == 'study' else project / 'mlruns'}/optuna.db"
        tracking = f"sqlite:///{small if which == 'mlflow' else project / 'mlruns'}/mlflow.db"
        flags = ["--storage", storage, "--tracking-uri", tracking]
        print(f"\n{which}: the {'study' if which == 'study' else 'MLflow store'} on an 8 MiB tmpfs that fills once "
              f"the study holds 2 results ({project})")
        watcher = fill_after(Path(storage[len("sqlite:///"):]), 2, small)
        report("the sweep, the disk filling", run(code, ["spec.yaml", *flags], project))
        watcher.join(timeout=10)
        print(f"    {stores(code, project, storage, tracking)}")
        (small / "filler").unlink(missing_ok=True)
        report("the same command, space freed", run(code, ["spec.yaml", *flags], project))
        print(f"    {stores(code, project, storage, tracking)}")
        if (code / "orchestrator" / "report" / "check.py").is_file():
            report("orchestrate check", run(code, ["check", "spec.yaml", *flags], project), whole=True)
        else:
            print("  orchestrate check: this code has no check command")
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", type=Path, help="another checkout's root: its code runs first, the same way")
    p.add_argument("--only", choices=("mlflow", "study"), help="one scenario")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("full_disk: needs root (or CAP_SYS_ADMIN) to mount a small tmpfs", file=sys.stderr)
        return 2
    codes = ([("that checkout", args.compare.resolve())] if args.compare else []) + [("this checkout", ROOT)]
    for label, code in codes:
        print(f"=== {label}: {code}")
        for which in ([args.only] if args.only else ["mlflow", "study"]):
            scenario(code, which)
    return 0


if __name__ == "__main__":
    sys.exit(main())
