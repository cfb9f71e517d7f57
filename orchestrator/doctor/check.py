"""``orchestrate doctor --check``: does each memory knob take effect here, and how fast is the device?

The same real trial (``orchestrator.harness.selftest``: each step needs one 256 MiB tensor) runs
through the sweep's own launcher without a cap (it must fit) and under each memory knob of the
device set so low that the tensor cannot fit (it must end ``oom``). Then the CPU against the
device: a matrix multiply and a short training step. At most two minutes. ``doctor`` holds the
facts these start from and the command; this module runs the trials and says what they showed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from orchestrator import tempfolder

if TYPE_CHECKING:
    from collections.abc import Callable

GIB = 1024 ** 3
CHECK_BUDGET_S = 120.0
DOCTOR_FOLDER = tempfolder.DOCTOR
CHECK_BATCH, CHECK_WIDTH = 65_536, 1024  # the selftest's batch: 65,536 x 1,024 float32 = 256 MiB
TRAIN = {"experiment": "experiments.mlp", "batch_size": 256, "hidden_size": 1024, "num_layers": 4}
TRAIN_STEPS = (2, 5, 1.0)  # warm-up steps, measured steps, measured seconds (at least)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder ``import orchestrator`` finds it in


def harness_json(args: list[str], prefix: str, timeout_s: float) -> dict[str, Any]:
    """``python ARGS`` started where ``orchestrator`` itself is imported from: ``-m`` puts the
    working directory first on ``sys.path``, and a stray ``timeit.py`` in the caller's folder would
    otherwise break ``import torch``. In a session of its own, which it kills if this process dies
    (``ORCHESTRATE_PARENT_PID``: ``child.watch_parent``); without the credentials only this process
    uses (``redact.child_env``)."""
    from orchestrator.protocol import PARENT_PID_ENV
    from orchestrator.redact import child_env

    try:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout_s,
                              cwd=PACKAGE_ROOT, start_new_session=True,
                              env={**child_env(), PARENT_PID_ENV: str(os.getpid())})
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout_s:.0f} s"}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(prefix)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}, no output"])[-1]
        return {"error": tail}
    return json.loads(line[len(prefix):])


# -- the self-test --------------------------------------------------------------------------------------

def knob_verdict(uncapped: str, capped: str) -> str:
    """honoured / NOT honoured / could not tell, from the two trials' statuses."""
    if uncapped not in ("ok", "swapped"):
        return "could not tell"
    return "honoured" if capped == "oom" else "NOT honoured"


