"""Several orchestrators on one study (Optuna's distributed mode): a real PostgreSQL server for the
study, MLflow on PostgreSQL (directly, and through a real ``mlflow server``), real orchestrator
processes, each in its own folder as if on its own host (nothing assumes a shared filesystem).

The invariants are read back through Optuna's and MLflow's own APIs (``conftest.check_records``):
every configuration measured once, exactly ``n_trials`` results, one MLflow run per trial,
nothing left RUNNING, no trial process outliving its orchestrator.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import check_records, orchestrate, orchestrate_popen, trial_processes, write_spec

pytestmark = pytest.mark.slow

HIDDEN = [8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52]  # 12 configurations


def shared_spec(directory: Path, storage: str, tracking: str, sampler: str = "grid",
                n_trials: int | None = None, min_measure_s: float = 0.05) -> Path:
    budget = f"\n          n_trials: {n_trials}\n          seed: 3" if n_trials else ""
    return write_spec(directory, f"""
        name: shared
        experiment: experiments.faults
        device: cpu
        storage: {storage}
        tracking_uri: {tracking}
        fixed:
          batch_size: 8
        space:
          hidden_size: {HIDDEN}
        search:
          sampler: {sampler}
          grace_period_s: 4{budget}
        trial:
          warmup_steps: 1
          measure_steps: 2
          min_measure_s: {min_measure_s}
          timeout_s: 60
        """)


def start(folder: Path, spec_text: str) -> subprocess.Popen[str]:
    """An orchestrator in its own folder (its own trial files and logs, as on another host)."""
    folder.mkdir()
    spec = folder / "spec.yaml"
    spec.write_text(spec_text)
    return orchestrate_popen([str(spec), "--no-check"], folder, {"PYTHONUNBUFFERED": "1"}, merge_stderr=True)


def finish(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[str]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        outs.append(out)
    return outs


def measured(records: dict) -> dict[int, list[int]]:
    """hidden_size -> numbers of the trials that measured it (started a process)."""
    out: dict[int, list[int]] = {}
    for t in records["study"].get_trials():
        if t.params and "repeat_of" not in t.user_attrs and t.user_attrs.get("status") not in ("deferred", None):
            out.setdefault(t.params["hidden_size"], []).append(t.number)
    return out


def test_three_orchestrators_share_one_grid_study(tmp_path: Path, postgres) -> None:  # noqa: ANN001
    storage, tracking = postgres.new_database("study"), postgres.new_database("mlflow")
    text = shared_spec(tmp_path, storage, tracking).read_text()
    procs = [start(tmp_path / f"host{i}", text) for i in range(3)]
    outs = finish(procs)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        assert "Traceback" not in out, out
    records = check_records(tmp_path, "shared", n_results=12, storage=storage, tracking=tracking)
    assert sorted(t.params["hidden_size"] for t in records["results"]) == HIDDEN
    assert all(len(n) == 1 for n in measured(records).values()), measured(records)
    owners = {t.user_attrs["orchestrator"] for t in records["results"]}
    assert len(owners) >= 2, f"one orchestrator did all the work: {owners}"
    assert all(t.user_attrs["status"] == "ok" for t in records["results"])


@pytest.mark.parametrize("end", ["killed", pytest.param("frozen", marks=pytest.mark.long)])  # frozen: 30-190 s
def test_a_killed_orchestrators_trial_is_run_again_by_the_others(tmp_path: Path, postgres, end: str) -> None:  # noqa: ANN001
    """``frozen``: the PostgreSQL tour's orchestrator stopped (SIGSTOP) past the grace period, then
    let go on: the others ran its trial again, and it threw its own result away without a word,
    its MLflow run without the trial's files (``check`` then found a difference). It says so now,
    and the run keeps the files. Stopped inside a proposal, it held the study's lock, and the
    others waited for it for good: the lock's session now ends after max(30 s, 2 grace periods)
    idle (PostgreSQL's idle_session_timeout)."""
    storage, tracking = postgres.new_database("study"), postgres.new_database("mlflow")
    text = shared_spec(tmp_path, storage, tracking, min_measure_s=0.6).read_text()
    procs = [start(tmp_path / f"host{i}", text) for i in range(3)]
    victim, folder = procs[0], tmp_path / "host0"
    import optuna
    from optuna.trial import TrialState

    owner = f"{os.uname().nodename}:{victim.pid}"
    deadline, cut = time.monotonic() + 120, None
    db = optuna.storages.RDBStorage(storage)
    while time.monotonic() < deadline and cut is None:
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name="shared", storage=db)
        except KeyError:  # not created yet
            continue
        # a trial of the victim's that has its configuration and its folder (its process is being
        # started): not merely asked (the owner is recorded before the configuration), and not
        # judged by a harness process, which the slot's fork server is from start-up on
        running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                   if t.user_attrs.get("orchestrator") == owner and "hidden_size" in t.params
                   and list(folder.glob(f"mlruns/.trials/*/trial-{t.number:04d}"))]
        if running:  # stopped, the victim can record no result: the trial is cut only if still running
            victim.send_signal(signal.SIGSTOP)  # (under a loaded CI its result once came between the
            if db.get_trial(running[0]._trial_id).state == TrialState.RUNNING:  # read and the kill)
                cut = running[0]
            else:
                victim.send_signal(signal.SIGCONT)
    assert cut is not None, "the first orchestrator never had a trial in flight"
    if end == "frozen":
        while db.get_trial(cut._trial_id).state == TrialState.RUNNING and time.monotonic() < deadline + 60:
            time.sleep(0.2)  # the others fail it once its heartbeat is a grace period old
        victim.send_signal(signal.SIGCONT)
        out = finish([victim])[0]
        assert victim.returncode == 0 and f"trial(s) #{cut.number} ran here past search.grace_period_s=4 s" in out, out
        assert "the results measured here were discarded" in out, out
    else:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    outs = finish(procs[1:])
    for p, out in zip(procs[1:], outs):
        assert p.returncode == 0, out
    time.sleep(1.0)  # PR_SET_PDEATHSIG / the parent watch: the victim's trial processes are gone
    assert trial_processes(str(folder), "orchestrator.harness") == []
    records = check_records(tmp_path, "shared", n_results=12, storage=storage, tracking=tracking)
    assert sorted(t.params["hidden_size"] for t in records["results"]) == HIDDEN
    cut_after = records["study"].trials[cut.number]
    assert cut_after.state == TrialState.FAIL and cut_after.user_attrs["status"] == "interrupted"
    again = next(t for t in records["results"] if t.params == cut.params)
    assert again.number > cut.number and (end == "frozen" or again.user_attrs["orchestrator"] != owner)
    assert "heartbeats" in cut_after.user_attrs["detail"]
    if end == "frozen":  # its folder's files went up with its run, as check expects of every ended trial
        agree = orchestrate(["check", str(folder / "spec.yaml")], folder)
        assert agree.returncode == 0, agree.stdout + agree.stderr


