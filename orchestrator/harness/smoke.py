"""The experiment checked before the sweep: one tiny training step, in a subprocess.

``python -m orchestrator.harness.smoke '{"experiment": "experiments.mlp", "params": {...},
"device": "cpu"}'`` builds the workload with the given parameters (the caller passes the
smallest batch), runs the harness's own loop for one warm-up and one measured optimizer step of
one micro-batch, on one intra-op thread, without memory caps and without ``torch.compile``, and
prints one line::

    SMOKE {"ok": true, "seconds": 1.9, "device": "cpu", "loss": 2.31, "finite": true}
    SMOKE {"ok": false, "error": "RuntimeError: mat1 and mat2 shapes cannot be multiplied ...",
           "where": "experiments/mine.py:31", "function": "forward", "phase": "warmup", ...}

``where`` is the innermost line of the traceback that belongs to the experiment's own source (its
top-level package, or its file), not torch's or the harness's; when the error is raised outside
that source after the workload was built (``backward()`` of a loss that is not a scalar, say), it
is the loss function's ``def`` line. A broken experiment is then one line naming its own file
and line, seconds into a sweep instead of after N failed trials. Exit code 0 when the step ran,
1 when it failed (the line says why), 2 for a malformed argument.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, TypeVar

from orchestrator.errors import first_line
from orchestrator.protocol import TrialConfig, TrialSteps

UNCAPPED = ("cpu_memory_limit_gib", "memory_fraction")
"""Knobs that cap memory: left out, so a small step cannot fail for the cap's sake."""


def smoke_step(experiment: str, params: dict[str, Any], device: str) -> dict[str, Any]:
    """One optimizer step of one micro-batch through ``train.run``; never raises."""
    started = time.perf_counter()
    params = {k: v for k, v in params.items() if k not in UNCAPPED}
    params.update(device=device, grad_accum_steps=1, compile=False)
    config = TrialConfig(experiment, params, TrialSteps(warmup_steps=1, measure_steps=1, min_measure_s=0.0),
                         allow_swap=True)
    built: dict[str, Any] = {}
    progress = None
    try:
        from orchestrator.harness import train  # imports torch: a broken install is this check's error

        _one_thread()
        progress = train.Progress()
        progress.phase = "import"
        module = importlib.import_module(experiment)
        progress.phase = "setup"
        build = getattr(module, "build", None)
        if callable(build):
            setattr(module, "build", _recording(build, built))  # train.run finds the same module object
        out = train.run(config, progress)
    except BaseException as exc:  # noqa: BLE001 - every failure is the answer
        if isinstance(exc, KeyboardInterrupt):
            raise
        traceback.print_exc()
        result = {"ok": False, "error": first_line(exc), "oom": _is_oom(exc),
                  "phase": progress.phase if progress is not None else "import",
                  "seconds": round(time.perf_counter() - started, 3)}
        if isinstance(getattr(exc, "field", None), str):  # workload.param_error: a parameter's value, not the code
            result.update(field=getattr(exc, "field"), error=first_line(exc, typed=False))
        result.update(locate(exc.__traceback__, experiment, built.get("workload")))
        return result
    loss = out["metrics"].get("loss")
    return {"ok": True, "device": out["device"], "loss": loss, "finite": out["finite"],
            "seconds": round(time.perf_counter() - started, 3)}


def script_smoke(call: Any, device: str, ok: Callable[[dict[str, Any]], None],
          log_path: str | None = None) -> dict[str, Any]:
    """The script run until its first optimizer step, before any trial (the smoke step of a
    module, for a script: the caller passes the smallest configuration, without memory caps).
    At that step ``ok(answer)`` is called and the process exits; so this returns only the answer
    of a script that never got there: it exited (an argparse error, say), or raised."""
    from orchestrator.harness import backend
    from orchestrator.harness.batches import counting_batches
    from orchestrator.harness.script import ScriptEnded, on_every_step, run_script
    from orchestrator.harness.scriptenv import refusing_spawn
    from orchestrator.harness.scriptfile import describe_failure

    started = time.perf_counter()
    backend.init_device(backend.resolve(device))
    drawn = _Drawn()
    counting_batches(drawn)  # this process ends at the first step: nothing to undo

    def stepped(*_: object) -> None:
        ok({"ok": True, "device": backend.resolve(device), "seconds": round(time.perf_counter() - started, 3),
            "batches": drawn.batches})
        sys.stdout.flush()
        sys.stderr.flush()
        from orchestrator.harness.subreaper import end_descendants

        end_descendants()  # what the script started ends with it, setsid or not
        os._exit(0)

    handle = on_every_step(stepped)
    refusing_spawn(lambda: 0)  # a step ends this process: any start_processes before it is refused
    try:
        code = run_script(call)
        exc: BaseException = ScriptEnded(code, 0, 0, "")
    except BaseException as raised:  # noqa: BLE001 - every failure is the answer
        if isinstance(raised, KeyboardInterrupt):
            raise
        exc = raised
    finally:
        handle.remove()
    from orchestrator.harness.oom import is_oom_exception

    what = str(exc) if getattr(exc, "ended", False) else first_line(exc)  # the harness's own words (ScriptEnded...)
    error = describe_failure(exc, call.path, log_path, what)  # its output's tail, before the traceback below
    if not isinstance(exc, ScriptEnded):
        traceback.print_exception(exc)
    return {"ok": False, "oom": is_oom_exception(exc), "error": error,
            "seconds": round(time.perf_counter() - started, 3)}


