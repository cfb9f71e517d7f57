"""The harness's own knobs: their types, the rules their values obey, and where they apply.

Pure data and pure functions (no torch). The spec validator checks every fixed value and every
choice or range bound against ``Knob.check``; the planner uses ``Knob.devices`` to decide which
knobs a device reads. Parameters that are not knobs belong to the experiment.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

DEVICES = ("mps", "cuda", "cpu")
ALL = frozenset(DEVICES)
DTYPES = ("float32", "float16", "bfloat16")
OPTIMIZERS = ("adamw", "adamw_fused", "adamw_foreach", "adamw_forloop", "sgd")
ZERO_GRAD = ("set_to_none", "zero_fill")
CPU_ISAS = ("avx2", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx")
"""x86 instruction sets to cap PyTorch's CPU kernels at (oneDNN's names, oldest first): avx2 as on
most laptops and desktops before 2022, avx512_core_vnni as on a Cascade Lake Xeon, both without
bfloat16 instructions; avx512_core_bf16 (Cooper Lake, Zen 4) and avx512_core_amx (Sapphire Rapids)
with them. A cap above what the CPU has changes nothing."""


MEANT = {"gpu": "mps" if sys.platform == "darwin" else "cuda", "nvidia": "cuda", "apple": "mps", "metal": "mps",
         "fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
"""What a user who writes these means (a tour: ``device: gpu`` was asked "did you mean 'cpu'?"; on
a Mac its GPU is MPS)."""


def meant(value: object, options: tuple[str, ...]) -> str:
    """`` (did you mean 'cuda'?)`` for a value not among ``options``: its common other name, else
    the closest spelling; empty where neither is."""
    import difflib

    said = str(value).lower()  # CUDA, Float16: the value in another case
    other = said if said in options else MEANT.get(said)
    hint = [other] if other in options else difflib.get_close_matches(said, options, n=1, cutoff=0.6)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True, eq=False)
class Rule:
    """A knob's value rule: called with a value, ``None`` when it holds, else the rule it breaks.
    ``schema`` is the same rule in JSON Schema, which ``orchestrator.spec.schema`` publishes (a test
    checks the two agree on a table of values)."""

    holds: Callable[[Any], bool]
    broken: str
    schema: dict[str, Any]
    options: tuple[str, ...] = ()
    """A choice's values: a broken rule says which one a value not among them may mean (``meant``)."""

    def __call__(self, value: object) -> str | None:
        return None if self.holds(value) else self.broken + (meant(value, self.options) if self.options else "")


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str                          # "int" | "float" | "bool" | "str" | "choice"
    check: Rule                        # None when the value is fine, else the rule it breaks
    devices: frozenset[str] = ALL      # the devices that read this knob
    env: str | None = None             # environment variable the launcher sets, if any
    doc: str = ""


def _positive_int(what: str) -> Rule:
    return Rule(lambda v: is_int(v) and v > 0, f"{what} must be positive integers",
                {"type": "integer", "minimum": 1})


def _nonneg_int(what: str) -> Rule:
    return Rule(lambda v: is_int(v) and v >= 0, f"{what} must be integers >= 0",
                {"type": "integer", "minimum": 0})


def _one_of(options: tuple[str, ...], what: str) -> Rule:
    return Rule(lambda v: isinstance(v, str) and v in options, f"{what} must be one of {', '.join(options)}",
                {"enum": list(options)}, options)


def _bool(what: str) -> Rule:
    return Rule(lambda v: isinstance(v, bool), f"{what} must be true or false", {"type": "boolean"})


_RATIO = Rule(lambda v: is_number(v) and 0.0 <= v <= 2.0,
              "watermark ratios must be numbers from 0.0 to 2.0 (0.0 disables the cap)",
              {"type": "number", "minimum": 0, "maximum": 2})

_FRACTION = Rule(lambda v: is_number(v) and 0.0 < v <= 2.0,
                 "memory_fraction must be a number in (0, 2]: at most 1.0 on CUDA, "
                 "up to 2.0 on MPS (relative to the recommended working set)",
                 {"type": "number", "exclusiveMinimum": 0, "maximum": 2})


def _positive_number(what: str) -> Rule:
    return Rule(lambda v: is_number(v) and v > 0, f"{what} must be a positive number",
                {"type": "number", "exclusiveMinimum": 0})