def test_tpe_from_three_orchestrators_never_measures_twice(tmp_path: Path, postgres, mlflow_server) -> None:  # noqa: ANN001
    storage = postgres.new_database("study")
    text = shared_spec(tmp_path, storage, str(mlflow_server), sampler="tpe", n_trials=12).read_text()
    text = text.replace("name: shared", f"name: shared-tpe-{tmp_path.name}")
    procs = [start(tmp_path / f"host{i}", text) for i in range(3)]
    outs = finish(procs)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    records = check_records(tmp_path, f"shared-tpe-{tmp_path.name}", n_results=12, storage=storage,
                            tracking=str(mlflow_server))
    assert all(len(n) == 1 for n in measured(records).values()), measured(records)
    # trial files went up as artifacts through the server (no shared filesystem)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(str(mlflow_server))
    run = records["runs"][records["results"][0].number][0]
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"trial.log", "result.json"} <= names, names
    # `orchestrate check` on a PostgreSQL study and a tracking server: a run deleted on the server
    # is one difference, and --repair writes it again from the study, then finds them agreeing
    client.delete_run(run.info.run_id)
    # `check` leaves out trials told within the spec's grace period (4 s: their writer may still be
    # writing their runs); the three sweeps, forked without their imports, can end within it
    import datetime

    told = max(t.datetime_complete for t in records["results"])
    time.sleep(max(0.0, 4.5 - (datetime.datetime.now() - told).total_seconds()))
    host = tmp_path / "host0"
    found = orchestrate(["check", str(host / "spec.yaml")], host)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"trial {records['results'][0].number}: no MLflow run (the trial ended ok)" in found.stdout
    assert "1 difference(s). Repair: orchestrate check" in found.stdout and "--repair" in found.stdout
    places = sorted({str(Path(t.user_attrs["trial_dir"]).parent) for t in records["results"]})  # each host's folder
    assert f"Folders: 12 trial folder(s) in {places[0] if len(places) == 1 else f'{len(places)} places: '}" \
        in found.stdout, found.stdout  # the PostgreSQL tour: it named the first place alone, and counted its own
    repaired = orchestrate(["check", str(host / "spec.yaml"), "--repair"], host)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "1 trial(s)' MLflow records written from the study" in repaired.stdout and "agree" in repaired.stdout
    check_records(tmp_path, f"shared-tpe-{tmp_path.name}", n_results=12, storage=storage, tracking=str(mlflow_server))


