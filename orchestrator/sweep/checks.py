"""Checks made before a study exists: the experiment module (imported in a subprocess, so torch
stays out of the orchestrator), its parameters, and the memory knobs against the device."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from orchestrator import trialdir
from orchestrator.errors import SpecError
from orchestrator.redact import child_env
from orchestrator.protocol import PARENT_PID_ENV
from orchestrator.spec.load import SweepSpec
from orchestrator.timeline import event

if TYPE_CHECKING:
    from orchestrator.search.space import Plan


class Probe:
    """The experiment module checked in another process (torch stays out of this one), started
    first so that the orchestrator's own imports overlap with it.

    It imports the module, checks its fixed parameters and resolves the device (``result``);
    given a smoke configuration it then runs one training step of it
    (``orchestrator.harness.smoke``; ``smoke``): a broken experiment fails here, in seconds, with
    its own file:line. One class per transport (``orchestrator/harness/probe.py``'s ``answer``
    either way; ``start_probe`` picks one):

    - ``ForkedProbe``: the slot's fork server forks it once its own imports are done, and it
      writes its answers to files: one import of torch serves the probe and the trials;
    - ``ProcessProbe``: ``python -m orchestrator.harness.probe``, a process of its own that prints
      its answers."""

    TIMEOUT_S = 300

    def __init__(self, spec: SweepSpec, smoke: dict[str, Any] | None) -> None:
        self.spec, self.asked_smoke = spec, smoke is not None
        self.device = spec.device if "device" not in spec.space else "auto"
        self.smoke_script = _smoke_script(spec, smoke)
        self.temp_dir = trialdir.multiprocessing_folder() if smoke is not None else None
        """The smoke step's multiprocessing files (its DataLoader workers'), removed by ``close``
        (``TrialConfig.temp_dir``)."""
        self._done = False
        """Its last answer has been read: a forked probe then exits by itself."""
        self._stderr = ""

    # -- what each transport says -----------------------------------------------------------------
    def _look(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        """The answer ``name`` if it has come, and whether the probe has ended."""
        raise NotImplementedError

    def _status_fd(self) -> int | None:
        """The file descriptor whose lines say the probe got further (None: gone)."""
        raise NotImplementedError

    def _take(self) -> None:
        """What the process said since the last look."""
        raise NotImplementedError

    def _output(self) -> str:
        """What the probe printed, to say why it failed."""
        raise NotImplementedError

    def close(self) -> None:
        """The probe ends (killed if it still runs), and its files are removed."""
        raise NotImplementedError

    def _forget_temp(self) -> None:
        if self.temp_dir is not None:
            import shutil

            shutil.rmtree(self.temp_dir, ignore_errors=True)

    @property
    def _field(self) -> tuple[str]:
        """The spec's field the probe's failures are said on: the script, or the experiment module."""
        return ("script",) if self.spec.script is not None else ("experiment",)

    # -- the answers ------------------------------------------------------------------------------
    def _answer(self, name: str, timeout_s: float, what: str) -> dict[str, Any] | None:
        """The probe's answer ``name`` (``probe``, ``smoke``), waited for; None if the probe ended
        without it (``_stderr`` then holds its output)."""
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            found, ended = self._look(name)
            if found is not None:
                return found
            if ended:
                self._stderr = self._output() or "no output"
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                last = (self._output().strip().splitlines() or [""])[-1].strip()
                self.close()
                said = f"; the last line it printed: {last[:200]!r}" if last else "; it printed nothing"
                raise self.spec.error(self._field, f"{what} took more than {timeout_s:g} s" + (
                    " without an optimizer step in the script's own process (does it call optimizer.step(), "
                    "or train in processes it starts, as torch.multiprocessing.spawn does, which cannot be measured?)" if self.spec.script is not None
                    and name == "smoke" else "") + said)
            fd = self._status_fd()
            if fd is None:  # the server's pipe closed: it is gone (reaped on the next look)
                time.sleep(0.01)
            elif select.select([fd], [], [], left)[0]:
                self._take()

    def result(self) -> dict[str, Any]:
        """The probe's answer; a SpecError naming the spec's line when the module is unusable."""
        result = self._answer("probe", self.TIMEOUT_S, "checking the script" if self.spec.script is not None
                              else "importing the experiment module (does it do work at import time?)")
        event("probe_answered")
        self._done = not self.asked_smoke
        if result is None:
            tail = (self._stderr.strip().splitlines() or ["no output"])[-1]
            what = "script" if self.spec.script is not None else "experiment module"
            raise SpecError(f"checking the {what} failed: {tail}", file=str(self.spec.path),
                            line=self.spec.line_of(self._field[0]), field=self._field[0])
        if not result["ok"]:
            self.close()
            field = result.get("field")
            path = (("device",) if field == "device" else ("fixed", field) if field and field in self.spec.fixed
                    else self._field)
            raise self.spec.error(path, result["error"])
        return result

    def smoke(self) -> dict[str, Any] | None:
        """The smoke step's answer (``{"ok": ..., "error": ..., "where": ...}``), None if it gave none."""
        limit = min(self.TIMEOUT_S, self.spec.trial.timeout_s)
        answer = self._answer("smoke", limit, "the smoke step (the script run at the smallest batch until its "
                              "first optimizer step, before any trial; skip it with --no-check)"
                              if self.spec.script is not None else "the smoke step (one training step of the "
                              "first configuration at a batch of at most 2, before any trial; skip it with --no-check)")
        event("smoke_answered")
        self._done = True
        self.close()
        return answer


