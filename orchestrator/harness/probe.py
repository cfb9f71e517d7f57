"""Check an experiment module against the contract, in a subprocess, before a study exists.

``python -m orchestrator.harness.probe MODULE DEVICE FIXED_JSON [SMOKE_PARAMS_JSON SMOKE_SCRIPT_JSON
TEMP_DIR]`` prints one JSON line: ``PROBE {"ok": true, "device": "cpu", "params": [...] | null, ...}`` or
``PROBE {"ok": false, "error": "..."}``; given smoke parameters, then ``SMOKE {...}``: one
training step of that configuration (``orchestrator.harness.smoke``). On Linux the slot's fork
server usually answers instead (``forkserver.py``: the same ``answer``, in a process it forks,
written to files), so that a command imports torch once, not twice.

Like a trial, it dies with the orchestrator that started it (``child.watch_parent``, installed
before torch is imported): killed during its start-up, the orchestrator leaves no probe importing
torch or running the smoke step behind it, nor anything the experiment started.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import traceback
from typing import Callable

from orchestrator.harness.child import use_temp_dir, watch_parent


def probe(module_name: str, device: str, fixed: dict) -> dict:
    from orchestrator.harness.child import is_script

    if is_script(module_name):  # a training script: it must compile; it has no PARAMS to check
        from orchestrator.scriptsource import check_source

        why = check_source(module_name)
        return {"ok": False, "error": why} if why else device_answer(device, None)
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        from orchestrator.spec.locate import locate

        try:  # says where it looked (or which package lacks the module)
            locate(module_name, sys.path)
            why = f"no module named {module_name!r}"
        except LookupError as exc:
            why = str(exc)
        return {"ok": False, "error": why}
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        return {"ok": False, "error": f"importing {module_name} failed: {type(exc).__name__}: {exc}{_at(exc, module_name)}"}
    build = getattr(module, "build", None)
    if not callable(build):
        return {"ok": False, "error": f"{module_name} does not follow the experiment contract: it has no "
                                      "build(params, device) function (see docs/experiment.md)"}
    params = getattr(module, "PARAMS", None)
    if params is not None and not isinstance(params, dict):
        return {"ok": False, "error": f"{module_name}.PARAMS must be a dict of parameter names to defaults, got a "
                                      f"{type(params).__name__}"}
    validate = getattr(module, "validate_params", None)
    if callable(validate):
        try:
            validate(fixed)
        except ValueError as exc:
            return {"ok": False, "error": str(exc), "field": getattr(exc, "field", None)}
        except Exception as exc:  # noqa: BLE001 - a bug in it, not a value it refuses: where it is (a tour)
            traceback.print_exc()
            return {"ok": False, "error": f"{module_name}.validate_params raised {type(exc).__name__}: {exc}"
                                          f"{_at(exc, module_name)}"}
    return device_answer(device, sorted(params) if params is not None else None)


def _at(exc: BaseException, module_name: str) -> str:
    """`` at FILE:LINE``: the innermost frame of ``exc`` in the experiment's own source (an
    experiment tour: a NameError at its import and a KeyError in validate_params said neither)."""
    from orchestrator.harness.smoke import locate

    where = locate(exc.__traceback__, module_name)["where"]
    return f" at {where}" if where else ""


def device_answer(device: str, params: list[str] | None) -> dict:
    """The device resolved and described (or why it cannot be used), with the experiment's
    parameter names (None: it does not list them)."""
    import torch

    from orchestrator.harness import backend

    resolved = backend.resolve(device)
    if why := why_not(resolved):
        return {"ok": False, "field": "device", "error": f"{resolved} cannot be used: {why}"}
    try:
        info = backend.describe(resolved)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "field": "device", "error": f"{resolved} cannot be used: {type(exc).__name__}: {exc}"}

    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    return {"ok": True, "device": resolved, "available": available, "params": params,
            "device_name": info.get("device_name"), "torch_version": info.get("torch_version"),
            "total_memory_gib": info.get("total_memory_gib")}


def why_not(device: str) -> str | None:
    """Why torch cannot use ``device`` here, in ``orchestrate doctor``'s words (``harness.doctor``:
    no CUDA or MPS in this torch build, none available, and why), else None."""
    import torch

    from orchestrator.harness.doctor import cuda_facts, mps_facts

    facts = cuda_facts(torch) if device == "cuda" else mps_facts(torch) if device == "mps" else {"available": True}
    return None if facts["available"] else str(facts.get("why_not") or f"torch sees no {device} device")


def answer(module_name: str, device: str, fixed: dict, smoke: dict | None, say: Callable[[str, dict], None],
           smoke_script: dict | None = None, log_path: str | None = None, temp_dir: str | None = None) -> None:
    """The probe's answer, then (given ``smoke``, the smoke configuration's parameters, and the
    probe's answer ok) one training step of that configuration (``orchestrator.harness.smoke``;
    a script's: ``smoke_script``, its ``ScriptCall`` for those parameters, run until its first
    optimizer step, whose output goes to ``log_path``; its multiprocessing files in ``temp_dir``,
    which the caller removes): each said as it is ready, ``say("probe", ...)`` then ``say("smoke", ...)``."""
    out = probe(module_name, device, fixed)
    say("probe", out)
    if out["ok"] and smoke is not None:
        import os

        os.environ["ORCHESTRATE_SMOKE"] = "1"  # an experiment may tell the smoke step from a trial
        use_temp_dir(temp_dir)
        if smoke_script is not None:
            from orchestrator.protocol import ScriptCall
            from orchestrator.harness.smoke import script_smoke

            call = ScriptCall(smoke_script["path"], list(smoke_script["argv"]), smoke_script.get("samples_per_step"))
            say("smoke", script_smoke(call, out["device"], lambda ok: say("smoke", ok), log_path))
            return
        from orchestrator.harness.smoke import smoke_step

        say("smoke", smoke_step(module_name, smoke, out["device"]))


def print_line(name: str, out: dict) -> None:
    """``PROBE {json}`` / ``SMOKE {json}`` on stdout (the probe run as a process of its own)."""
    print(f"{name.upper()} " + json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    watch_parent()  # before any import of torch (seconds): the probe's group dies with its parent
    import os

    answers = os.fdopen(os.dup(1), "w")  # the answers' pipe; a script's own output goes to stderr
    os.dup2(2, 1)

    def say_line(name: str, out: dict) -> None:
        answers.write(f"{name.upper()} " + json.dumps(out, default=str) + "\n")
        answers.flush()

    answer(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]),
           json.loads(sys.argv[4]) if len(sys.argv) > 4 else None, say_line,
           json.loads(sys.argv[5]) if len(sys.argv) > 5 else None, temp_dir=sys.argv[6] if len(sys.argv) > 6 else None)
