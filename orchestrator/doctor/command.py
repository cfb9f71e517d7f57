"""``orchestrate doctor``: what torch sees here, in a few lines; ``--check``: do the memory knobs work here?

``doctor`` runs ``python -m orchestrator.harness.doctor`` (one ``import torch``) for the facts and
derives the rest here, without torch: MPS's caps in GiB from the ``PYTORCH_MPS_*`` variables (their
parsing as torch 2.13 does it: docs/mac.md and docs/knobs.md) and the warnings.

``doctor --check`` proves, on the resolved device, that each memory knob takes effect, and times
the CPU against the device (``doctor/check.py``: real trials through the sweep's own launcher, at most
two minutes). This module holds the facts, their text, and the command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from orchestrator import exits
from orchestrator.doctor.check import GIB, check, harness_json, render_check
from orchestrator.errors import UsageParser

MPS_HIGH_DEFAULT, MPS_LOW_DEFAULT = 1.7, 1.4
EXIT_NOT_HONOURED = exits.NOT_HONOURED


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
    caps: dict[str, Any] = {"high_ratio": high, "low_ratio": low, "high_source": "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
            if "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in env else "default",
            "low_source": "PYTORCH_MPS_LOW_WATERMARK_RATIO" if "PYTORCH_MPS_LOW_WATERMARK_RATIO" in env else "default",
            "recommended_gib": recommended / GIB if recommended else None, "ram_gib": ram / GIB if ram else None,
            "high_cap_gib": gib(high), "low_cap_gib": gib(low), "above_ram": False, "problems": problems}
    if high == 0.0:
        problems.append("the high watermark is 0.0: no cap at all; a batch too large swaps, and macOS may "
                        "kill the process (SIGKILL) instead of PyTorch raising out of memory")
    elif caps["high_cap_gib"] is not None and ram and recommended and caps["high_cap_gib"] > ram / GIB:
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


# -- the facts, from the harness's child ----------------------------------------------------------

def collect_facts(timeout_s: float = 120.0) -> dict[str, Any]:
    """The harness's facts (one subprocess, one ``import torch``); ``{"error": ...}`` if it failed."""
    return harness_json(["-m", "orchestrator.harness.doctor"], "DOCTOR ", timeout_s)


def _gib(n: int | float | None, digits: int = 2) -> str:
    return "?" if n is None else f"{n / GIB:,.{digits}f} GiB"


def render_facts(facts: dict[str, Any], caps: dict[str, Any] | None, warnings: list[str], device: str,
                 asked: str = "auto") -> str:
    """The facts as text; ``device``: the one ``--check`` uses, ``asked``: as ``--device`` gave it."""
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
    if t.get("mps_built") or fb is not None:  # a build without MPS: the variable changes nothing
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
    why = unusable(facts, device)
    lines.append(f"  device       {'auto -> ' if asked == 'auto' else ''}{device}"
                 + ("" if asked == "auto" else " (from --device)") + (f": cannot be used: {why}" if why else ""))
    if warnings:
        lines += ["Warnings:"] + [f"  - {w}" for w in warnings]
    return "\n".join(lines)


def unusable(facts: dict[str, Any], device: str) -> str | None:
    """Why torch cannot use ``device`` here (``why_not`` in the facts), else None."""
    found = facts.get(device, {})
    if device == "cpu" or found.get("available"):
        return None
    return str(found.get("why_not") or f"torch sees no {device.upper()} device here")


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
    from orchestrator.bytecode import uncompiled

    if slow := uncompiled():
        warnings.append(slow)
    device = resolve_device(facts) if args.device == "auto" else args.device
    doc: dict[str, Any] = {"device": device, "facts": facts, "mps_caps": caps, "warnings": warnings}
    from orchestrator.invocation import command

    code = EXIT_NOT_HONOURED if args.check and not ok else exits.OK  # no torch, no self-test
    if args.check and ok and unusable(facts, device):
        print(f"orchestrate doctor: --check on {device}: torch sees no {device.upper()} device here "
              f"({facts[device].get('why_not')}); run `{command('doctor')}` to see what it does see", file=sys.stderr)
        return exits.USAGE
    if args.check and ok:
        doc["check"] = check(device, facts)
        code = 0 if doc["check"]["honoured"] else EXIT_NOT_HONOURED
    if args.format == "json":
        print(json.dumps(doc, indent=1, default=str))
        return code
    print(render_facts(facts, caps, warnings, device, args.device))
    if "check" in doc:
        print()
        print(render_check(doc["check"]))
    elif ok and not unusable(facts, device):  # a --check that would refuse is not offered
        given = () if args.device == "auto" else ("--device", args.device)  # as the user gave it: it pastes
        print(f"Next: {command('doctor', '--check', *given)}   (at most two minutes: proves the memory knobs take "
              f"effect on {device})")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
