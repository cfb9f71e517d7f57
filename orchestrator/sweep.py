"""The sweep loop: one trial in flight per device slot, until the study has its results.

Per trial (so that a SIGKILL at any point can be repaired on the next start, ``recovery``):
  1. ask            -> Optuna trial RUNNING (``proposer``; heartbeat with a server database)
  2. MLflow run     -> child run RUNNING, tagged with the trial number (writer thread)
  3. the process    -> result file (``launch``: a pre-started interpreter of the slot)
  4. tell Optuna    -> the result, with status and metrics as user attributes
  5. finish MLflow  -> metrics, tags, artifacts, terminal status (writer thread, idempotent)
A slot's next trial is proposed (1-2) as soon as its current one has a result, while that
process exits; it starts (3) once the process is gone, so trials never share a device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator import knobs
from orchestrator import metrics as M
from orchestrator.errors import FailureBudgetExceeded
from orchestrator.faultpoints import reached
from orchestrator.launch import PRESTART, Launched, StopFlag
from orchestrator.outcome import Outcome
from orchestrator.proposer import DONE, WAIT, Proposal, Proposer
from orchestrator.records import (  # noqa: F401 - re-exported: report, plots and tests read them here
    FIT_CONSTRAINT, best_trials, is_feasible, rank, result_trials, results_of, run_metrics, run_tags,
    tell, trace_tags)
from orchestrator.outcome import RESULT_STATUSES  # noqa: F401 - re-exported
from orchestrator.recovery import trial_files
from orchestrator.repeats import combine, repeat_path
from orchestrator.space import Plan, config_key, trial_params
from orchestrator.spec import SweepSpec
from orchestrator.timeline import event

COUNTED_FAILURES = ("error", "timeout", "diverged")  # and crashes other than SIGKILL; OOM never


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Job:
    """One configuration being measured on a slot (``trial.repeats`` processes, one after another)."""

    trial: Any
    sampled: dict[str, Any]
    params: dict[str, Any]
    config: dict[str, Any]
    env: dict[str, str]
    trial_dir: Path
    slot: int
    run_ref: Any
    runs: list[Launched] = field(default_factory=list)
    handle: Any = None
    current: Launched | None = None
    """The current process's outcome once it has a result (its exit may be pending)."""


