"""``orchestrate doctor``: what torch sees here, in a few lines; ``--check``: do the memory knobs work here?

``doctor`` runs ``python -m orchestrator.harness.doctor`` (one ``import torch``) for the facts and
derives the rest here, without torch: MPS's caps in GiB from the ``PYTORCH_MPS_*`` variables (their
parsing as torch 2.13 does it: ../shared/notes/mps_cuda_cpu_memory.md, section 1) and the warnings.

``doctor --check`` proves, on the resolved device, that each memory knob takes effect: the same
real trial (``orchestrator.harness.selftest``: each step needs one 256 MiB tensor) runs without a
cap (it must fit) and under each knob set so low that the tensor cannot fit (it must end ``oom``),
through the sweep's own launcher. Then the CPU against the device: a matrix multiply and a short
training step. At most two minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from orchestrator.errors import UsageParser

GIB = 1024 ** 3
MPS_HIGH_DEFAULT, MPS_LOW_DEFAULT = 1.7, 1.4
CHECK_BUDGET_S = 120.0
CHECK_BATCH, CHECK_WIDTH = 65_536, 1024  # the selftest's batch: 65,536 x 1,024 float32 = 256 MiB
TRAIN = {"experiment": "experiments.mlp", "batch_size": 256, "hidden_size": 1024, "num_layers": 4}
TRAIN_STEPS = (2, 5, 1.0)  # warm-up steps, measured steps, measured seconds (at least)
EXIT_NOT_HONOURED = 4
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder ``import orchestrator`` finds it in


# -- facts and what follows from them (pure) ------------------------------------------------------

def strtod(text: str) -> float:
    """C's ``strtod`` as MPS applies it to a watermark variable: the leading number, else 0.0."""
    m = re.match(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text)
    return float(m.group()) if m else 0.0


def mps_caps(env: dict[str, str], recommended: int | None, ram: int | None) -> dict[str, Any]:
    """MPS's high and low watermarks as torch 2.13 reads them (``strtod`` once, when the allocator
    is built), in GiB of the recommended working set, with the problems each setting has."""
    problems: list[str] = []
    ratios: dict[str, float] = {}
    for name, var, default in (("high", "PYTORCH_MPS_HIGH_WATERMARK_RATIO", MPS_HIGH_DEFAULT),
                               ("low", "PYTORCH_MPS_LOW_WATERMARK_RATIO", MPS_LOW_DEFAULT)):
        raw = env.get(var)
        ratios[name] = default if raw is None else strtod(raw)
        if raw is not None and not re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", raw):
            problems.append(f"{var}={raw!r} is not a number: MPS reads it as {ratios[name]:g}"
                            + (" (no cap at all)" if name == "high" and ratios[name] == 0 else ""))
    high, low = ratios["high"], ratios["low"]
    for name, value in ratios.items():
        if not 0.0 <= value <= 2.0:
            problems.append(f"the {name} watermark ratio {value:g} is outside 0.0-2.0: MPS raises "
                            f"'invalid {name} watermark ratio' at its first allocation")
    if 0.0 <= high <= 2.0 and 0.0 <= low <= 2.0 and low > (high if high else 2.0):
        problems.append(f"the low watermark {low:g} is above the high one {high:g}: MPS raises 'invalid low "
                        "watermark ratio' at its first allocation; set PYTORCH_MPS_LOW_WATERMARK_RATIO too "
                        f"(e.g. {high:g})")
    gib = (lambda r: r * recommended / GIB if recommended and r else None)
    caps = {"high_ratio": high, "low_ratio": low, "high_source": "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
            if "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in env else "default",
            "low_source": "PYTORCH_MPS_LOW_WATERMARK_RATIO" if "PYTORCH_MPS_LOW_WATERMARK_RATIO" in env else "default",
            "recommended_gib": recommended / GIB if recommended else None, "ram_gib": ram / GIB if ram else None,
            "high_cap_gib": gib(high), "low_cap_gib": gib(low), "above_ram": False, "problems": problems}
    if high == 0.0:
        problems.append("the high watermark is 0.0: no cap at all; a batch too large swaps, and macOS may "
                        "kill the process (SIGKILL) instead of PyTorch raising out of memory")
    elif caps["high_cap_gib"] is not None and ram and caps["high_cap_gib"] > ram / GIB:
        caps["above_ram"] = True
        keep = ram / recommended
        problems.append(f"the high watermark cap ({caps['high_cap_gib']:.2f} GiB = {high:g} x "
                        f"{recommended / GIB:.2f} GiB recommended) exceeds physical RAM ({ram / GIB:.2f} GiB): "
                        "macOS swaps before PyTorch raises out of memory, so a batch too large runs slowly "
                        f"instead of failing. A ratio of at most {keep:.2f} keeps the cap inside RAM "
                        f"(PYTORCH_MPS_HIGH_WATERMARK_RATIO={min(keep, 1.0):.2f}, or sweep mps_high_watermark_ratio)")
    return caps


