"""Issue #39's faults, tried again as a new user meets them: each row prints the command's exit
code, how many lines it wrote on stderr (and whether a traceback), the line itself, and what was
left (trials RUNNING, processes running, what the way forward gave).

    python bench/fault_tour.py                # every row (about 5 minutes on 2 cores)
    python bench/fault_tour.py --only pipe    # the rows whose name holds a word

Real faults: files truncated and overwritten, a 4 MiB tmpfs under the trial folders (skipped
where nothing can be mounted: root or CAP_SYS_ADMIN), real setsid grandchildren, real signals,
a closed pipe, a port nobody listens on. The tests check the same (tests/scenarios/
test_lost_and_damaged.py, test_escapes.py, test_full_disk.py); this prints what docs/reliability.md
quotes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORCHESTRATE = str(Path(sys.executable).with_name("orchestrate"))


def spec(folder: Path, name: str, space: str = "hidden_size: [8, 16, 24]", extra: str = "", timeout_s: float = 60,
         search: str = "{sampler: grid}") -> Path:
    path = folder / "spec.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        experiment: experiments.faults
        device: cpu
        fixed: {{batch_size: 4{extra}}}
        space:
          {space}
        search: {search}
        trial: {{warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: {timeout_s}}}
        """))
    return path


def run(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ORCHESTRATE, *args], cwd=folder, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def said(proc: subprocess.CompletedProcess[str] | tuple[int, str]) -> str:
    """``exit N, K line(s) on stderr[, traceback]: the last line``."""
    code, err = (proc.returncode, proc.stderr) if not isinstance(proc, tuple) else proc
    lines = [ln for ln in err.splitlines() if ln.strip()]
    tb = ", a traceback" if "Traceback" in err else ""
    return f"exit {code}, {len(lines)} line(s) on stderr{tb}" + (f": {lines[-1][:400]}" if lines else "")


def running(folder: Path) -> int:
    """Trials RUNNING in the folder's SQLite study."""
    db = folder / "mlruns" / "optuna.db"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0]
    except sqlite3.Error:
        return -1
    finally:
        con.close()


def left(folder: Path, wait_s: float = 5.0) -> int:
    """Processes still working in ``folder`` (a sweep's trials and their descendants)."""
    root = str(folder.resolve())
    deadline = time.monotonic() + wait_s
    while True:
        n = 0
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and int(entry.name) != os.getpid() and \
                        os.readlink(entry / "cwd").startswith(root) and \
                        (entry / "stat").read_text().rsplit(") ", 1)[-1][:1] != "Z":
                    n += 1
            except OSError:
                continue
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def row(name: str, *facts: str) -> None:
    print(f"- {name}")
    for f in facts:
        print(f"    {f}")
    sys.stdout.flush()


def finished(folder: Path, name: str) -> Path:
    path = spec(folder, name)
    proc = run(folder, str(path))
    assert proc.returncode == 0, proc.stderr
    return path


def corrupt_mlflow(tmp: Path) -> None:
    for how in ("truncated to 4 KB", "replaced by text"):
        folder = tmp / f"mlflow-{how.split()[0]}"
        folder.mkdir()
        path = finished(folder, "damaged")
        db = folder / "mlruns" / "mlflow.db"
        if how.startswith("truncated"):
            os.truncate(db, 4096)
        else:
            db.write_text("this is not a database\n" * 20)
        facts = [f"{' '.join(a)}: {said(run(folder, *a))}" for a in
                 (("spec.yaml",), ("check", "spec.yaml"), ("check", "spec.yaml", "--repair"))]
        shutil.move(db, db.with_name("mlflow.db.corrupt"))
        repaired = run(folder, "check", "spec.yaml", "--repair")
        facts.append(f"moved aside, check --repair: exit {repaired.returncode}: "
                     + " / ".join(ln for ln in repaired.stdout.splitlines() if "records" in ln or "agree" in ln))
        facts.append(f"check: exit {run(folder, 'check', str(path)).returncode}")
        row(f"mlflow.db {how}", *facts)


