"""The sweep loop: ask Optuna, run the trial in a subprocess, tell Optuna, record in MLflow.

Order per trial (so that a SIGKILL at any point can be repaired on the next start):
  1. ask            -> Optuna trial RUNNING
  2. MLflow run     -> child run RUNNING, tagged with the trial number
  3. the subprocess -> result file
  4. tell Optuna    -> the result, with status and metrics as user attributes
  5. finish MLflow  -> metrics, tags, artifacts, terminal status (idempotent)
``recover`` redoes step 5 for told trials and ends RUNNING trials as interrupted.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator import knobs
from orchestrator.dominance import predicted_oom
from orchestrator.faultpoints import reached
from orchestrator.timeline import event
from orchestrator import metrics as M
from orchestrator.errors import FailureBudgetExceeded
from orchestrator.launch import Launched, StopFlag, launch_trial
from orchestrator.repeats import combine, repeat_dir_name, repeat_path
from orchestrator.outcome import Outcome
from orchestrator.space import Plan, config_key, configurations, nearest, suggest, trial_params
from orchestrator.spec import SweepSpec
from orchestrator.tracking import TERMINAL, Tracker

RESULT_STATUSES = ("ok", "oom", "skipped", "timeout", "crashed", "error", "diverged")
INFEASIBLE = ("oom", "skipped", "crashed")  # told as PRUNED + a violated constraint: no invented value
FAILED = ("error", "timeout", "diverged", "interrupted")  # told as FAIL
FIT_CONSTRAINT = "fits_in_memory"
MAX_REPEATED_PROPOSALS = 10  # measured configurations proposed in a row before one is forced
MODEL_BASED = ("tpe", "nsga2")  # samplers whose re-proposal of a measured point means "exploit it"


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class SweepState:
    """What the study holds, by configuration."""

    results: dict[str, Any] = field(default_factory=dict)  # config key -> FrozenTrial with a result

    @property
    def ooms(self) -> list[tuple[int, dict[str, Any]]]:
        """Measured out-of-memory trials: the evidence for predicted ones."""
        return sorted((t.number, t.params) for t in self.results.values() if t.user_attrs.get("status") == "oom")

    @property
    def done(self) -> int:
        return len(self.results)


def result_trials(study: Any) -> list[Any]:
    """Trials that hold a measured (or otherwise final) result, one per configuration."""
    return results_of(study.get_trials(deepcopy=False))


def results_of(trials: list[Any]) -> list[Any]:
    """``result_trials`` over trials already read."""
    return [t for t in trials if t.user_attrs.get("status") in RESULT_STATUSES and "repeat_of" not in t.user_attrs]


def objective_values(spec: SweepSpec, metrics: dict[str, float]) -> list[float] | None:
    values = [metrics.get(m) for m, _ in spec.objective.metrics]
    if any(v is None or v != v for v in values):
        return None
    return [float(v) for v in values]


def is_feasible(trial: Any) -> bool:
    return trial.state.name == "COMPLETE" and all(v <= 0 for v in trial.constraints.values())


def best_trials(study: Any, spec: SweepSpec) -> list[Any]:
    """Feasible measured trials, best first (single objective), or the Pareto front."""
    return rank(result_trials(study), spec)


def rank(results: list[Any], spec: SweepSpec) -> list[Any]:
    """``best_trials`` over trials already read (``result_trials``' list)."""
    feasible = [t for t in results if is_feasible(t)]
    if len(spec.objective.metrics) == 1:
        sign = -1 if spec.objective.metrics[0][1] == "maximize" else 1
        return sorted(feasible, key=lambda t: sign * t.values[0])
    front = []
    for t in feasible:
        if not any(_dominates(o.values, t.values, spec) for o in feasible if o is not t):
            front.append(t)
    return sorted(front, key=lambda t: t.number)


def _dominates(a: list[float], b: list[float], spec: SweepSpec) -> bool:
    better = False
    for x, y, (_, d) in zip(a, b, spec.objective.metrics):
        x, y = (x, y) if d == "minimize" else (-x, -y)
        if x > y:
            return False
        better |= x < y
    return better


def tell(study: Any, trial: Any, spec: SweepSpec, outcome: Outcome, extra: dict[str, Any]) -> str:
    """Record a trial's outcome in Optuna; OOM and crashes are infeasible, never given a value.
    Returns the status recorded (``ok`` without the objective metric(s) becomes ``error``)."""
    from optuna.trial import TrialState

    metrics = outcome.metrics
    trial.set_user_attr("status", outcome.status)
    if outcome.detail:
        trial.set_user_attr("detail", outcome.detail[:2000])
    trial.set_user_attr("metrics", metrics)
    for k, v in extra.items():
        trial.set_user_attr(k, v)
    if outcome.status in INFEASIBLE:
        trial.set_constraint(FIT_CONSTRAINT, 1.0)
        study.tell(trial, state=TrialState.PRUNED)
        return outcome.status
    values = objective_values(spec, metrics) if outcome.status == "ok" else None
    if values is None:
        status = outcome.status
        if status == "ok":
            status = "error"
            trial.set_user_attr("status", status)
            trial.set_user_attr("detail", "the trial did not report the objective metric(s)")
        study.tell(trial, state=TrialState.FAIL)
        return status
    trial.set_constraint(FIT_CONSTRAINT, -1.0)
    for c in spec.objective.constraints:
        value = metrics.get(c.metric)
        trial.set_constraint(c.metric, c.violation(value) if value is not None else 1.0)
    study.tell(trial, values)
    return "ok"


def run_tags(trial_like: Any, outcome_result: dict[str, Any], status: str, detail: str | None) -> dict[str, str]:
    prov = outcome_result.get("provenance", {}) or {}
    tags = {"status": status, "device": outcome_result.get("applied", {}).get("device", ""),
            "device_name": prov.get("device_name", ""), "torch_version": prov.get("torch_version", "")}
    if detail:
        tags["detail"] = detail
    if outcome_result.get("not_applied"):
        tags["not_applied"] = "; ".join(f"{k}: {v}" for k, v in outcome_result["not_applied"].items())
    if "phase" in outcome_result:
        tags["failed_in"] = f"{outcome_result['phase']} step {outcome_result.get('step')}"
    if "signal" in outcome_result:
        tags["signal"] = outcome_result["signal"]
    return {k: v for k, v in tags.items() if v not in (None, "")}


def run_metrics(trial_metrics: dict[str, float], result: dict[str, Any], extra: dict[str, Any]) -> dict[str, float]:
    out = dict(trial_metrics)
    for k in (M.DURATION_S, "process_peak_rss_gib"):
        if extra.get(k) is not None:
            out[k] = extra[k]
    for k, v in (result.get("memory_at_failure") or {}).items():
        if isinstance(v, (int, float)):
            out[f"at_oom_{k}"] = v
    return out


class Sweep:
    """One invocation of ``orchestrate SPEC``: recover, then run until the study is complete."""

    def __init__(self, spec: SweepSpec, plan: Plan, study: Any, tracker: Tracker, work_dir: Path,
                 stop: StopFlag, launcher: Callable[..., Any] = launch_trial, neighbours: bool = True) -> None:
        """``launcher`` runs one trial (``launch.launch_trial``'s signature); the search-efficiency
        benchmark passes one that answers from a recorded table instead (``orchestrator.replay``),
        and ``neighbours=False`` to measure what ``_propose_neighbour`` is worth."""
        self.spec, self.plan, self.study, self.tracker = spec, plan, study, tracker
        self.work_dir, self.stop, self.launcher = work_dir, stop, launcher
        self.neighbours = neighbours
        self.configs = configurations(plan) if plan.finite() else None
        self.target = spec.search.n_trials or (len(self.configs) if self.configs is not None else 0)
        if self.configs is not None:
            self.target = min(self.target, len(self.configs))
        self.rng = random.Random(spec.search.seed)
        self.best: list[Any] = []
        """``best_trials`` as of the last result; kept by ``run`` so nobody reads the study again."""
        self.failures = 0
        self.stopped_because: str | None = None

    # -- recovery ---------------------------------------------------------------------------------
    def recover(self) -> int:
        """Repair what a killed orchestrator left: returns how many trials were ended as interrupted."""
        from optuna.trial import TrialState

        runs = self.tracker.trial_runs()
        interrupted = 0
        for t in self.study.get_trials(deepcopy=False):
            mine = runs.get(t.number, [])
            if t.state == TrialState.RUNNING:
                trial = self._trial_handle(t)
                trial.set_user_attr("status", "interrupted")
                trial.set_user_attr("detail", "the orchestrator died during this trial; its configuration is run again")
                self.study.tell(t.number, state=TrialState.FAIL)
                if not mine:
                    mine = [self._mlflow_run_for(t)]
                for run in mine:
                    self.tracker.finish_trial(run.info.run_id, "interrupted", {}, {"detail": "orchestrator died"}, [])
                interrupted += 1
                continue
            if t.state == TrialState.WAITING:
                continue
            status = t.user_attrs.get("status", "interrupted")
            if not mine:
                mine = [self._mlflow_run_for(t)]
            for run in mine:
                if run.info.status not in TERMINAL:
                    self._finish_from_record(run.info.run_id, t, status)
        return interrupted

    def _trial_handle(self, frozen: Any) -> Any:
        import optuna

        return optuna.trial.Trial(self.study, frozen._trial_id)

    def _mlflow_run_for(self, t: Any) -> Any:
        run_id = self.tracker.start_trial(t.number, t.params, {})
        return self.tracker.client.get_run(run_id)

    def _finish_from_record(self, run_id: str, t: Any, status: str) -> None:
        trial_dir = self.trial_dir(t.number)
        metrics = dict(t.user_attrs.get("metrics", {}))
        extra = {k: t.user_attrs.get(k) for k in (M.DURATION_S, "process_peak_rss_gib")}
        processes = int(t.user_attrs.get("processes", 1))
        # the process that decided the trial's status
        result = _read_json(repeat_path(trial_dir, processes) / "result.json")
        tags = run_tags(t, result, status, t.user_attrs.get("detail"))
        tags.update({k: str(t.user_attrs[k]) for k in ("reason", "predicted_by", "repeat_of", "processes",
                                                       "neighbour_of") if k in t.user_attrs})
        self.tracker.finish_trial(run_id, status, run_metrics(metrics, result, extra), tags,
                                  self._files(trial_dir, processes))

    def trial_dir(self, number: int) -> Path:
        return self.work_dir / f"trial-{number:04d}"

    @staticmethod
    def _files(trial_dir: Path, processes: int = 1) -> list[tuple[Path, str | None]]:
        """The trial's files and the MLflow artifact folder for each (repeat k > 1 in ``repeat-<k>/``)."""
        out: list[tuple[Path, str | None]] = []
        for k in range(1, processes + 1):
            out += [(repeat_path(trial_dir, k) / name, repeat_dir_name(k))
                    for name in ("trial.log", "result.json", "config.json")]
        return out

    # -- the loop -----------------------------------------------------------------------------------
    def state(self) -> SweepState:
        """Read the study once: its results by configuration, and the best of them (``self.best``)."""
        results = result_trials(self.study)
        self.best = rank(results, self.spec)
        return SweepState({config_key(t.params): t for t in results})

    def retry_interrupted(self, state: SweepState) -> None:
        """Put configurations whose trial was interrupted back in Optuna's queue (once each)."""
        from optuna.trial import TrialState

        queued = {config_key(t.system_attrs.get("fixed_params") or t.params)
                  for t in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            params = t.params or t.system_attrs.get("fixed_params") or {}  # killed before suggest
            key = config_key(params)
            if t.user_attrs.get("status") == "interrupted" and params and key not in state.results and key not in queued:
                keep = {k: t.user_attrs[k] for k in ("neighbour_of",) if k in t.user_attrs}
                self.study.enqueue_trial(params, user_attrs=keep or None)
                queued.add(key)

    def next_grid_config(self, state: SweepState) -> dict[str, Any] | None:
        assert self.configs is not None
        for config in self.configs:
            if config_key(config) not in state.results:
                return config
        return None

    def run(self, on_result: Callable[[Any, Outcome, float], None]) -> None:
        from optuna.trial import TrialState

        event("loop_start")
        state = self.state()
        self.retry_interrupted(state)
        started = time.monotonic()
        answered = 0  # proposals in a row answered from the record
        since_best = 0
        best = self._best_value()
        while state.done < self.target:
            if self.stop.tripped:
                raise Interrupted(self.stop.signum or 2)
            if self.spec.search.timeout_min is not None and time.monotonic() - started > self.spec.search.timeout_min * 60:
                self.stopped_because = f"search.timeout_min={self.spec.search.timeout_min:g} reached"
                return
            if self.spec.search.patience is not None and since_best >= self.spec.search.patience:
                self.stopped_because = f"no improvement in {since_best} trials (search.patience)"
                return
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if not waiting:
                forced = None
                if self.spec.search.sampler == "grid":
                    forced = self.next_grid_config(state)
                elif answered >= MAX_REPEATED_PROPOSALS:
                    forced = self._random_unvisited(state)
                if forced is not None:
                    self.study.enqueue_trial(forced)
                elif self.spec.search.sampler == "grid" or (answered >= MAX_REPEATED_PROPOSALS and self.configs is not None):
                    self.stopped_because = "every configuration of the space has a result"
                    return
                elif answered >= MAX_REPEATED_PROPOSALS:
                    self.stopped_because = (f"the sampler proposed {answered} measured configurations in a "
                                            "row; the space looks exhausted")
                    return
            event("ask_start")
            trial = self.study.ask()
            reached("after_ask")
            sampled = suggest(trial, self.plan)
            event("ask_end", trial.number)
            key = config_key(sampled)
            if key in state.results:
                original = state.results[key]
                self._tell_repeat(trial, original)
                answered += 1
                on_result(trial, Outcome("repeat", f"same configuration as trial {original.number}; "
                                                   "answered from the record, not run again"), 0.0)
                self._propose_neighbour(sampled, original.number, state)
                continue
            answered = 0
            proof = (predicted_oom(sampled, state.ooms, self.spec.search.memory_order)
                     if self.spec.search.skip_predicted_oom else None)
            outcome = self.run_trial(trial, sampled, proof)
            state = self.state()
            event("state_read", trial.number)
            best_after = self._best_value()
            since_best = 0 if best_after is not None and best_after != best else since_best + 1
            best = best_after
            on_result(trial, outcome, 0.0)
            if outcome.status == "interrupted":
                raise Interrupted(self.stop.signum or 2)
            if outcome.status in FAILED or (  # "interrupted" was raised just above
                    outcome.status == "crashed" and outcome.result.get("signal") != "SIGKILL"):
                self.failures += 1
                if self.failures > self.spec.search.max_failures:
                    raise FailureBudgetExceeded(
                        f"{self.failures} trials failed (error, timeout, crash or divergence; OOM not "
                        f"counted), more than search.max_failures={self.spec.search.max_failures}. "
                        f"The study is saved: fix the cause (see the trial logs in {self.work_dir}) and "
                        f"run the same command to resume")

    def _propose_neighbour(self, proposed: dict[str, Any], original: int, state: SweepState) -> None:
        """The sampler proposed a configuration that already has a result: it is exploiting that
        point. Queue the nearest configuration that has none and is not predicted to run out of
        memory (``space.distance``: adjacent batch sizes are near, unlike in Optuna's categorical
        kernel), so the search refines around it instead of asking again and again."""
        from optuna.trial import TrialState

        if (not self.neighbours or self.configs is None or self.spec.search.sampler not in MODEL_BASED
                or self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
            return
        order, ooms = self.spec.search.memory_order, state.ooms
        left = [c for c in self._unvisited(state)
                if not (self.spec.search.skip_predicted_oom and predicted_oom(c, ooms, order) is not None)]
        chosen = nearest(proposed, left, self.plan, self.rng)
        if chosen is not None:
            self.study.enqueue_trial(chosen, user_attrs={"neighbour_of": original})

    def _best_value(self) -> float | None:
        return self.best[0].values[0] if self.best and len(self.spec.objective.metrics) == 1 else None

    def _unvisited(self, state: SweepState) -> list[dict[str, Any]]:
        assert self.configs is not None
        return [c for c in self.configs if config_key(c) not in state.results]

    def _random_unvisited(self, state: SweepState) -> dict[str, Any] | None:
        if self.configs is None:
            return None
        left = self._unvisited(state)
        return self.rng.choice(left) if left else None

    def _tell_repeat(self, trial: Any, original: Any) -> None:
        """The sampler proposed a configuration that already has a result: answer from the record."""
        from optuna.trial import TrialState

        status = original.user_attrs.get("status")
        run_id = self.tracker.start_trial(trial.number, trial.params, {"repeat_of": str(original.number)})
        trial.set_user_attr("mlflow_run_id", run_id)
        trial.set_user_attr("repeat_of", original.number)
        trial.set_user_attr("status", status)
        for k, v in original.constraints.items():
            trial.set_constraint(k, v)
        if original.state == TrialState.COMPLETE:
            self.study.tell(trial, original.values)
        else:
            self.study.tell(trial, state=original.state)
        self.tracker.finish_trial(run_id, status, {}, {"repeat_of": str(original.number),
                                                        "detail": f"same configuration as trial {original.number}; not run again"}, [])

    def measure(self, config: dict[str, Any], trial_dir: Path, env: dict[str, str]) -> Launched:
        """Run the configuration ``trial.repeats`` times, each in a fresh process, stopping at the
        first repeat that is not ok (``orchestrator.repeats``)."""
        n = self.spec.trial.repeats
        runs = []
        for k in range(1, n + 1):
            if k > 1 and self.stop.tripped:  # stopped between repeats: start no process to kill it
                runs.append(Launched(Outcome("interrupted", "the orchestrator was stopped during this trial"),
                                     None, 0.0, None, trial_dir / "trial.log"))
                break
            runs.append(self.launcher(config, repeat_path(trial_dir, k), env, self.spec.trial.timeout_s,
                                      self.stop))
            if runs[-1].outcome.status != "ok":
                break
        return combine(runs, n, [m for m, _ in self.spec.objective.metrics])

    def run_trial(self, trial: Any, sampled: dict[str, Any], predicted_by: int | None = None) -> Outcome:
        """Run one configuration, or, when an earlier OOM proves it cannot fit, record it as
        skipped without a subprocess (same five steps, so a kill is repaired the same way)."""
        params = trial_params(self.plan, sampled)
        device = params["device"]
        not_applied = dict(self.plan.not_applied)
        run_id = self.tracker.start_trial(trial.number, params, {"device": device})
        trial.set_user_attr("mlflow_run_id", run_id)
        event("mlflow_started", trial.number)
        reached("after_run_start")
        config = {
            "experiment": self.spec.experiment,
            "trial_number": trial.number,
            "params": params,
            "not_applied": not_applied,
            "trial": {"warmup_steps": self.spec.trial.warmup_steps,
                      "measure_steps": self.spec.trial.measure_steps,
                      "min_measure_s": self.spec.trial.min_measure_s},
        }
        env = knobs.trial_env(params, device)
        trial_dir = self.trial_dir(trial.number)
        if predicted_by is not None:
            outcome = Outcome("skipped", f"predicted out of memory: needs at least as much memory as "
                              f"trial {predicted_by}, which ran out of memory", {})
            extra: dict[str, Any] = {"reason": "predicted_oom", "predicted_by": predicted_by}
            tell(self.study, trial, self.spec, outcome, extra)
            reached("after_tell")
            self.tracker.finish_trial(run_id, "skipped", {}, {"device": device, "reason": "predicted_oom",
                                      "predicted_by": str(predicted_by), "detail": outcome.detail}, [])
            return outcome
        launched = self.measure(config, trial_dir, env)
        outcome = launched.outcome
        extra = {M.DURATION_S: round(launched.duration_s, 3), "trial_dir": str(trial_dir),
                 "process_peak_rss_gib": launched.peak_rss_gib}
        processes = int(outcome.result.get("repeats_done", 1))
        if self.spec.trial.repeats > 1:
            extra["processes"] = processes
            if "repeat_metrics" in outcome.result:
                extra["repeat_metrics"] = outcome.result["repeat_metrics"]
        if env:
            extra["env"] = env
        status = tell(self.study, trial, self.spec, outcome, extra)
        event("told", trial.number)
        reached("after_tell")
        tags = run_tags(trial, outcome.result, status, outcome.detail)
        tags.setdefault("device", device)
        if "processes" in extra:
            tags["processes"] = str(extra["processes"])
        if "neighbour_of" in trial.user_attrs:
            tags["neighbour_of"] = str(trial.user_attrs["neighbour_of"])
        if not_applied and "not_applied" not in tags:
            tags["not_applied"] = "; ".join(f"{k}: {v}" for k, v in not_applied.items())
        self.tracker.finish_trial(run_id, status, run_metrics(outcome.metrics, outcome.result, extra),
                                  tags, self._files(trial_dir, processes))
        event("mlflow_finished", trial.number)
        reached("after_finish")
        outcome.status = status
        return outcome


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
