"""A sweep command's start-up, overlapped: the seconds before the first trial.

What the first trial needs, and what can run beside what:

- **one import of torch.** The slot's fork server starts at once, for the device the spec names
  (``auto``: a guess made without torch, ``space.guess_device``), and once its imports are done it
  forks the experiment's probe (``checks.Probe``: the module checked, the device resolved, then
  the smoke step), then, once the probe has its device, each slot's first trial process
  (``Startup.probe_answered``), then the trials. Before, the probe was a process of its own that imported
  torch, and the server started only once it had answered: two imports of torch, one after the
  other. Where the server cannot answer (no fork server: macOS or ``ORCHESTRATE_FORK=0``; a swept
  device; trials that need different allocator environments; slots that cannot be resolved for
  the guess) the probe is a process of its own, as before; a wrong guess is seen in the probe's
  answer, and the servers are started again for the device it found.
- **MLflow's and Optuna's imports** (seconds of CPU: MLflow imports pandas, FastAPI, its GenAI
  modules), and those of what opening their stores needs, run in this process while the server
  imports torch (``warm_imports``).
- **no store written before the experiment is checked**: the stores are opened (and a new
  project's created) once the probe and the smoke step have answered (``run.py``); only the
  ``mlruns`` folder and the SQLite study's lock file come before, so that the lock is held while
  the probe runs (``stores.study_held``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.spec.load import SweepSpec
from orchestrator.tempfolder import PROBE
from orchestrator.timeline import event

if TYPE_CHECKING:
    from orchestrator.launch import ProcessRunner, StopFlag
    from orchestrator.launch.slots import Slot
    from orchestrator.search.space import Plan


class Startup:
    """The probe and the trial runner, started together (see the module)."""

    def __init__(self, spec: SweepSpec, guessed: Plan, smoke: dict[str, Any] | None, devices_flag: bool,
                 stop: StopFlag) -> None:
        """``guessed``: the plan for the guessed device; ``smoke``: the smoke step's parameters
        (None: no smoke step); ``devices_flag``: the slots came from ``--devices``."""
        from orchestrator.sweep import checks
        from orchestrator.errors import SpecError

        self.spec, self.guessed, self.devices_flag, self.stop = spec, guessed, devices_flag, stop
        self.runner: ProcessRunner | None = None
        self.slots: list[Slot] | None = None
        self.prepared = False
        """Whether the slots' first trial processes were asked for (``probe_answered``)."""
        server = None
        if _server_can_answer(spec, guessed):
            try:
                self.slots = slots_for(spec, guessed.device, devices_flag)
            except SpecError:  # said again, in its order, once the probe has named the device
                self.slots = None
            if self.slots is not None:
                from orchestrator.search.space import shared_env

                folder = probe_folder()
                self.runner = new_runner(spec, self.slots, stop)
                server = self.runner.prewarm(shared_env(guessed), folder / "server.log")  # type: ignore[arg-type]  # not None: _server_can_answer
        try:
            if server is None:
                self.close_runner()
                self.probe = checks.start_probe(spec, smoke, probe_env(spec))
            else:
                self.probe = checks.start_probe(spec, smoke, server=server, folder=folder)
        except BaseException:
            self.close_runner()
            raise

    def probe_answered(self, device: str) -> None:
        """The probe has its device initialised: where the guess was right, every slot's first
        trial process is forked now, initialising the device during the smoke step and the
        stores' opening. Not before: the host's driver initialises CUDA for one process at a time,
        whatever the GPU (4 x H100: 0.45 s alone, four started together all done after 1.8 s,
        ``docs/gpu/contexts_probe.py``), and the probe's would have queued behind them."""
        if self.runner is not None and not self.prepared and device == self.guessed.device:
            self.prepared = True
            self.runner.prepare(device)

    def ready(self, plan: Plan) -> tuple[list[Slot], ProcessRunner]:
        """The slots and the runner for ``plan`` (the device the probe found): the ones started
        with the probe when the guess was right, else new ones."""
        from orchestrator.search.space import shared_env

        if self.runner is not None and plan.device == self.guessed.device and shared_env(plan) == shared_env(self.guessed):
            self.probe_answered(plan.device)  # once: the sweep asked for them when the probe answered
            return self.slots, self.runner  # type: ignore[return-value]  # both set with the runner
        self.close_runner()
        self.slots = slots_for(self.spec, plan.device, self.devices_flag)
        self.runner = new_runner(self.spec, self.slots, self.stop)
        env = shared_env(plan)
        if env is not None:  # else the first trial starts its own (a wrong guess would cost an import)
            self.runner.prewarm(env)
            if "device" not in self.spec.space:
                self.runner.prepare(plan.device)
        return self.slots, self.runner

    def close_runner(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


def _server_can_answer(spec: SweepSpec, guessed: Plan) -> bool:
    """Whether the slot's fork server can answer the probe (see the module)."""
    from orchestrator.launch import fork_server_usable
    from orchestrator.search.space import shared_env

    return fork_server_usable() and "device" not in spec.space and shared_env(guessed) is not None


PROBE_FOLDER = PROBE


def probe_folder() -> Path:
    """A folder of this process's own, outside the project, for the forked probe's request and
    answers and the server's output (``checks.Probe`` removes it); the ones that orchestrators
    killed during their start-up left behind are removed (``tempfolder.own``)."""
    from orchestrator import tempfolder

    return tempfolder.own(PROBE_FOLDER)


def new_runner(spec: SweepSpec, slots: list[Slot], stop: StopFlag) -> ProcessRunner:
    from orchestrator.launch import ProcessRunner

    return ProcessRunner(slots, spec.workload, Path("mlruns").resolve(), stop, fixed=dict(spec.fixed))


def slots_for(spec: SweepSpec, device: str, devices_flag: bool) -> list[Slot]:
    from orchestrator.launch.slots import flag_error, resolve_slots

    fail = flag_error("--devices") if devices_flag else (lambda rule: spec.error(("devices",), rule))
    return resolve_slots(spec.devices, device, fail)


def probe_env(spec: SweepSpec) -> dict[str, str]:
    """A probe of its own touches the device on the study's first GPU slot, never on another's."""
    if spec.devices and any(d.startswith("cuda") for d in spec.devices):
        from orchestrator.machine import list_gpus

        gpus = list_gpus()
        first = next((d for d in spec.devices if d.startswith("cuda")), "cuda")
        index = int(first.split(":")[1]) if ":" in first else None
        gpu = next((g for g in gpus if index is None or g.index == index), None)
        if gpu is not None:
            return {"CUDA_VISIBLE_DEVICES": gpu.uuid}
    return {}


def warm_imports() -> None:
    """What opening the stores and driving the sweep import, imported now, while the probe
    works: MLflow's client and SQL store, Optuna's storage, the sweep's own modules."""
    import alembic.command  # noqa: F401 - the stores' schema checks (both libraries use alembic)
    import alembic.config  # noqa: F401
    import mlflow.tracking  # noqa: F401
    import sqlalchemy.dialects.sqlite  # noqa: F401
    import tqdm  # noqa: F401
    from mlflow.entities import Metric, Param, RunTag  # noqa: F401
    from mlflow.store.tracking import sqlalchemy_store, sqlalchemy_workspace_store  # noqa: F401

    from orchestrator.store import recovery, templates  # noqa: F401
    from orchestrator.store.optuna_internals import import_storage
    from orchestrator.sweep import loop  # noqa: F401

    import_storage()  # Optuna and its storage's table models
    event("imports_done")