def full_trials_disk(tmp: Path) -> None:
    folder = tmp / "trials-full"
    trials = folder / "mlruns" / ".trials"
    trials.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(trials)], capture_output=True).returncode:
        row("a full disk under mlruns/.trials", "skipped: cannot mount a tmpfs here")
        return
    try:
        spec(folder, "trialsfull")
        fd = os.open(trials / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)
        proc = run(folder, "spec.yaml")
        facts = [f"sweep: {said(proc)}", f"trials RUNNING: {running(folder)}, processes left: {left(folder)}"]
        (trials / "filler").unlink()
        again = run(folder, "spec.yaml")
        facts.append(f"space freed, the same command: exit {again.returncode}; check: exit "
                     f"{run(folder, 'check', 'spec.yaml').returncode}")
        row("a full disk under mlruns/.trials (4 MiB tmpfs, full before the first trial)", *facts)
    finally:
        subprocess.run(["umount", "-l", str(trials)], capture_output=True)


def empty_study(tmp: Path) -> None:
    folder = tmp / "empty-study"
    folder.mkdir()
    finished(folder, "emptied")
    (folder / "mlruns" / "optuna.db").write_bytes(b"")
    refused = run(folder, "spec.yaml")
    anew = run(folder, "spec.yaml", "--new-study")
    row("a 0-byte optuna.db, MLflow and the folders holding the study's runs", f"sweep: {said(refused)}",
        f"--new-study: exit {anew.returncode}, "
        + next((ln.strip() for ln in anew.stdout.splitlines() if "trials have a result" in ln), ""))


def grandchild(tmp: Path) -> None:
    for fork in ("1", "0"):
        folder = tmp / f"setsid-{fork}"
        folder.mkdir()
        spec(folder, "escapes", "fault: [daemon, daemon_hang]", timeout_s=5)
        proc = run(folder, "spec.yaml", env={"ORCHESTRATE_FORK": fork})
        statuses = [ln.split()[2] for ln in proc.stdout.splitlines() if ln.startswith("#")]
        row(f"a trial's setsid grandchild ({'fork server' if fork == '1' else 'an interpreter per trial'})",
            f"sweep: exit {proc.returncode}, trials {statuses}; processes left after it: {left(folder)}")