class Sweep:
    """One invocation of ``orchestrate SPEC``: run until the study is complete (recovery first:
    ``recovery.Recovery``, called by the CLI)."""

    def __init__(self, spec: SweepSpec, plan: Plan, study: Any, tracker: Any, work_dir: Path,
                 stop: StopFlag, runner: Any, neighbours: bool = True, lock: Any = None,
                 recovery: Any = None) -> None:
        """``tracker``: ``tracking.AsyncTracker`` (or ``replay.NullTracker``); ``runner``:
        ``ProcessRunner`` (or ``replay.ReplayRunner``, which answers from a recorded table on a
        simulated clock); ``lock``: ``coordination.StudyLock``; ``recovery``: a
        ``recovery.Recovery`` that fails other orchestrators' stale trials (server databases)."""
        import contextlib

        self.spec, self.plan, self.study, self.tracker = spec, plan, study, tracker
        self.work_dir, self.stop, self.runner, self.recovery = work_dir, stop, runner, recovery
        self.proposer = Proposer(spec, plan, study, lock or contextlib.nullcontext(), self._answered,
                                 neighbours=neighbours)
        self.target = self.proposer.target
        self.configs = self.proposer.configs
        self.best: list[Any] = []
        """``best_trials`` as of the last result; kept by ``run`` so nobody reads the study again."""
        self.failures = 0
        self.failed_statuses: dict[str, int] = {}
        self.failure_examples: dict[str, tuple[str, str]] = {}
        """Status -> (the first such failure's detail, its log), for the closing line."""
        self.exit_status, self.elapsed = "FINISHED", 0.0
        self.stopped_because: str | None = None
        self.jobs: dict[int, Job] = {}
        self.discarded: list[int] = []
        """Trials another orchestrator declared dead (stale heartbeat) before they were told."""
        self._on_result: Callable[[Any, Outcome, float], None] = lambda *a: None

    def trial_dir(self, number: int) -> Path:
        return self.work_dir / f"trial-{number:04d}"

    def running_trial_ids(self) -> list[int]:
        """Optuna trial ids in flight here (for the heartbeat thread)."""
        return [job.trial._trial_id for job in list(self.jobs.values())]

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, on_result: Callable[[Any, Outcome, float], None]) -> None:
        """``on_result(trial, outcome, now)`` after every trial (``now``: the runner's clock)."""
        self._on_result = on_result
        event("loop_start")
        self.best = rank(result_trials(self.study), self.spec)
        clock = self.runner.now
        started = clock()
        since_best, best = 0, self._best_value()
        proposing, budget_error = True, None
        next_stale_check = started
        while True:
            if self.stop.tripped:
                self._interrupt()
                raise Interrupted(self.stop.signum or 2)
            if proposing and self.stopped_because is None:
                timeout_min, patience = self.spec.search.timeout_min, self.spec.search.patience
                if timeout_min is not None and clock() - started > timeout_min * 60:
                    self.stopped_because = f"search.timeout_min={timeout_min:g} reached"
                elif patience is not None and since_best >= patience:
                    self.stopped_because = f"no improvement in {since_best} trials (search.patience)"
                proposing = self.stopped_because is None
            if proposing:
                proposing = self._fill_slots()
            for job in self.jobs.values():
                if job.handle is None and self.runner.idle(job.slot):
                    self._start(job)
            if not self.jobs:
                if not proposing or self.recovery is None:
                    break
                # nothing to run here: the rest is in flight in other orchestrators; if one dies,
                # its trials come back to the queue (fail_stale) and this one runs them
                self.runner.wait(min(1.0, self.spec.search.grace_period_s / 4))
                next_stale_check = self._check_stale(next_stale_check)
                continue
            self.runner.wait(0.05)
            if self.recovery is not None:
                next_stale_check = self._check_stale(next_stale_check)
            for i, job in list(self.jobs.items()):
                if job.handle is None or not self._advance(job):
                    continue
                del self.jobs[i]
                outcome = self._finish(job)
                if outcome is None:
                    continue
                best_after = self._best_value()
                since_best = 0 if best_after is not None and best_after != best else since_best + 1
                best = best_after
                on_result(job.trial, outcome, clock())
                if outcome.status in COUNTED_FAILURES or (
                        outcome.status == "crashed" and outcome.result.get("signal") != "SIGKILL"):
                    self.failures += 1
                    self.failed_statuses[outcome.status] = self.failed_statuses.get(outcome.status, 0) + 1
                    self.failure_examples.setdefault(outcome.status, (
                        (outcome.detail or "")[:200], str(job.trial_dir / "trial.log")))
                    if self.failures > self.spec.search.max_failures and budget_error is None:
                        budget_error = FailureBudgetExceeded(
                            f"{self.failures} trials failed (error, timeout, crash or divergence; OOM not "
                            f"counted), more than search.max_failures={self.spec.search.max_failures}. "
                            f"The study is saved: fix the cause (see the trial logs in {self.work_dir}) and "
                            f"run the same command to resume")
                        proposing = False  # the trials in flight finish; none start
        if budget_error is not None:
            raise budget_error
        if self.proposer.exhausted and self.stopped_because is None:
            self.stopped_because = self.proposer.exhausted

    def _fill_slots(self) -> bool:
        """Propose a trial for every slot without one. False once nothing more will be proposed."""
        for i in range(len(self.runner.slots)):
            while i not in self.jobs:
                proposal = self.proposer.next()
                if proposal == DONE:
                    return False
                if proposal == WAIT:
                    return True
                assert isinstance(proposal, Proposal)
                self._prepare(proposal, i)
        return True

    def _check_stale(self, due: float) -> float:
        """Every grace_period_s / 2: fail other orchestrators' dead trials (their configurations
        are queued again and picked up by the proposer)."""
        now = self.runner.now()
        if self.recovery is None or now < due:
            return due
        with self.proposer.lock:
            if self.recovery.fail_stale():
                self.recovery.retry_queue()
        return now + self.spec.search.grace_period_s / 2

    def _best_value(self) -> float | None:
        return self.best[0].values[0] if self.best and len(self.spec.objective.metrics) == 1 else None

    # -- one trial ----------------------------------------------------------------------------------
    def _prepare(self, proposal: Proposal, slot: int) -> None:
        """Steps 1-2 for a proposed configuration; a predicted OOM is recorded at once as skipped."""
        trial = proposal.trial
        params = trial_params(self.plan, proposal.sampled)
        device = params["device"]
        placement = self.runner.slots[slot].record()
        run_ref = self.tracker.start_trial(trial.number, params, {"device": device, **{
            k: str(v) for k, v in placement.items()}})
        reached("after_run_start")
        if proposal.predicted_by is not None:
            self._record_skip(trial, run_ref, device, proposal.predicted_by)
            return
        config = {
            "experiment": self.spec.experiment,
            "trial_number": trial.number,
            "params": params,
            "not_applied": dict(self.plan.not_applied),
            "allow_swap": self.spec.search.allow_swap,
            "trial": {"warmup_steps": self.spec.trial.warmup_steps,
                      "measure_steps": self.spec.trial.measure_steps,
                      "min_measure_s": self.spec.trial.min_measure_s},
        }
        env = knobs.trial_env(params, device)
        self.jobs[slot] = Job(trial, proposal.sampled, params, config, env, self.trial_dir(trial.number),
                              slot, run_ref)

    def _record_skip(self, trial: Any, run_ref: Any, device: str, predicted_by: int) -> None:
        outcome = Outcome("skipped", f"predicted out of memory: needs at least as much memory as "
                          f"trial {predicted_by}, which ran out of memory (or swapped)", {})
        extra: dict[str, Any] = {"reason": "predicted_oom", "predicted_by": predicted_by}
        run_id = self.tracker.run_id(run_ref)
        if run_id:
            extra["mlflow_run_id"] = run_id
        tell(self.study, trial, self.spec, outcome, extra)
        reached("after_tell")
        self.tracker.finish_trial(run_ref, "skipped", {}, {"device": device, "reason": "predicted_oom",
                                  "predicted_by": str(predicted_by), "detail": outcome.detail}, [])
        self._on_result(trial, outcome, self.runner.now())

    def _start(self, job: Job) -> None:
        k = len(job.runs) + 1
        guesses = self.proposer.next_envs(
            PRESTART, lambda c: knobs.trial_env(trial_params(self.plan, c), job.params["device"]), job.env)
        job.handle = self.runner.start(job.slot, job.config, repeat_path(job.trial_dir, k), job.env,
                                       self.spec.trial.timeout_s, guesses)
        job.current = None

    def _advance(self, job: Job) -> bool:
        """Move ``job`` on; True once it has its final outcome (repeats: ``orchestrator.repeats``)."""
        h = job.handle
        if job.current is None:
            if not h.has_result:
                return False
            job.current = h.launched()
        more = job.current.outcome.status == "ok" and len(job.runs) + 1 < self.spec.trial.repeats
        if not more:
            job.runs.append(job.current)
            return True
        if not h.exited or not self.runner.idle(job.slot):
            return False  # the next repeat starts once this process has gone
        job.runs.append(job.current)
        if self.stop.tripped:  # stopped between repeats: start no process to kill it
            job.runs.append(Launched(Outcome("interrupted", "the orchestrator was stopped during this trial"),
                                     None, 0.0, None, job.trial_dir / "trial.log"))
            return True
        self._start(job)
        return False

    def _finish(self, job: Job) -> Outcome | None:
        """Steps 4-5 for a finished job; None when another orchestrator declared it dead first."""
        from optuna.exceptions import UpdateFinishedTrialError

        trial = job.trial
        launched = combine(job.runs, self.spec.trial.repeats, [m for m, _ in self.spec.objective.metrics])
        outcome = launched.outcome
        extra: dict[str, Any] = {M.DURATION_S: round(launched.duration_s, 3), "trial_dir": str(job.trial_dir),
                                 "process_peak_rss_gib": launched.peak_rss_gib,
                                 **self.runner.slots[job.slot].record()}
        first = job.runs[0]
        if first.started_at is not None:
            extra["started_at"] = round(first.started_at, 3)
            extra["slot_free_at"] = None if first.slot_free_at is None else round(first.slot_free_at, 3)
        processes = int(outcome.result.get("repeats_done", 1))
        if self.spec.trial.repeats > 1:
            extra["processes"] = processes
            if "repeat_metrics" in outcome.result:
                extra["repeat_metrics"] = outcome.result["repeat_metrics"]
        if job.env:
            extra["env"] = job.env
        run_id = self.tracker.run_id(job.run_ref)
        if run_id:
            extra["mlflow_run_id"] = run_id
        try:
            status = tell(self.study, trial, self.spec, outcome, extra)
        except UpdateFinishedTrialError:
            self.discarded.append(trial.number)
            self.tracker.finish_trial(job.run_ref, "interrupted", {}, {
                "detail": "another orchestrator declared this trial dead (no heartbeat within "
                          "search.grace_period_s); its result was discarded and the trial runs again"}, [])
            return None
        event("told", trial.number)
        reached("after_tell")
        if status == "error":
            self.proposer.failed_here.add(config_key(job.sampled))
        tags = run_tags(outcome.result, status, outcome.detail)
        tags.setdefault("device", job.params["device"])
        tags.update(trace_tags({**trial.user_attrs, **extra}))
        if self.plan.not_applied and "not_applied" not in tags:
            tags["not_applied"] = "; ".join(f"{k}: {v}" for k, v in self.plan.not_applied.items())
        self.tracker.finish_trial(job.run_ref, status, run_metrics(outcome.metrics, outcome.result, extra),
                                  tags, trial_files(job.trial_dir, processes))
        reached("after_finish")
        if status in RESULT_STATUSES:
            self.best = rank(result_trials(self.study), self.spec)
        outcome.status = status
        return outcome

    def _answered(self, trial: Any, outcome: Outcome, original: int | None) -> None:
        """A proposal answered without a process (``proposer``): its MLflow run, then the line."""
        key = "repeat_of" if outcome.status == "repeat" else "deferred_to"
        tags = {key: str(original), "detail": outcome.detail or ""}
        ref = self.tracker.start_trial(trial.number, trial.params, tags)
        self.tracker.finish_trial(ref, trial.user_attrs.get("status") or outcome.status, {}, tags, [])
        self._on_result(trial, outcome, self.runner.now())

    def _interrupt(self) -> None:
        """Ctrl-C / SIGTERM: every trial in flight is killed and recorded as interrupted."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        for i, job in list(self.jobs.items()):  # a trial that ended by itself keeps its result
            if job.handle is not None:
                job.handle.poll()
            if job.handle is not None and job.current is None and job.handle.has_result:
                job.current = job.handle.launched()
            if job.current is not None and job.current.outcome.status != "interrupted" and (
                    job.current.outcome.status != "ok" or len(job.runs) + 1 >= self.spec.trial.repeats):
                job.runs.append(job.current)
                del self.jobs[i]
                outcome = self._finish(job)
                if outcome is not None:
                    self._on_result(job.trial, outcome, self.runner.now())
        self.runner.close()
        for job in self.jobs.values():
            trial = job.trial
            try:
                trial.set_user_attr("status", "interrupted")
                trial.set_user_attr("detail", "the orchestrator was stopped during this trial")
                self.study.tell(trial, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                continue
            self.tracker.finish_trial(job.run_ref, "interrupted", {}, {
                "detail": "the orchestrator was stopped during this trial"},
                trial_files(job.trial_dir) if job.handle is not None else [])
            self._on_result(trial, Outcome("interrupted", "the orchestrator was stopped during this trial"),
                            self.runner.now())
        self.jobs.clear()