def resolve_device(facts: dict[str, Any]) -> str:
    """``auto`` as the harness resolves it: mps if available, else cuda, else cpu."""
    if facts.get("mps", {}).get("available"):
        return "mps"
    if facts.get("cuda", {}).get("available"):
        return "cuda"
    return "cpu"


def rosetta(facts: dict[str, Any]) -> bool:
    """An x86_64 Python under Rosetta on an arm64 Mac (``sysctl.proc_translated`` = 1, or an x86_64
    interpreter on hardware that says ``hw.optional.arm64`` = 1)."""
    py = facts.get("python", {})
    return bool(py.get("rosetta")) or (facts.get("os", {}).get("system") == "Darwin"
                                       and py.get("machine") == "x86_64" and bool(py.get("arm64_hardware")))


def warnings_for(facts: dict[str, Any], caps: dict[str, Any] | None) -> list[str]:
    out = []
    if rosetta(facts):
        out.append("this Python is x86_64 running under Rosetta on an arm64 Mac: MPS cannot be used from it. "
                   "Install an arm64 Python (python3 -c 'import platform; print(platform.machine())' must print "
                   "arm64) and torch for it")
    mps = facts.get("mps", {})
    if mps.get("allocator_error"):
        out.append(f"the MPS allocator refused its settings: {mps['allocator_error']}")
    if caps:
        out += caps["problems"]
    env = facts.get("env", {})
    if "PYTORCH_MPS_PREFER_METAL" in env:
        out.append(f"PYTORCH_MPS_PREFER_METAL={env['PYTORCH_MPS_PREFER_METAL']!r} is set: torch checks it by "
                   "presence only, so any value (\"0\" too) forces Metal matmul kernels; unset it to turn it off")
    fb = env.get("PYTORCH_ENABLE_MPS_FALLBACK")
    if fb is not None and not re.fullmatch(r"\s*[01]\s*", fb):
        out.append(f"PYTORCH_ENABLE_MPS_FALLBACK={fb!r}: use 0 or 1 (torch parses it with std::stoi at import)")
    cuda = facts.get("cuda", {})
    if cuda.get("built") and not cuda.get("available"):
        out.append(f"this torch is built with CUDA {cuda.get('version')} but sees no GPU: {cuda.get('why_not')}")
    return out


# -- running the child ----------------------------------------------------------------------------

def collect_facts(timeout_s: float = 120.0) -> dict[str, Any]:
    """The harness's facts (one subprocess, one ``import torch``); ``{"error": ...}`` if it failed."""
    return _child(["-m", "orchestrator.harness.doctor"], "DOCTOR ", timeout_s)


def _child(args: list[str], prefix: str, timeout_s: float) -> dict[str, Any]:
    """``python ARGS`` started where ``orchestrator`` itself is imported from: ``-m`` puts the
    working directory first on ``sys.path``, and a stray ``timeit.py`` in the caller's folder would
    otherwise break ``import torch``."""
    try:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout_s,
                              cwd=PACKAGE_ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout_s:.0f} s"}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(prefix)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}, no output"])[-1]
        return {"error": tail}
    return json.loads(line[len(prefix):])


def _gib(n: int | float | None, digits: int = 2) -> str:
    return "?" if n is None else f"{n / GIB:,.{digits}f} GiB"