class ForkedProbe(Probe):
    """Forked by the slot's fork server (``launch.ForkServer``), it writes its answers to files
    beside its request, in ``folder`` (of its own, outside the project: ``startup.probe_folder``;
    removed by ``close``)."""

    def __init__(self, spec: SweepSpec, smoke: dict[str, Any] | None, server: Any, folder: Any) -> None:
        from pathlib import Path

        from orchestrator.protocol import Kind, Order

        super().__init__(spec, smoke)
        self.server, self.folder = server, Path(folder)
        self.request = self.folder / "request.json"
        self.request.write_text(json.dumps({"experiment": spec.workload, "device": self.device,
                                            "fixed": spec.fixed, "smoke": smoke, "smoke_script": self.smoke_script,
                                            "temp_dir": self.temp_dir}, default=str))
        self.child = server.fork(self.folder / "probe.log")
        self.child.send(Order(Kind.PROBE, config=str(self.request)))
        event("probe_start", forked=True)

    def _look(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        from orchestrator.protocol import probe_answer

        ended = self.child.reap()  # before the file: an answer is written before the exit
        try:
            with open(probe_answer(str(self.request), name)) as f:
                return json.load(f), ended
        except FileNotFoundError:
            return None, ended

    def _status_fd(self) -> int | None:
        return self.server.status_fd

    def _take(self) -> None:
        self.server.read_status()

    def _output(self) -> str:
        """The forked probe's log, else its server's (it died importing)."""
        for log in (self.folder / "probe.log", self.server.log_path):
            try:
                if text := log.read_text(errors="replace"):
                    return text
            except OSError:
                pass
        return ""

    def close(self) -> None:
        """Killed if it still runs (its server reaps it); its folder removed."""
        import shutil

        if self.child.returncode is None and not self._done:
            self.child.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
        self._forget_temp()


class ProcessProbe(Probe):
    """A process of its own that prints ``PROBE {json}`` and ``SMOKE {json}``, in a session of its
    own, which it kills if this process dies (``ORCHESTRATE_PARENT_PID``)."""

    def __init__(self, spec: SweepSpec, smoke: dict[str, Any] | None, env: dict[str, str] | None = None) -> None:
        import os
        import tempfile

        super().__init__(spec, smoke)
        self._lines: list[str] = []
        self._buffer = b""
        self._ended = False
        args = [sys.executable, "-m", "orchestrator.harness.probe", spec.workload, self.device,
                json.dumps(spec.fixed, default=str)]
        if smoke is not None:
            args += [json.dumps(smoke, default=str), json.dumps(self.smoke_script, default=str), str(self.temp_dir)]
        self._err = tempfile.TemporaryFile()  # a pipe could fill up with a traceback and block the child
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._err,
                                     env={**child_env(), **(env or {}), PARENT_PID_ENV: str(os.getpid())},
                                     start_new_session=True)
        event("probe_start")

    def _look(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        prefix = f"{name.upper()} "
        line = next((ln for ln in self._lines if ln.startswith(prefix)), None)
        return (json.loads(line[len(prefix):]) if line is not None else None), self._ended

    def _status_fd(self) -> int | None:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def _take(self) -> None:
        import os

        assert self.proc.stdout is not None
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:  # the child ended
            self.proc.wait()
            self._ended = True
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        self._lines += [ln.decode(errors="replace") for ln in lines]

    def _output(self) -> str:
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def close(self) -> None:
        """Killed with its session if it still runs; its pipes closed."""
        if self.proc.poll() is None:
            import os
            import signal

            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
        self._forget_temp()


def start_probe(spec: SweepSpec, smoke: dict[str, Any] | None, env: dict[str, str] | None = None,
                server: object = None, folder: object = None) -> Probe:
    """A probe forked by ``server`` (its files in ``folder``), else one in a process of its own
    (``env`` added to its environment)."""
    if server is not None:
        return ForkedProbe(spec, smoke, server, folder)
    return ProcessProbe(spec, smoke, env)


def _smoke_script(spec: SweepSpec, smoke: dict[str, Any] | None) -> dict[str, Any] | None:
    """A script spec's smoke step: its command for the smoke configuration (``smoke_params``)."""
    from orchestrator.spec.script import script_call

    call = script_call(spec, smoke) if smoke is not None else None
    return None if call is None else {"path": call.path, "argv": call.argv, "samples_per_step": call.samples_per_step}


SMOKE_BATCH = 2


def smoke_params(spec: SweepSpec, plan: Plan) -> dict[str, Any]:
    """The configuration the smoke step runs: the plan's first, with a batch of at most 2 (the
    smallest if smaller), one micro-batch per step, no memory caps and no compile: it checks the
    experiment's code in seconds, not the knobs or the memory (a sweep of batches of thousands
    would otherwise smoke-test one of them). A script gets the smallest batch the spec sweeps, as
    it is: its flags are its own (``choices=[16, 32]``, a config file per batch size), and a
    batch it was never given can fail where every trial would run."""
    from orchestrator.search.space import first_configuration, trial_params

    from orchestrator.spec.load import Choice

    first = {}
    for name, dim in plan.searched.items():
        values = dim.values if isinstance(dim, Choice) else (dim.low,)
        if name == "batch_size" and all(isinstance(v, (int, float)) for v in values):
            first[name] = min(values)
        else:
            first[name] = values[0]
    if plan.finite():
        config = first_configuration(plan)
        if config is not None:
            first = {**config, **{k: v for k, v in first.items() if k == "batch_size"}}
    params = trial_params(plan, first)
    for cap in ("memory_fraction", "cpu_memory_limit_gib", "mps_high_watermark_ratio",
                "mps_low_watermark_ratio", "compile"):
        params.pop(cap, None)
    if spec.script is not None:
        return params
    if isinstance(params.get("batch_size"), (int, float)):
        params["batch_size"] = max(1, min(int(params["batch_size"]), SMOKE_BATCH))
    if "grad_accum_steps" in params:
        params["grad_accum_steps"] = 1
    return params


def check_experiment_params(spec: SweepSpec, probe: dict[str, Any]) -> None:
    """Names that are neither harness knobs nor the experiment's PARAMS are typos (all of them
    at once, each with its line)."""
    from orchestrator.errors import raise_all

    accepted = probe.get("params")
    if accepted is not None:
        raise_all(unknown_params(spec, accepted))
    for device in (spec.space["device"].values if "device" in spec.space else ()):  # type: ignore[union-attr]  # device is always a list (a Choice)
        if not probe.get("available", {}).get(device, False):
            raise spec.error(("space", "device"), f"device {device} is not available on this machine")


def unknown_params(spec: SweepSpec, accepted: list[str]) -> list[SpecError]:
    """An error for each fixed or swept name that is neither in ``accepted`` (the experiment's
    ``PARAMS``, from the probe or read from its source: ``spec.declared``) nor a harness knob."""
    return unknown_names(spec.workload_name, [("fixed", n) for n in spec.fixed] + [("space", n) for n in spec.space],
                         accepted, spec.error)


def unknown_names(workload: str, paths: list[tuple[str, str]], accepted: list[str],
                  error: Any) -> list[SpecError]:
    """``unknown_params`` over (section, name) ``paths``; ``error(path, rule)`` words each."""
    import difflib

    from orchestrator.spec import knobs

    valid = sorted(set(accepted) | set(knobs.KNOBS))
    found = []
    for section, name in paths:
        if name not in valid:
            hint = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.6)
            did = f"did you mean {hint[0]!r}? " if hint else ""
            takes = f"it takes {', '.join(sorted(accepted))} and the harness knobs" if accepted else \
                "it takes no parameter of its own, only the harness knobs"
            found.append(error((section, name), f"unknown parameter for {workload}; {did}{takes}"))
    return found