def test_a_trial_left_without_parameters_does_not_outlive_the_sweep(tmp_path: Path, postgres_url: str) -> None:
    """A RUNNING trial with no parameters and no heartbeat: what an orchestrator leaves that died,
    or lost the database, between asking for a trial and writing its parameters. A later sweep
    that has every result does not end with it RUNNING: it waits for the stale-trial check to
    fail it (``proposer.View.strays``)."""
    import optuna

    text = shared_spec(tmp_path, postgres_url, f"sqlite:///{tmp_path}/mlflow.db").read_text()
    text = text.replace(f"hidden_size: {HIDDEN}", "hidden_size: [8, 12]")
    write_spec(tmp_path, text)
    first = orchestrate(["spec.yaml", "--no-check"], tmp_path, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    stray = optuna.load_study(study_name="shared", storage=postgres_url).ask()  # no parameters, no heartbeat
    again = orchestrate(["spec.yaml", "--no-check"], tmp_path, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna.load_study(study_name="shared", storage=postgres_url).get_trials()
    left = trials[stray.number]
    assert left.state == optuna.trial.TrialState.FAIL and left.user_attrs["status"] == "interrupted", left
    assert [t.number for t in trials if not t.state.is_finished()] == []
    assert sorted(t.params["hidden_size"] for t in trials if t.user_attrs.get("status") == "ok") == [8, 12]
    # the wait is said once, not silent: which trial, and what ends it
    assert again.stderr.count(f"orchestrate: waiting for trial {stray.number}, left RUNNING") == 1, again.stderr
    assert "search.grace_period_s=4 s old" in again.stderr


def test_a_sweep_waiting_for_another_orchestrators_trial_says_so(tmp_path: Path, postgres) -> None:  # noqa: ANN001
    """The PostgreSQL tour: a sweep with nothing of its own left to run waited for another
    orchestrator's trial in silence (25 s there; a grace period and more where that orchestrator
    died). After ``ELSEWHERE_S`` (here ``ORCHESTRATE_QUIET_S``, 2 s) it says which trials, whose,
    and what ends the wait; once, and the sweep ends as before when the trial is told."""
    storage, tracking = postgres.new_database("study"), postgres.new_database("mlflow")
    text = shared_spec(tmp_path, storage, tracking).read_text()
    text = text.replace(f"hidden_size: {HIDDEN}", "hidden_size: [8, 12]").replace("grace_period_s: 4", "grace_period_s: 60")
    procs = []
    for name, env in (("a", {"ORCHESTRATE_STOP_AT": "trial_running:1"}), ("b", {"ORCHESTRATE_QUIET_S": "2"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "spec.yaml").write_text(text)
        procs.append(orchestrate_popen(["spec.yaml", "--no-check"], tmp_path / name,
                                       {"PYTHONUNBUFFERED": "1", **env}, merge_stderr=True))
        deadline = time.monotonic() + 120  # a: stopped with its first trial running (its heartbeat stops too)
        while name == "a" and time.monotonic() < deadline and procs[0].poll() is None:
            if Path(f"/proc/{procs[0].pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                break
            time.sleep(0.1)
    a, b = procs
    said: list[str] = []
    try:
        assert a.poll() is None, a.communicate()[0]
        while not any("nothing left to run here" in line for line in said):
            line = b.stdout.readline()
            assert line, "".join(said)  # b ended (or closed its output) without the line
            said.append(line)
    finally:
        a.send_signal(signal.SIGCONT)  # its trial's result is told: b's wait ends, both end as usual
    outs = finish([a, b])
    assert (a.returncode, b.returncode) == (0, 0), outs
    lines = [line for line in said + outs[1].splitlines(keepends=True) if "nothing left to run here" in line]
    assert len(lines) == 1 and re.fullmatch(
        rf"orchestrate: nothing left to run here; waiting \d+ s so far for trial\(s\) #\d+ \({re.escape(os.uname().nodename)}:"
        rf"{a.pid}\) of other orchestrators; one whose orchestrator died is run here once its heartbeat is "
        r"search.grace_period_s=60 s old\n", lines[0]), lines
    records = check_records(tmp_path, "shared", n_results=2, storage=storage, tracking=tracking)
    assert sorted(t.params["hidden_size"] for t in records["results"]) == [8, 12]


def test_orchestrators_closing_their_shared_parent_run_at_once_all_succeed(
        tmp_path: Path, postgres, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Every orchestrator on a study writes the sweep's note on the one parent run as it ends; two
    ending together once failed with PostgreSQL's duplicate key on the note's tag (3 orchestrators
    in test_cluster). Real MLflow on a real server database, the writes released at one instant."""
    import threading

    from orchestrator.store.tracking import Tracker

    monkeypatch.chdir(tmp_path)
    tracking = postgres.new_database("parent-close")
    trackers = [Tracker(tracking, "shared") for _ in range(6)]
    spec = write_spec(tmp_path, "name: shared\n")
    parents = {t.open_parent("shared", "sqlite:///x.db", spec, "uid") for t in trackers}
    assert len(parents) == 1  # the others find the first one's run
    errors: list[BaseException] = []
    for round_ in range(3):
        start = threading.Barrier(len(trackers))

        def close(tracker: Tracker, n: int) -> None:
            start.wait()
            try:
                tracker.close_parent("FINISHED", f"round {round_} from {n}", {"trials_done": 12 + n})
            except BaseException as exc:  # noqa: BLE001 - collected, asserted below
                errors.append(exc)
        threads = [threading.Thread(target=close, args=(t, n)) for n, t in enumerate(trackers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), f"a close_parent still blocked in round {round_}"
        if round_ < 2:  # resumed: the next round's note finds this one's
            trackers[0].client.update_run(trackers[0].parent_id, status="RUNNING")
    assert not errors, errors[0]
    run = trackers[0].client.get_run(parents.pop())
    assert run.data.tags["mlflow.note.content"].startswith("round 2 from ")
    assert run.info.status == "FINISHED" and 12 <= run.data.metrics["trials_done"] <= 17