def render_facts(facts: dict[str, Any], caps: dict[str, Any] | None, warnings: list[str], device: str) -> str:
    if "error" in facts:
        return (f"orchestrate doctor: the facts could not be read: {facts['error']}\n"
                f"  python       {sys.version.split()[0]} ({sys.executable}); "
                f"`{sys.executable} -c 'import torch'` shows why")
    t, py, cpu, mps, cuda = (facts[k] for k in ("torch", "python", "cpu", "mps", "cuda"))
    builds = [f"CUDA {t['cuda']}" if t.get("cuda") else "", f"ROCm {t['hip']}" if t.get("hip") else "",
              "MPS" if t.get("mps_built") else ""]
    mac_model = facts["os"].get("mac_model")
    build = ", ".join(b for b in builds if b) or "CPU only"
    arch = py["machine"] + (" under Rosetta" if rosetta(facts) else "")
    lines = [f"orchestrate doctor: {facts['elapsed_s']:.1f} s (import torch {t['import_s']:.1f} s)",
             f"  torch        {t['version']} (git {str(t.get('git'))[:8]}), build: {build}",
             f"  python       {py['version']} {arch} ({py['executable']})",
             f"  os           {facts['os']['platform']}" + (f", {mac_model}" if mac_model else ""),
             f"  cpu          {cpu['model']}, {_cores(cpu)}, {_gib(cpu.get('ram_bytes'), 1)} RAM; "
             f"torch uses {t['threads']} threads"]
    lines += _mps_lines(mps, caps)
    if cuda["available"]:
        lines += [f"  cuda:{d['index']:<7d} {d['name']}, {_gib(d['total_memory_bytes'], 1)}, "
                  f"compute {d['capability']} (CUDA {cuda['version']})" for d in cuda["devices"]]
    else:
        state = "built, not available" if cuda["built"] else "not built"
        lines.append(f"  cuda         {state}: {cuda.get('why_not')}")
    fb = facts["env"].get("PYTORCH_ENABLE_MPS_FALLBACK")
    on = fb is not None and fb.strip() not in ("0", "")
    lines.append("  mps fallback PYTORCH_ENABLE_MPS_FALLBACK" + (
        f"={fb}: ops MPS lacks run on the CPU (slowly; a sweep lists them per trial)" if on else
        (f"={fb}" if fb is not None else " unset") + ": an op MPS lacks raises NotImplementedError"))
    sw = facts["swap"]
    lines.append("  swap         unknown on this OS" if sw.get("total_bytes") is None else
                 f"  swap         {_gib(sw['used_bytes'])} in use of {_gib(sw['total_bytes'])}"
                 + (" (none configured)" if sw["total_bytes"] == 0 else ""))
    other = {k: v for k, v in facts["env"].items() if k != "PYTORCH_ENABLE_MPS_FALLBACK"}
    if other:
        lines.append("  env          " + " ".join(f"{k}={v}" for k, v in other.items()))
    lines.append(f"  device       auto -> {device}")
    if warnings:
        lines += ["Warnings:"] + [f"  - {w}" for w in warnings]
    return "\n".join(lines)


def _cores(cpu: dict[str, Any]) -> str:
    text = f"{cpu.get('physical_cores') or '?'} cores ({cpu.get('logical_cores')} logical"
    if cpu.get("performance_cores"):
        text += f"; {cpu['performance_cores']} performance + {cpu.get('efficiency_cores') or 0} efficiency"
    if cpu.get("usable_cores") and cpu["usable_cores"] != cpu.get("logical_cores"):
        text += f"; {cpu['usable_cores']} usable by this process"
    return text + ")"


def _mps_lines(mps: dict[str, Any], caps: dict[str, Any] | None) -> list[str]:
    if not mps["available"]:
        return [f"  mps          {'built, not available' if mps['built'] else 'not built'}: {mps.get('why_not')}"]
    name = f": {mps['name']}" if mps.get("name") else ""
    name += f" ({mps['gpu_cores']} GPU cores)" if name and mps.get("gpu_cores") else ""
    lines = [f"  mps          built, available{name}"]
    if not caps:
        return lines
    lines.append(f"  mps memory   recommended working set {caps['recommended_gib']:.2f} GiB of "
                 f"{caps['ram_gib'] or 0:.2f} GiB RAM" if caps["recommended_gib"] else
                 "  mps memory   recommended working set unknown")
    for which in ("high", "low"):
        ratio, cap = caps[f"{which}_ratio"], caps[f"{which}_cap_gib"]
        text = f"{cap:.2f} GiB" if cap is not None else ("no cap" if ratio == 0 else "?")
        above = "  ABOVE physical RAM: it swaps before it fails" if which == "high" and caps["above_ram"] else ""
        lines.append(f"               {which} watermark {ratio:g} ({caps[f'{which}_source']}) -> {text}{above}")
    return lines


# -- --check --------------------------------------------------------------------------------------

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
    from orchestrator import knobs
    from orchestrator.launch import launch_trial

    config = {"experiment": experiment, "params": params, "not_applied": {}, "allow_swap": True,
              "trial": {"warmup_steps": steps[0], "measure_steps": steps[1], "min_measure_s": steps[2]}}
    launched = launch_trial(config, work / name, knobs.trial_env(params, params["device"]), timeout_s)
    o = launched.outcome
    return {"status": o.status, "detail": o.detail, "metrics": o.metrics, "info": o.result.get("info", {}),
            "duration_s": round(launched.duration_s, 1), "log": str(launched.log_path)}


def check(device: str, facts: dict[str, Any], budget_s: float = CHECK_BUDGET_S) -> dict[str, Any]:
    """The self-test: each memory knob of ``device`` (``check_knobs``), then the CPU against the
    device (``check_speed``), within ``budget_s``. The trial logs are kept only if a knob could not
    be shown to work (``work_dir``)."""
    started = time.monotonic()
    left = lambda: budget_s - (time.monotonic() - started)  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="orchestrate-doctor-"))
    out: dict[str, Any] = {"device": device, "work_dir": str(work)}
    with _inside(PACKAGE_ROOT):  # trials start there: nothing is imported from the caller's folder
        out.update(check_knobs(device, facts, work, left))
        out["speed"] = check_speed(device, work, left)
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    if out["honoured"]:
        shutil.rmtree(work, ignore_errors=True)
        out["work_dir"] = None
    return out