class _Drawn:
    """How many batches the script's DataLoaders yielded before its first step (``batches.Meter``):
    none, and a spec without ``samples_per_step`` cannot count its samples (``run._check_smoke``)."""

    batches = 0

    def on_pass(self, iterator: int, source: int, ended: bool) -> None:
        pass

    def on_batch(self, batch: object, expected: int | None = None, source: int = 0,
                 fetched: int | None = None) -> None:
        self.batches += 1


def _one_thread() -> None:
    """The step runs on one intra-op thread: a batch of 2 has no use for more, and on a small CPU
    each of its many small operators would wait for threads spinning for a core that the
    orchestrator's own start-up holds (0.04 CPU-s on one thread, 0.3-0.6 on two, 2 cores, a
    busy machine). Its result does not depend on the count: it checks the experiment's code."""
    import torch

    torch.set_num_threads(1)


T = TypeVar("T")


def _recording(build: Callable[..., T], built: dict[str, Any]) -> Callable[..., T]:
    @functools.wraps(build)
    def wrapper(*args: object, **kwargs: object) -> T:
        built["workload"] = build(*args, **kwargs)
        return built["workload"]

    return wrapper


def locate(tb: TracebackType | None, experiment: str, workload: object = None) -> dict[str, Any]:
    """Where a failure is in the experiment's own source: ``where`` (FILE:LINE, relative to the
    working directory when under it) and ``function``, or None for both; ``frame``: the innermost
    frame of all (torch's, often), for the log; ``note`` when ``where`` is the loss function's
    ``def`` line because no frame of the experiment's own was on the stack."""
    frames = traceback.extract_tb(tb)
    roots = source_roots(experiment)
    out: dict[str, Any] = {"where": None, "function": None,
                           "frame": f"{_show(frames[-1].filename)}:{frames[-1].lineno}" if frames else None}
    for frame in reversed(frames):
        if _within(frame.filename, roots):
            out.update(where=f"{_show(frame.filename)}:{frame.lineno}", function=frame.name)
            return out
    loss = getattr(workload, "loss", None)
    code = getattr(loss, "__code__", None)
    if code is not None and _within(code.co_filename, roots):  # raised by backward() or the optimizer
        name = getattr(loss, "__qualname__", code.co_name)
        out.update(where=f"{_show(code.co_filename)}:{code.co_firstlineno}", function=name,
                   note=f"raised outside the experiment's code, after its loss function {name} returned "
                        "(in backward(), the optimizer step, or the harness's check that the loss is a scalar)")
    return out


def source_roots(experiment: str) -> list[Path]:
    """The experiment's own source: its top-level package's folders, or its file."""
    top = experiment.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).resolve() for p in spec.submodule_search_locations]
    return [Path(spec.origin).resolve()] if spec.origin else []


def _within(filename: str, roots: list[Path]) -> bool:
    path = Path(filename).resolve()
    return any(path == root or root in path.parents for root in roots)


def _show(filename: str) -> str:
    path = Path(filename).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _is_oom(exc: BaseException) -> bool:
    try:
        from orchestrator.harness.oom import is_oom_exception

        return bool(is_oom_exception(exc))
    except Exception:  # noqa: BLE001 - torch itself may be what failed to import
        return False


def main(argv: list[str]) -> int:
    usage = ("usage: python -m orchestrator.harness.smoke "
             "'{\"experiment\": MODULE, \"params\": {...}, \"device\": DEVICE}'")
    try:
        request = json.loads(argv[1]) if len(argv) == 2 else None
        experiment, params, device = request["experiment"], request.get("params", {}), request.get("device", "auto")  # type: ignore[index, union-attr]  # None (a wrong argument count) raises TypeError: the usage below
        if not isinstance(experiment, str) or not isinstance(params, dict) or not isinstance(device, str):
            raise TypeError
    except (TypeError, KeyError, ValueError):
        print(usage, file=sys.stderr)
        return 2
    result = smoke_step(experiment, params, device)
    print("SMOKE " + json.dumps(result, default=str), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