def knob_trials(device: str, facts: dict[str, Any], uncapped: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(knob, value, cap in GiB) for each memory knob of ``device``, each set so that the
    selftest's batch cannot fit: a quarter of it on CUDA and MPS; on the CPU, half of it above
    the data segment the uncapped trial had before its batch (RLIMIT_DATA counts the whole segment)."""
    batch = CHECK_BATCH * CHECK_WIDTH * 4
    if device == "cuda":
        total = facts["cuda"]["devices"][0]["total_memory_bytes"]
        return [("memory_fraction", batch / 4 / total, batch / 4 / GIB)]
    if device == "mps":
        recommended = facts["mps"].get("recommended_max_memory_bytes")
        if not recommended:
            return []
        ratio = batch / 4 / recommended
        return [("memory_fraction", ratio, batch / 4 / GIB), ("mps_high_watermark_ratio", ratio, batch / 4 / GIB)]
    base = (uncapped.get("info") or {}).get("data_segment_bytes_at_build")
    if facts["os"]["system"] != "Linux" or not base:
        return []
    cap = (base + batch / 2) / GIB
    return [("cpu_memory_limit_gib", cap, cap)]


def run_trial(params: dict[str, Any], work: Path, name: str, timeout_s: float, experiment: str,
              steps: tuple[int, int, float]) -> dict[str, Any]:
    """One real trial through the sweep's launcher; its status, detail, metrics and info."""
    from orchestrator.spec import knobs
    from orchestrator.protocol import TrialConfig, TrialSteps
    from orchestrator.launch import launch_trial

    config = TrialConfig(experiment, params, TrialSteps(*steps), allow_swap=True)
    launched = launch_trial(config, work / name, knobs.trial_env(params, params["device"]), timeout_s)
    o = launched.outcome
    return {"status": str(o.status), "detail": o.detail, "metrics": o.metrics, "info": (o.result.info if o.result else None) or {},
            "duration_s": round(launched.duration_s, 1), "log": str(launched.log_path)}


def check(device: str, facts: dict[str, Any], budget_s: float = CHECK_BUDGET_S) -> dict[str, Any]:
    """The self-test: each memory knob of ``device`` (``check_knobs``), then the CPU against the
    device (``check_speed``), within ``budget_s``. The trial logs are kept only if a knob could not
    be shown to work (``work_dir``); an interrupted check keeps nothing (Ctrl-C: at once; a kill: the
    next orchestrate that runs a trial removes its folder, ``tempfolder``)."""
    started = time.monotonic()
    left = lambda: budget_s - (time.monotonic() - started)  # noqa: E731
    work = tempfolder.own(DOCTOR_FOLDER)
    out: dict[str, Any] = {"device": device, "work_dir": None}
    try:
        with _inside(PACKAGE_ROOT):  # trials start there: nothing is imported from the caller's folder
            out.update(check_knobs(device, facts, work, left))
            out["speed"] = check_speed(device, work, left)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    if out["honoured"]:
        shutil.rmtree(work, ignore_errors=True)
    else:  # kept for the user to read: no pid in its name, so no later run removes it
        kept = Path(tempfile.mkdtemp(prefix=f"{DOCTOR_FOLDER}kept-"))
        os.replace(work, kept)
        out["work_dir"] = str(kept)
    return out


def check_knobs(device: str, facts: dict[str, Any], work: Path, left: Callable[[], float]) -> dict[str, Any]:
    """The selftest trial without a cap, then once under each knob of ``device`` (``knob_trials``)."""
    base = {"device": device, "batch_size": CHECK_BATCH, "width": CHECK_WIDTH}
    selftest = ("orchestrator.harness.selftest", (1, 1, 0.0))
    uncapped = run_trial(base, work, "uncapped", min(60.0, left()), *selftest)
    knobs: list[dict[str, object]] = []
    for knob, value, cap_gib in knob_trials(device, facts, uncapped):
        if left() < 10:
            knobs.append({"knob": knob, "verdict": "could not tell", "why": "the two-minute budget was spent"})
            continue
        capped = run_trial({**base, knob: value}, work, knob, min(60.0, left()), *selftest)
        knobs.append({"knob": knob, "value": value, "cap_gib": cap_gib, "capped": capped,
                      "verdict": knob_verdict(uncapped["status"], capped["status"])})
    return {"batch_gib": CHECK_BATCH * CHECK_WIDTH * 4 / GIB, "uncapped": uncapped, "knobs": knobs,
            "honoured": bool(knobs) and all(k["verdict"] == "honoured" for k in knobs)}


def check_speed(device: str, work: Path, left: Callable[[], float]) -> dict[str, Any]:
    """A matrix multiply (one process: the CPU, then the device) and a short training step (one
    trial on the CPU, one on the device); on the CPU alone, the CPU's figures once."""
    speed: dict[str, Any] = {}
    if left() > 15:
        speed["matmul"] = harness_json(["-m", "orchestrator.harness.doctor", "--matmul", device], "MATMUL ",
                                 min(40.0, left()))
    train: list[dict[str, object]] = []
    for i, d in enumerate(dict.fromkeys(["cpu", device])):
        if left() < 10:
            break
        params = {"device": d, **{k: v for k, v in TRAIN.items() if k != "experiment"}}
        train.append({"device": d, **run_trial(params, work, f"train-{i}-{d}", min(45.0, left()),
                                               str(TRAIN["experiment"]), TRAIN_STEPS)})
    speed["train"] = train
    return speed


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Run the block with ``folder`` as the working directory (trial processes start there)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def render_check(c: dict[str, Any]) -> str:
    device, u = c["device"], c["uncapped"]
    fits = u["status"] in ("ok", "swapped")
    lines = [f"orchestrate doctor --check on {device}: does each memory knob take effect here? "
             f"(a trial whose step needs one {c['batch_gib']:.2f} GiB tensor, with and without a cap)",
             "  without a cap: " + (f"{u['status']}, peak {u['metrics'].get('peak_memory_gib', 0):.2f} GiB" if fits
                                    else f"{u['status']}: {u['detail']}")]
    if not c["knobs"]:
        lines.append(f"  no memory knob of {device} can be checked here" +
                     (" (macOS does not enforce RLIMIT_DATA: cpu_memory_limit_gib is not applied there)"
                      if device == "cpu" else ""))
    for k in c["knobs"]:
        if "capped" not in k:
            lines.append(f"  {k['knob']:<25s} {k['verdict']}: {k['why']}")
            continue
        cap = k["capped"]
        ended = f"ended {cap['status']}" + (f" ({_short(cap['detail'])})" if cap.get("detail") else "")
        cap_text = " GiB" if k["knob"] == "cpu_memory_limit_gib" else f" (a cap of {k['cap_gib']:.3f} GiB)"
        lines.append(f"  {k['knob']:<25s} {k['verdict']}: {k['knob']}={k['value']:.4g}{cap_text}: {ended}")
    lines += speed_lines(device, c["speed"])
    lines.append(f"Took {c['elapsed_s']:.0f} s. " + (
        "Every memory knob is honoured on this device." if c["honoured"] else
        f"Not every knob could be shown to work; trial logs are in {c['work_dir']}"))
    return "\n".join(lines)


def speed_lines(device: str, speed: dict[str, Any]) -> list[str]:
    """The CPU against the device: each one's figure and the device's speedup over the CPU."""
    alone = device == "cpu"
    lines = ["Speed on the CPU (no other device here to compare it with):" if alone else
             f"Speed, the CPU against {device} (speedup = {device} / cpu):"]
    mm = speed.get("matmul")
    if mm and "error" not in mm:
        text = f"  matrix multiply 2048 x 2048 float32   cpu {mm['cpu']:,.1f} GFLOP/s"
        if not alone:
            text += f"   {device} {mm['device']:,.1f} GFLOP/s   speedup {mm['device'] / mm['cpu']:.2f}x"
        lines.append(text)
    elif mm:
        lines.append(f"  matrix multiply: failed: {mm['error']}")
    runs = speed.get("train", [])
    what = (f"training step ({TRAIN['experiment']}, hidden {TRAIN['hidden_size']}, {TRAIN['num_layers']} layers, "
            f"batch {TRAIN['batch_size']})")
    if runs and all(r["status"] == "ok" for r in runs) and len(runs) == (1 if alone else 2):
        sps = [r["metrics"]["samples_per_s"] for r in runs]
        text = f"  {what}   cpu {sps[0]:,.1f} samples/s"
        if not alone:
            text += f"   {device} {sps[1]:,.1f} samples/s   speedup {sps[1] / sps[0]:.2f}x"
        lines.append(text)
    else:
        lines += [f"  {what} on {r['device']}: {r['status']}" + (f": {r['detail']}" if r.get("detail") else "")
                  for r in runs]
        if len(runs) < (1 if alone else 2):
            lines.append(f"  {what}: not (all) run, the two-minute budget was spent")
    return lines


def _short(text: str, width: int = 110) -> str:
    from orchestrator.clip import short_detail

    return short_detail(text, width)