def pipe_and_hangup(tmp: Path) -> None:
    folder = tmp / "pipe"
    folder.mkdir()
    spec(folder, "piped", "fault: [none, hang]", timeout_s=60)
    proc = subprocess.run(["bash", "-c", f"{ORCHESTRATE} spec.yaml | head -1; echo ${{PIPESTATUS[0]}} > rc"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    code = int((folder / "rc").read_text())
    row("orchestrate spec.yaml | head -1", f"sweep: {said((code, proc.stderr))}",
        f"trials RUNNING: {running(folder)}, processes left: {left(folder)}")
    folder = tmp / "hangup"
    folder.mkdir()
    spec(folder, "hangup", "fault: [none, hang]", timeout_s=60)
    master, slave = os.openpty()
    p = subprocess.Popen([ORCHESTRATE, "spec.yaml"], cwd=folder, stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True)
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 120
    while b"#0 " not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(master, 4096)
        except OSError:
            break
    time.sleep(0.5)
    os.close(master)
    p.send_signal(signal.SIGHUP)
    row("the terminal closed (SIGHUP) during a trial", f"sweep: exit {p.wait(timeout=60)}",
        f"trials RUNNING: {running(folder)}, processes left: {left(folder)}")


def diskfull_name(tmp: Path) -> None:
    folder = tmp / "diskfull"
    folder.mkdir()
    spec(folder, "diskfull", "hidden_size: [8, 16]")
    first = run(folder, "spec.yaml", "--n-trials", "1")
    again = run(folder, "spec.yaml")
    row("a study named diskfull, run twice", f"first: exit {first.returncode}; resumed: {said(again)}, "
        + next((ln.strip() for ln in again.stdout.splitlines() if "trials have a result" in ln), ""))


def as_in_a_terminal() -> None:
    """The child gets Ctrl-C as a terminal's foreground command does (a command keeps a SIGINT its
    caller ignores ignored: this script run in the background would hand it one)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c(tmp: Path) -> None:
    folder = tmp / "ctrlc"
    folder.mkdir()
    finished(folder, "interrupted")
    facts = []
    for args, delay in ((["spec.yaml"], 0.3), (["check", "spec.yaml"], 0.3), (["check", "spec.yaml"], 1.5),
                        (["check", "spec.yaml", "--repair"], 2.5)):
        if "--repair" in args:  # three trials' records to write
            (folder / "mlruns" / "mlflow.db").unlink()
        p = subprocess.Popen([ORCHESTRATE, *args], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=as_in_a_terminal)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        facts.append(f"{' '.join(args)} at {delay} s: {said((p.returncode, err))}")
    facts.append(f"then check --repair: exit {run(folder, 'check', 'spec.yaml', '--repair').returncode}")
    row("Ctrl-C", *facts)


def smaller(tmp: Path) -> None:
    folder = tmp / "smaller"
    folder.mkdir()
    finished(folder, "smaller")
    (folder / "afile").write_text("")
    row("report --out under a file", f"report: {said(run(folder, 'report', 'spec.yaml', '--out', 'afile/plots'))}")
    trials = sorted((folder / "mlruns" / ".trials").glob("smaller-*/trial-*"))
    shutil.rmtree(trials[0])
    shutil.rmtree(trials[1])
    checked = run(folder, "check", "spec.yaml")
    row("two trial folders deleted by hand", f"check: exit {checked.returncode}: "
        + " / ".join(ln.strip()[:120] for ln in checked.stdout.splitlines() if "difference" in ln or "missing" in ln))
    from mlflow.tracking import MlflowClient

    folder = tmp / "deleted-runs"
    folder.mkdir()
    finished(folder, "smaller")
    shutil.move(folder / "mlruns" / "mlflow.db", folder / "mlflow.db.old")
    run(folder, "check", "spec.yaml", "--repair")
    client = MlflowClient(f"sqlite:///{folder}/mlruns/mlflow.db")
    exp = client.get_experiment_by_name("smaller")
    before = sorted(r.info.run_id for r in client.search_runs([exp.experiment_id], "tags.role = 'trial'"))
    for run_id in before[:2]:
        client.delete_run(run_id)
    repaired = run(folder, "check", "spec.yaml", "--repair")
    after = sorted(r.info.run_id for r in client.search_runs([exp.experiment_id], "tags.role = 'trial'"))
    row("two runs an earlier repair wrote, deleted by hand", f"check --repair: exit {repaired.returncode}; "
        f"the same {len(before)} runs afterwards: {after == before}")
    os.truncate(folder / "mlruns" / "optuna.db", 4096)
    row("--dry-run on a truncated study", f"dry run: {said(run(folder, 'spec.yaml', '--dry-run'))}")
    folder = tmp / "cleaner"
    folder.mkdir()
    path = spec(folder, "cleaner", "hidden_size: [8]", extra=", fault: delete_folder")
    row("a trial that deletes its own folder", f"sweep: {said(run(folder, str(path)))}")


def unreachable(tmp: Path) -> None:
    folder = tmp / "unreachable"
    folder.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec(folder, "unreachable", "hidden_size: [8]", search="{sampler: grid, outage_s: 20}")
    start = time.monotonic()
    p = subprocess.Popen([ORCHESTRATE, "spec.yaml", "--tracking-uri", f"http://127.0.0.1:{port}"], cwd=folder,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    first = p.stderr.readline()
    at = time.monotonic() - start
    rest = p.stderr.read()
    p.wait()
    row("a tracking server nobody listens on (outage_s: 20)",
        f"first line after {at:.1f} s (the probe's start-up included): {first.strip()[:160]}",
        f"then: {said((p.returncode, rest))}", f"study file created: {(folder / 'mlruns' / 'optuna.db').exists()}")


def quiet(tmp: Path) -> None:
    folder = tmp / "quiet"
    folder.mkdir()
    spec(folder, "quiet", "fault: [hang]", timeout_s=150)
    start = time.monotonic()
    p = subprocess.Popen([ORCHESTRATE, "spec.yaml"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=as_in_a_terminal)
    assert p.stderr is not None
    line = next((ln for ln in p.stderr if "without a result" in ln), "")
    at = time.monotonic() - start
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    row("a hung trial (timeout_s: 150)", f"a line after {at:.0f} s of the command: {line.strip()[:200]}")


ROWS = {"mlflow": corrupt_mlflow, "trials": full_trials_disk, "empty": empty_study, "setsid": grandchild,
        "pipe": pipe_and_hangup, "diskfull": diskfull_name, "ctrl": ctrl_c, "smaller": smaller,
        "unreachable": unreachable, "quiet": quiet}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", default=[], help="run only the rows whose name holds this word")
    args = p.parse_args(argv)
    print(f"fault_tour: {os.uname().nodename}, {os.cpu_count()} cores, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in ROWS.items():
            if not args.only or any(w in name for w in args.only):
                fn(Path(tmp))
    print(f"load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
