"""The sweep loop: one trial in flight per device slot, until the study has its results or the
search is done.

Per trial (so that a SIGKILL at any point can be repaired on the next start, ``recovery``):
  1. ask            -> Optuna trial RUNNING (``proposer``; heartbeat with a server database)
  2. MLflow run     -> child run RUNNING, tagged with the trial number (writer thread)
  3. the process    -> result file (``launch``: forked by the slot's fork server)
  4. tell Optuna    -> the result, with status and metrics as user attributes
  5. finish MLflow  -> metrics, tags, artifacts, terminal status (writer thread, idempotent)
A slot's next trial is proposed (1-2) as soon as its current one has a result, while that
process exits; it starts (3) once the process is gone, so trials never share a device. A trial's
life in between is a ``job.Job``; when to stop proposing is the ``stoppolicy.StopPolicy``'s call.
``Sweep.run`` returns a ``SweepResult``.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from orchestrator import exits
from orchestrator.spec import knobs
from orchestrator import metrics as M
from orchestrator.faultpoints import reached
from orchestrator.sweep.job import Job, State
from orchestrator.harness.compiled import cache_folder
from orchestrator.sweep.notices import QUIET_AGAIN_S, QUIET_S, Waiting, quiet_notice
from orchestrator.sweep.repeats import remeasured
from orchestrator.protocol import TrialConfig, TrialSteps
from orchestrator.launch import PRESTART, StopFlag
from orchestrator.outcome import BUDGET_DETAIL, DISCARDED_DETAIL, INTERRUPTED_DETAIL, RESULT_STATUSES, VERDICT_DETAIL, Outcome, Status
from orchestrator.search.verdict import Verdict
from orchestrator.search.proposer import Asked, Proposer
from orchestrator.search.strategy import Done, Wait
from orchestrator.store.record import TrialRecord, status_of, write
from orchestrator.store.records import failed_statuses, link_run, rank, result_trials, run_metrics, run_tags, tell, trial_trace_tags
from orchestrator.store.coordination import NoLock
from orchestrator.store.writefault import StoreUnwritable, diagnose, folder_unwritable
from orchestrator.search.space import Plan, trial_params
from orchestrator.spec.load import SweepSpec
from orchestrator.spec.script import script_call
from orchestrator.search.stoppolicy import Failures, StopPolicy
from orchestrator.sweep.seams import Runner, SweepOptions, TrialRun, TrialTracker
from orchestrator.timeline import event
from orchestrator import trialdir

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial
    from optuna.study import Study



@dataclass
class SweepResult:
    """How one ``Sweep.run`` ended."""

    code: int
    """The exit code (``exits``)."""
    status: str
    """The study's MLflow parent run's terminal status: FINISHED, KILLED or FAILED."""
    elapsed_s: float
    best: list[Any]
    """``records.rank`` of the study's results at the end."""
    failures: Failures
    stopped_because: str | None = None
    """Why it stopped before the budget was used up (the search's verdict, patience, ...)."""
    verdict: Verdict | None = None
    """The ``auto`` search's last verdict (what was left, and the chance it held a better one)."""
    message: str | None = None
    """One line for stderr when it did not finish (failure budget, Ctrl-C)."""