_ALLOC_CONF = Rule(lambda v: isinstance(v, str) and all(":" in part for part in v.split(",")),
                   "cuda_alloc_conf must be comma-separated key:value pairs such as 'expandable_segments:True'",
                   {"type": "string", "pattern": "^[^,]*:[^,]*(,[^,]*:[^,]*)*$"})


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("device", "choice", _one_of(DEVICES, "device"),
         doc="where the trial runs; top-level `device:` or swept in `space:`"),
    Knob("batch_size", "int", _positive_int("batch sizes"), doc="micro-batch size"),
    Knob("grad_accum_steps", "int", _positive_int("gradient accumulation steps"),
         doc="micro-batches per optimizer step; the loss is scaled by 1/k"),
    Knob("effective_batch_size", "int", _positive_int("effective batch sizes"),
         doc="batch_size x grad_accum_steps held fixed; grad_accum_steps is derived"),
    Knob("seq_len", "int", _positive_int("sequence lengths"), doc="tokens per sample"),
    Knob("dtype", "choice", _one_of(DTYPES, "dtype"),
         doc="float32, or autocast to float16 (with GradScaler) or bfloat16"),
    Knob("activation_checkpointing", "bool", _bool("activation_checkpointing"),
         doc="recompute each block's activations in backward (use_reentrant=False)"),
    Knob("zero_grad", "choice", _one_of(ZERO_GRAD, "zero_grad"),
         doc="set_to_none frees gradients between steps; zero_fill keeps them"),
    Knob("empty_cache_every", "int", _nonneg_int("empty_cache_every values"), frozenset({"mps", "cuda"}),
         doc="call the backend's empty_cache every N optimizer steps; 0 = never (the CPU has no cache to empty)"),
    Knob("compile", "bool", _bool("compile"), doc="torch.compile the model (experimental on MPS)"),
    Knob("optimizer", "choice", _one_of(OPTIMIZERS, "optimizer"),
         doc="adamw picks fused where the device supports it, else foreach"),
    Knob("lr", "float", _positive_number("lr"), doc="learning rate"),
    Knob("seed", "int", _nonneg_int("seeds"), doc="seed for the model and the synthetic data"),
    Knob("mps_high_watermark_ratio", "float", _RATIO, frozenset({"mps"}),
         env="PYTORCH_MPS_HIGH_WATERMARK_RATIO",
         doc="hard cap = ratio x recommended working set; 0.0 = no cap"),
    Knob("mps_low_watermark_ratio", "float", _RATIO, frozenset({"mps"}),
         env="PYTORCH_MPS_LOW_WATERMARK_RATIO",
         doc="soft limit where the allocator starts reclaiming; must not exceed the high ratio"),
    Knob("mps_fallback", "bool", _bool("mps_fallback"), frozenset({"mps"}),
         env="PYTORCH_ENABLE_MPS_FALLBACK", doc="run ops MPS lacks on the CPU"),
    Knob("memory_fraction", "float", _FRACTION, frozenset({"mps", "cuda"}),
         doc="per-process memory cap (torch.{cuda,mps}.set_per_process_memory_fraction)"),
    Knob("cuda_alloc_conf", "str", _ALLOC_CONF, frozenset({"cuda"}), env="PYTORCH_CUDA_ALLOC_CONF",
         doc="CUDA caching-allocator settings"),
    Knob("cpu_memory_limit_gib", "float", _positive_number("cpu_memory_limit_gib"),
         frozenset({"cpu"}), doc="RLIMIT_DATA for the trial process: a real CPU out-of-memory"),
    Knob("cpu_isa", "choice", _one_of(CPU_ISAS, "cpu_isa"), frozenset({"cpu"}), env="ONEDNN_MAX_CPU_ISA",
         doc="cap the instruction set of PyTorch's CPU kernels, to train as on an older CPU"),
)}

# MPS refuses a low watermark above the high one (unless high is 0.0: no cap); its defaults on
# Apple Silicon (unified memory) are 1.7 for the high ratio and 1.4 for the low one.
MPS_DEFAULT_HIGH_WATERMARK = 1.7
MPS_DEFAULT_LOW_WATERMARK = 1.4


def applies(name: str, device: str) -> bool:
    """Whether ``device`` reads knob ``name`` (experiment parameters always apply)."""
    knob = KNOBS.get(name)
    return knob is None or device in knob.devices


def mps_watermarks(high: float | None, low: float | None) -> tuple[float | None, float | None]:
    """The (high, low) pair to export. MPS fails at its first allocation if low > high, and
    its default low is 1.4, so a high ratio given alone pulls low down to match."""
    if high is not None and low is None and high != 0.0 and high < MPS_DEFAULT_LOW_WATERMARK:
        low = high
    return high, low


ENV_KNOBS = ("mps_high_watermark_ratio", "mps_low_watermark_ratio", "mps_fallback", "cuda_alloc_conf", "cpu_isa")
"""The knobs ``trial_env`` turns into environment variables."""


def trial_env(params: dict[str, Any], device: str) -> dict[str, str]:
    """Environment variables a trial's process must start with (allocators read them once)."""
    env: dict[str, str] = {}
    if device == "mps":
        high, low = mps_watermarks(params.get("mps_high_watermark_ratio"),
                                   params.get("mps_low_watermark_ratio"))
        if high is not None:
            env["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = repr(float(high))
        if low is not None:
            env["PYTORCH_MPS_LOW_WATERMARK_RATIO"] = repr(float(low))
        if "mps_fallback" in params:
            env["PYTORCH_ENABLE_MPS_FALLBACK"] = "1" if params["mps_fallback"] else "0"
    if device == "cuda" and "cuda_alloc_conf" in params:
        env["PYTORCH_CUDA_ALLOC_CONF"] = str(params["cuda_alloc_conf"])
    if device == "cpu" and "cpu_isa" in params:
        isa = str(params["cpu_isa"])
        env["ONEDNN_MAX_CPU_ISA"] = isa.upper()   # matrix products and convolutions (oneDNN)
        env["ATEN_CPU_CAPABILITY"] = "avx2" if isa == "avx2" else "avx512"  # ATen's vectorized kernels
    return env
