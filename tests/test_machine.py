"""What the parent reads off the machine for the search, without torch: the CPU's half precisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.machine import cpu_flags, native_half


@pytest.mark.parametrize("flags, cap, expected", [
    ({"avx2", "avx512f", "avx512_bf16"}, None, {"bfloat16"}),          # AMD Zen 4, Cooper Lake
    ({"avx2", "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}, None, {"bfloat16", "float16"}),
    ({"avx2", "avx512f", "avx512_vnni"}, None, set()),                 # Cascade Lake: emulated
    ({"fp", "asimd", "bf16"}, None, {"bfloat16"}),                     # Arm (Graviton 3): Features line
    ({"avx2", "avx512_bf16", "amx_bf16"}, "avx2", set()),               # capped below them (cpu_isa)
    ({"avx2", "avx512_bf16", "amx_bf16"}, "avx512_core_vnni", set()),
    ({"avx2", "avx512_bf16", "amx_bf16"}, "avx512_core_bf16", {"bfloat16"}),
    ({"avx2", "avx512_bf16"}, "avx512_core_amx", {"bfloat16"}),        # a cap above what it has
])
def test_native_half(flags: set[str], cap: str | None, expected: set[str]) -> None:
    assert native_half(flags, cap) == frozenset(expected)


def test_unknown_flags_say_nothing() -> None:
    assert native_half(None) is None and native_half(None, "avx2") is None


def test_cpu_flags_read_the_first_cpu(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n"
                                      "flags\t\t: fpu\n")
    assert cpu_flags(str(tmp_path / "cpuinfo")) == {"fpu", "avx2", "avx512_bf16"}