class Sweep:
    """One invocation of ``orchestrate SPEC``: run until the study is complete (``run.py`` repairs
    what a killed orchestrator left first: ``recovery.Recovery``)."""

    def __init__(self, spec: SweepSpec, plan: Plan, study: Study, tracker: TrialTracker, work_dir: Path,
                 stop: StopFlag, runner: Runner, options: SweepOptions = SweepOptions()) -> None:
        """``tracker``: ``tracking.AsyncTracker`` (or ``replay.NullTracker``); ``runner``:
        ``ProcessRunner`` (or ``replay.ReplayRunner``, which answers from a recorded table on a
        simulated clock); ``options``: ``seams.SweepOptions`` (most are the ``Proposer``'s)."""
        o = options
        self.spec, self.plan, self.study, self.tracker = spec, plan, study, tracker
        self.work_dir, self.stop, self.runner, self.recovery = work_dir, stop, runner, o.recovery
        self.proposer = Proposer(spec, plan, study, o.lock or NoLock(), self._answered,
                                 heartbeat=o.heartbeat or (lambda trial: None), neighbours=o.neighbours,
                                 memory_limit_gib=o.memory_limit_gib, superseded=o.superseded, owner=o.owner,
                                 native_half=o.native_half)
        self.target = self.proposer.target
        self.configs = self.proposer.configs
        self.best: list[Any] = []
        """``records.rank`` of the results as of the last one (kept here: nobody reads the study again)."""
        self.jobs: dict[int, Job] = {}
        self.discarded: list[int] = []
        """Trials another orchestrator declared dead (stale heartbeat) before they were told."""
        self.killed: list[int] = []  # trials the stop flag (Ctrl-C, SIGTERM...) killed, told as interrupted
        self._policy: StopPolicy | None = None
        self._on_result: Callable[[Any, Outcome, float], None] = lambda *a: None
        self._quiet: dict[int, tuple[float, float]] = {}
        """Trials running, by number: when (the runner's clock) their process started, and when
        their next quiet line is due."""
        self._longest_s = 0.0
        """The longest trial of this run so far (a quiet line comes after three times it)."""
        self.fault: StoreUnwritable | None = None
        """The trial folders could not be written (a full disk): the sweep stops, as for Ctrl-C,
        with exit 75 (``_stopped``)."""

    def trial_dir(self, number: int) -> Path:
        return trialdir.folder(self.work_dir, number)

    def running_trial_ids(self) -> list[int]:
        """Optuna trial ids in flight here (for the heartbeat thread)."""
        from orchestrator.store.optuna_internals import trial_id

        return [trial_id(job.trial) for job in list(self.jobs.values())]

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, on_result: Callable[[Any, Outcome, float], None],
            on_notice: Callable[[str], None] = lambda line: None) -> SweepResult:
        """``on_result(trial, outcome, now)`` after every trial (``now``: the runner's clock);
        ``on_notice(line)`` when the sweep waits, with nothing of its own running, for something
        a user would otherwise not see, and once when MLflow first refuses a write."""
        def told(trial: FrozenTrial, outcome: Outcome, now: float) -> None:  # the stop's line names the trials it killed
            if self.stop.tripped and outcome.status is Status.INTERRUPTED:
                self.killed.append(trial.number)
            on_result(trial, outcome, now)
        self._on_result = told
        event("loop_start")
        self.best = rank(result_trials(self.study), self.spec)
        clock = self.runner.now
        started = clock()
        self._policy = StopPolicy(self.spec.search, started, self._best_value(), self.work_dir)
        try:
            return self._loop(on_notice, started)
        except OSError as exc:  # writing a trial's files (its folder, its configuration, a log)
            if (fault := folder_unwritable(self.work_dir, exc)) is None:
                raise
            self.fault = fault
            return self._interrupted(clock() - started)

    def _loop(self, on_notice: Callable[[str], None], started: float) -> SweepResult:
        waiting = Waiting(self.spec.search.grace_period_s, self.study, self.proposer.owner)
        clock, policy = self.runner.now, self._policy
        assert policy is not None
        proposing, next_stale_check = True, started
        while True:
            if self.stop.tripped or self.fault is not None:
                return self._interrupted(clock() - started)
            if self.tracker.down is not None:  # the tracking store gave up (outage); the study is fine:
                self._interrupted(clock() - started)  # the trials in flight are recorded as interrupted
                raise self.tracker.down
            if (refused := self.tracker.notice()) is not None:  # it refused a write: once, and on
                on_notice(refused)
            proposing = proposing and policy.proposing(clock()) and self._fill_slots()
            if not proposing and self.jobs and (v := self.proposer.verdict) is not None and v.ends_running:
                self._stop_jobs(VERDICT_DETAIL)  # the search is done, and what runs cannot change that
            elif policy.budget_error is not None and self.jobs:  # not a hung trial's timeout_s more
                self._stop_jobs(BUDGET_DETAIL)
            self._advance_all()  # start what can start
            if not self.jobs:
                if not proposing or self.recovery is None:
                    break
                # nothing to run here: the rest is in flight in other orchestrators; if one dies,
                # its trials come back to the queue (fail_stale) and this one runs them
                waiting.say(clock(), self.proposer.strays, self.proposer.elsewhere, on_notice)
                self.runner.wait(min(1.0, self.spec.search.grace_period_s / 4))
                next_stale_check = self._check_stale(next_stale_check)
                continue
            self.runner.wait(0.05)
            waiting.since = None  # trials of its own: a wait after them is a new one
            next_stale_check = self._check_stale(next_stale_check)
            self._advance_all()  # take the results the wait brought
            self._say_quiet(on_notice)
        policy.done(self.proposer.exhausted)
        event("loop_end")
        return self._result(clock() - started)

    def _advance_all(self) -> None:
        for slot, job in list(self.jobs.items()):
            if job.advance(self.runner.idle(job.slot), self._start, self.stop.tripped) is State.FINISHED:
                del self.jobs[slot]
                outcome = self._finish(job)
                if outcome is not None:
                    self._recorded(job, outcome)

    def _recorded(self, job: Job, outcome: Outcome) -> None:
        assert self._policy is not None
        self._policy.record(outcome, self._best_value(), job.trial_dir / trialdir.LOG)
        self._on_result(job.trial, outcome, self.runner.now())

    def _result(self, elapsed: float) -> SweepResult:
        policy = self._policy
        assert policy is not None
        failures, verdict = policy.failures, self.proposer.verdict
        if policy.budget_error is not None:
            return SweepResult(exits.FAILED, "FAILED", elapsed, self.best, failures, policy.stopped_because,
                               verdict, f"orchestrate: {policy.budget_error}")
        if not self.best and (failures.count or failed_statuses(result_trials(self.study))):  # as a run again
            return SweepResult(exits.FAILED, "FAILED", elapsed, self.best, failures, policy.stopped_because, verdict)
        unfinished = len(result_trials(self.study)) < self.target and not policy.stopped_because
        return SweepResult(exits.OK, "KILLED" if unfinished else "FINISHED", elapsed, self.best, failures,
                           policy.stopped_because, verdict)

    def _fill_slots(self) -> bool:
        """Propose a trial for every slot without one. False once nothing more will be proposed."""
        for i in range(len(self.runner.slots)):
            while i not in self.jobs:
                proposal = self.proposer.next()
                if isinstance(proposal, Done):
                    return False
                if isinstance(proposal, Wait):
                    return True
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
    def _prepare(self, proposal: Asked, slot: int) -> None:
        """Steps 1-2 for a proposed configuration; a predicted OOM is recorded at once as skipped."""
        trial = proposal.trial
        params = trial_params(self.plan, proposal.sampled)
        device = params["device"]
        placement = self.runner.slots[slot].record()
        run_ref = self.tracker.start_trial(trial.number, params, {"device": device, **{
            k: str(v) for k, v in placement.items()}}, on_created=lambda run_id: link_run(trial, run_id))
        reached("after_run_start")
        if proposal.predicted_by is not None:
            self._record_skip(trial, run_ref, device, proposal.predicted_by, proposal.swapped)
            return
        steps = self.spec.trial
        config = TrialConfig(self.spec.workload, params,
                             TrialSteps(steps.warmup_steps, steps.measure_steps, steps.min_measure_s, steps.precision),
                             trial.number, dict(self.plan.not_applied), self.spec.search.allow_swap,
                             script=script_call(self.spec, params),
                             compile_cache=cache_folder(str(self.work_dir)))
        env = knobs.trial_env(params, device)
        self.jobs[slot] = Job(trial, proposal.sampled, params, config, env, self.trial_dir(trial.number),
                              slot, run_ref, self.spec.trial.processes)

    def _record_skip(self, trial: object, run_ref: object, device: str, predicted_by: int, swapped: bool) -> None:
        outcome = Outcome(Status.SKIPPED, f"predicted out of memory: needs at least as much memory as "
                          f"trial {predicted_by}, which {'swapped' if swapped else 'ran out of memory'}")
        extra: dict[str, Any] = {"reason": "predicted_oom", "predicted_by": predicted_by}
        run_id = self.tracker.run_id(run_ref)
        if run_id:
            extra["mlflow_run_id"] = run_id
        tell(self.study, trial, self.spec, outcome, extra)
        reached("after_tell")
        self.tracker.finish_trial(run_ref, Status.SKIPPED, {}, {"device": device, "reason": "predicted_oom",
                                  "predicted_by": str(predicted_by), "detail": outcome.detail}, [])
        self._on_result(trial, outcome, self.runner.now())

    def _say_quiet(self, on_notice: Callable[[str], None]) -> None:
        """A line for each trial that has run long without a result (``QUIET_S``)."""
        now = self.runner.now()
        for job in self.jobs.values():
            began, due = self._quiet.get(job.trial.number, (now, math.inf))
            if now >= due and job.handle is not None and not job.handle.has_result:
                on_notice(quiet_notice(job.trial.number, job.handle, now - began, self.spec.trial.timeout_s))
                self._quiet[job.trial.number] = (began, now + QUIET_AGAIN_S)

    def _start(self, job: Job, folder: Path) -> TrialRun:
        """Step 3: the job's next process, on its slot."""
        now = self.runner.now()
        self._quiet[job.trial.number] = (now, now + max(QUIET_S, 3 * self._longest_s))
        guesses = self.proposer.next_envs(
            PRESTART, lambda c: knobs.trial_env(trial_params(self.plan, c), job.params["device"]), job.env)
        return self.runner.start(job.slot, job.config, folder, job.env, self.spec.trial.timeout_s, guesses)

    def _finish(self, job: Job) -> Outcome | None:
        """Steps 4-5 for a finished job; None when another orchestrator declared it dead first."""
        from optuna.exceptions import UpdateFinishedTrialError

        trial = job.trial
        launched = job.combined([m for m, _ in self.spec.objective.metrics])
        outcome = launched.outcome
        self._quiet.pop(trial.number, None)
        self._longest_s = max(self._longest_s, launched.duration_s)
        if outcome.result is None and outcome.status in (Status.ERROR, Status.CRASHED) and \
                (why := diagnose(job.trial_dir)) is not None:  # it could not write its result: not its fault
            self.fault = StoreUnwritable(f"the trial folders {self.work_dir}", why,
                                         f"trial {trial.number} could not write its result in {job.trial_dir}")
            outcome = Outcome(Status.INTERRUPTED, f"its trial folder could not be written ({why}); it runs again "
                              "when the sweep resumes")
        elif outcome.result is None and not job.trial_dir.is_dir():  # the trial (or someone) deleted it
            outcome = dataclasses.replace(outcome, detail=f"{outcome.detail or 'no result'}; its trial folder "
                                          "was deleted while it ran")
        extra: dict[str, Any] = {M.DURATION_S: round(launched.duration_s, 3), "trial_dir": str(job.trial_dir),
                                 "process_peak_rss_gib": launched.peak_rss_gib,
                                 **self.runner.slots[job.slot].record()}
        again = TrialRecord.of(trial).remeasure_of
        if again is not None and outcome.status == Status.OK:  # combined with its earlier measurements
            outcome, measured = remeasured(outcome, self.study.get_trials(deepcopy=False)[again],
                                           [m for m, _ in self.spec.objective.metrics])
            extra["measurements"] = measured
        first = job.runs[0]
        if first.started_at is not None:
            extra["started_at"] = round(first.started_at, 3)
            extra["slot_free_at"] = None if first.slot_free_at is None else round(first.slot_free_at, 3)
        processes = outcome.processes
        if job.repeats > 1 or again is not None:
            extra["processes"] = processes
            if outcome.repeat_metrics:
                extra["repeat_metrics"] = list(outcome.repeat_metrics)
        if job.env:
            extra["env"] = job.env
        run_id = self.tracker.run_id(job.run_ref, wait=False)  # MLflow stays off the critical path
        if run_id:
            extra["mlflow_run_id"] = run_id
        try:
            status = tell(self.study, trial, self.spec, outcome, extra)
        except UpdateFinishedTrialError:
            self.discarded.append(trial.number)
            self.tracker.finish_trial(job.run_ref, Status.INTERRUPTED, {}, {"detail": DISCARDED_DETAIL},
                                      trialdir.files(job.trial_dir, len(job.runs)))  # as check expects them
            return None
        event("told", trial.number)
        reached("after_tell")
        if status == Status.ERROR:
            self.proposer.failed(job.sampled)
        tags = run_tags(outcome.result, status, outcome.detail, outcome.signal)
        tags.setdefault("device", job.params["device"])
        tags.update(trial_trace_tags(trial, extra))
        if self.plan.not_applied and "not_applied" not in tags:
            tags["not_applied"] = "; ".join(f"{k}: {v}" for k, v in self.plan.not_applied.items())
        self.tracker.finish_trial(job.run_ref, status, run_metrics(outcome.metrics, outcome.result, extra),
                                  tags, trialdir.files(job.trial_dir, len(job.runs)))  # this trial's own processes
        reached("after_finish")
        if status in RESULT_STATUSES:
            self.best = rank(result_trials(self.study), self.spec)
        return dataclasses.replace(outcome, status=status)

    def _answered(self, trial: FrozenTrial, outcome: Outcome, original: int | None) -> None:
        """A proposal answered without a process (``proposer``): its MLflow run, then the line."""
        key = "repeat_of" if outcome.status == Status.REPEAT else "deferred_to"
        tags = {key: str(original), "detail": outcome.detail or ""}
        ref = self.tracker.start_trial(trial.number, trial.params, tags)
        self.tracker.finish_trial(ref, status_of(trial) or outcome.status, {}, tags, [])
        self._on_result(trial, outcome, self.runner.now())

    def _interrupted(self, elapsed: float) -> SweepResult:
        """Ctrl-C / SIGTERM: a trial that ended by itself keeps its result; every other one in
        flight is killed and recorded as interrupted."""
        self._stop_jobs(INTERRUPTED_DETAIL)
        assert self._policy is not None
        if self.fault is not None:
            return SweepResult(exits.STORE_DOWN, "KILLED", elapsed, self.best, self._policy.failures, message=(
                f"orchestrate: {self.fault}; the sweep stopped: the trial(s) in flight were recorded as "
                "interrupted and run again when it resumes, and the study keeps every result told before: run "
                "the same command once the folder can be written."))
        from orchestrator.sweep.output import stopped_line

        signum = self.stop.signum or signal.SIGINT
        return SweepResult(exits.for_signal(signum), "KILLED", elapsed, self.best, self._policy.failures,
                           message=stopped_line(signum, self.killed))

    def _stop_jobs(self, detail: str) -> None:
        """Trials in flight: one that ended by itself keeps its result; the rest are killed and recorded interrupted."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        for slot, job in list(self.jobs.items()):
            if job.settle() is State.FINISHED:
                del self.jobs[slot]
                outcome = self._finish(job)
                if outcome is not None:
                    self._on_result(job.trial, outcome, self.runner.now())
        self.runner.close()
        event("trials_stopped")
        for job in self.jobs.values():
            trial = job.trial
            try:  # one that had its process says where it ran (its MLflow run has the placement)
                write(trial, status=Status.INTERRUPTED, detail=detail,
                      **(self.runner.slots[job.slot].record() if job.started else {}))
                self.study.tell(trial, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                continue
            self.tracker.finish_trial(job.run_ref, Status.INTERRUPTED, {}, {"detail": detail},
                                      trialdir.files(job.trial_dir) if job.started else [])
            self._on_result(trial, Outcome(Status.INTERRUPTED, detail), self.runner.now())
        self.jobs.clear()
