"""Checks made before a study exists: the experiment module (imported in a subprocess, so torch
stays out of the orchestrator), its parameters, and the memory knobs against the device."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from orchestrator.errors import SpecError
from orchestrator.redact import child_env
from orchestrator.harness.protocol import PARENT_PID_ENV
from orchestrator.spec.load import SweepSpec
from orchestrator.timeline import event


class Probe:
    """The experiment module checked in a subprocess (torch stays out of this process), started
    first so that the orchestrator's own imports and the study's opening overlap with it.

    The child (``python -m orchestrator.harness.probe``) prints ``PROBE {json}`` once it has
    imported the module, checked its fixed parameters and resolved the device; given a smoke
    configuration it then runs one training step of it (``orchestrator.harness.smoke``) and prints
    ``SMOKE {json}``: a broken experiment fails here, in seconds, with its own file:line. It runs
    in a session of its own, which it kills if this process dies (``ORCHESTRATE_PARENT_PID``)."""

    TIMEOUT_S = 300

    def __init__(self, spec: SweepSpec, smoke: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> None:
        import os

        self.spec = spec
        fixed = json.dumps(spec.fixed, default=str)
        args = [sys.executable, "-m", "orchestrator.harness.probe", spec.experiment,
                spec.device if "device" not in spec.space else "auto", fixed]
        if smoke is not None:
            args.append(json.dumps(smoke, default=str))
        import tempfile

        self._err = tempfile.TemporaryFile()  # a pipe could fill up with a traceback and block the child
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._err,
                                     env={**child_env(), **(env or {}), PARENT_PID_ENV: str(os.getpid())},
                                     start_new_session=True)
        event("probe_start")
        self._lines: list[str] = []
        self._buffer = b""
        self._stderr = ""

    def _line(self, prefix: str, timeout_s: float, what: str) -> str | None:
        """The child's line starting with ``prefix``, reading its output until it appears."""
        import select
        import time

        import os

        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            found = next((ln for ln in self._lines if ln.startswith(prefix)), None)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise self.spec.error(("experiment",), f"{what} took more than {timeout_s:g} s")
            chunk = os.read(fd, 65536)
            if not chunk:  # the child ended without the line
                self.proc.wait()
                self._err.seek(0)
                self._stderr = self._err.read().decode(errors="replace")
                return None
            *lines, self._buffer = (self._buffer + chunk).split(b"\n")
            self._lines += [ln.decode(errors="replace") for ln in lines]

    def result(self) -> dict[str, Any]:
        """The probe's answer; a SpecError naming the spec's line when the module is unusable."""
        line = self._line("PROBE ", self.TIMEOUT_S, "importing the experiment module (does it do "
                          "work at import time?)")
        if line is None:
            tail = (self._stderr.strip().splitlines() or ["no output"])[-1]
            raise SpecError(f"checking the experiment module failed: {tail}", file=str(self.spec.path),
                            line=self.spec.line_of("experiment"), field="experiment")
        result = json.loads(line[len("PROBE "):])
        if not result["ok"]:
            self.close()
            field = result.get("field")
            path = (("device",) if field == "device" else ("fixed", field) if field and field in self.spec.fixed
                    else ("experiment",))
            raise self.spec.error(path, result["error"])
        return result

    def smoke(self) -> dict[str, Any] | None:
        """The smoke step's answer (``{"ok": ..., "error": ..., "where": ...}``), None if it gave none."""
        limit = min(self.TIMEOUT_S, self.spec.trial.timeout_s)
        line = self._line("SMOKE ", limit, "the smoke step (one training step of the smallest "
                          "configuration, before any trial; skip it with --no-check)")
        self.close()
        return json.loads(line[len("SMOKE "):]) if line is not None else None

    def close(self) -> None:
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


def probe_experiment(spec: SweepSpec) -> dict[str, Any]:
    """``Probe(spec).result()``, waited for."""
    probe = Probe(spec)
    try:
        return probe.result()
    finally:
        probe.close()


SMOKE_BATCH = 2


def smoke_params(spec: SweepSpec, plan: Any) -> dict[str, Any]:
    """The configuration the smoke step runs: the plan's first, with a batch of at most 2 (the
    smallest if smaller), one micro-batch per step, no memory caps and no compile: it checks the
    experiment's code in seconds, not the knobs or the memory (a sweep of batches of thousands
    would otherwise smoke-test one of them)."""
    from orchestrator.search.space import configurations, trial_params

    from orchestrator.spec.load import Choice

    first = {}
    for name, dim in plan.searched.items():
        values = dim.values if isinstance(dim, Choice) else (dim.low,)
        if name == "batch_size" and all(isinstance(v, (int, float)) for v in values):
            first[name] = min(values)
        else:
            first[name] = values[0]
    if plan.finite():
        configs = configurations(plan)
        if configs:
            first = {**configs[0], **{k: v for k, v in first.items() if k == "batch_size"}}
    params = trial_params(plan, first)
    for cap in ("memory_fraction", "cpu_memory_limit_gib", "mps_high_watermark_ratio",
                "mps_low_watermark_ratio", "compile"):
        params.pop(cap, None)
    if isinstance(params.get("batch_size"), (int, float)):
        params["batch_size"] = max(1, min(int(params["batch_size"]), SMOKE_BATCH))
    if "grad_accum_steps" in params:
        params["grad_accum_steps"] = 1
    return params


def check_experiment_params(spec: SweepSpec, probe: dict[str, Any]) -> None:
    """Names that are neither harness knobs nor the experiment's PARAMS are typos."""
    import difflib

    from orchestrator.spec import knobs

    accepted = probe.get("params")
    if accepted is None:
        return
    valid = sorted(set(accepted) | set(knobs.KNOBS))
    for section, names in (("fixed", spec.fixed), ("space", spec.space)):
        for name in names:
            if name not in valid:
                hint = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
                did = f"did you mean {hint[0]!r}? " if hint else ""
                raise spec.error((section, name), f"unknown parameter for {spec.experiment}; {did}"
                                 f"it takes {', '.join(sorted(accepted))} and the harness knobs")
    for device in (spec.space["device"].values if "device" in spec.space else ()):
        if not probe.get("available", {}).get(device, False):
            raise spec.error(("space", "device"), f"device {device} is not available on this machine")


def check_cuda_fraction(spec: SweepSpec) -> None:
    """CUDA's fraction is of total memory, at most 1.0 (MPS allows up to 2.0)."""
    from orchestrator.spec.load import Choice

    swept = spec.space.get("memory_fraction")
    values: list[tuple[tuple, float]] = []
    if "memory_fraction" in spec.fixed:
        values.append((("fixed", "memory_fraction"), spec.fixed["memory_fraction"]))
    elif isinstance(swept, Choice):
        values += [(("space", "memory_fraction", i), v) for i, v in enumerate(swept.values)]
    elif swept is not None:
        values.append((("space", "memory_fraction", "high"), swept.high))
    for path, value in values:
        if value > 1:
            raise spec.error(path, f"on CUDA memory_fraction must be at most 1.0, got {value}")