def check_knobs(device: str, facts: dict[str, Any], work: Path, left: Any) -> dict[str, Any]:
    """The selftest trial without a cap, then once under each knob of ``device`` (``knob_trials``)."""
    base = {"device": device, "batch_size": CHECK_BATCH, "width": CHECK_WIDTH}
    selftest = ("orchestrator.harness.selftest", (1, 1, 0.0))
    uncapped = run_trial(base, work, "uncapped", min(60.0, left()), *selftest)
    knobs = []
    for knob, value, cap_gib in knob_trials(device, facts, uncapped):
        if left() < 10:
            knobs.append({"knob": knob, "verdict": "could not tell", "why": "the two-minute budget was spent"})
            continue
        capped = run_trial({**base, knob: value}, work, knob, min(60.0, left()), *selftest)
        knobs.append({"knob": knob, "value": value, "cap_gib": cap_gib, "capped": capped,
                      "verdict": knob_verdict(uncapped["status"], capped["status"])})
    return {"batch_gib": CHECK_BATCH * CHECK_WIDTH * 4 / GIB, "uncapped": uncapped, "knobs": knobs,
            "honoured": bool(knobs) and all(k["verdict"] == "honoured" for k in knobs)}


def check_speed(device: str, work: Path, left: Any) -> dict[str, Any]:
    """A matrix multiply (one process: the CPU, then the device) and a short training step (one
    trial on the CPU, one on the device); on the CPU alone, the CPU's figures once."""
    speed: dict[str, Any] = {}
    if left() > 15:
        speed["matmul"] = _child(["-m", "orchestrator.harness.doctor", "--matmul", device], "MATMUL ",
                                 min(40.0, left()))
    train = []
    for i, d in enumerate(dict.fromkeys(["cpu", device])):
        if left() < 10:
            break
        params = {"device": d, **{k: v for k, v in TRAIN.items() if k != "experiment"}}
        train.append({"device": d, **run_trial(params, work, f"train-{i}-{d}", min(45.0, left()),
                                               TRAIN["experiment"], TRAIN_STEPS)})
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
    text = re.sub(r"\[enforce fail at [^\]]*\] [^.]*\. ", "", text)
    return text if len(text) <= width else text[:width - 3] + "..."


# -- the command ----------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="orchestrate doctor", description=(
        "What torch sees on this machine: build, Python architecture (Rosetta), MPS and CUDA, CPU and "
        "RAM, MPS's memory caps, swap. --check runs real trials (at most two minutes) to prove the "
        "memory knobs take effect on the device, and times the CPU against it."),
        epilog=f"Exit codes: 0 reported (with --check: every memory knob honoured), 2 usage, "
               f"{EXIT_NOT_HONOURED} --check could not show every knob honoured (the trial logs are kept).")
    p.add_argument("--check", action="store_true",
                   help="run the self-test of the memory knobs and the speed comparison")
    p.add_argument("--device", choices=("auto", "mps", "cuda", "cpu"), default="auto",
                   help="device for --check (default: auto = mps, else cuda, else cpu)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv[1:] if argv and argv[0] == "doctor" else argv)
    facts = collect_facts()
    ok = "error" not in facts
    mps = facts.get("mps", {}) if ok else {}
    caps = mps_caps(facts["env"], mps.get("recommended_max_memory_bytes"), facts["cpu"].get("ram_bytes")) \
        if ok and mps.get("built") else None
    warnings = warnings_for(facts, caps) if ok else []
    device = resolve_device(facts) if args.device == "auto" else args.device
    doc: dict[str, Any] = {"device": device, "facts": facts, "mps_caps": caps, "warnings": warnings}
    code = EXIT_NOT_HONOURED if args.check and not ok else 0  # no torch, no self-test
    if args.check and ok and device != "cpu" and not facts[device]["available"]:
        print(f"orchestrate doctor: --check on {device}: torch sees no {device.upper()} device here "
              f"({facts[device].get('why_not')}); run `orchestrate doctor` to see what it does see", file=sys.stderr)
        return 2
    if args.check and ok:
        doc["check"] = check(device, facts)
        code = 0 if doc["check"]["honoured"] else EXIT_NOT_HONOURED
    if args.format == "json":
        print(json.dumps(doc, indent=1, default=str))
        return code
    print(render_facts(facts, caps, warnings, device))
    if "check" in doc:
        print()
        print(render_check(doc["check"]))
    elif ok:
        print(f"Next: orchestrate doctor --check   (at most two minutes: proves the memory knobs take effect "
              f"on {device})")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
