"""The summary says once when half precision trained much slower than float32 on a CPU, with the
likely reason from the CPU's flags (a table over real Optuna trials), and a GPU's or a close
result says nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import write_spec
from orchestrator.machine import cpu_flags
from orchestrator.report.precision import half_precision_note, slowdowns


def trial(number: int, dtype: str, rate: float | None, batch: int = 8, status: str = "ok", slot: str = "cpu",
          isa: str | None = None) -> Any:
    import optuna
    from optuna.distributions import CategoricalDistribution

    attrs = {"status": status, "slot": slot, "metrics": {"samples_per_s": rate} if rate else {}}
    capped = {"cpu_isa": isa} if isa else {}
    return optuna.trial.create_trial(
        params={"batch_size": batch, "dtype": dtype, **capped},
        distributions={"batch_size": CategoricalDistribution([8, 16]),
                       "dtype": CategoricalDistribution(["float32", "bfloat16", "float16"]),
                       **({"cpu_isa": CategoricalDistribution([isa])} if isa else {})},
        value=rate if status == "ok" else None, user_attrs=attrs,
        state=optuna.trial.TrialState.COMPLETE if status == "ok" else optuna.trial.TrialState.PRUNED)


SLOW_BF16 = [trial(0, "float32", 600.0), trial(1, "bfloat16", 100.0), trial(2, "float32", 900.0, 16),
             trial(3, "bfloat16", 150.0, 16)]
TAIL = "A GPU, or a CPU with native support, can rank them the other way."


@pytest.mark.parametrize("trials, flags, expected", [
    (SLOW_BF16, {"avx512f"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (median of 2 pairs of "
     "configurations equal but for dtype): this CPU has no native bfloat16 instructions (neither avx512_bf16 nor "
     f"amx_bf16 in its flags), so autocast emulates it. {TAIL}"),
    (SLOW_BF16, {"avx512f", "avx512_bf16"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (median of 2 "
     "pairs of configurations equal but for dtype): this CPU has avx512_bf16 but no amx_bf16 (AMX): bfloat16 matrix "
     f"products gain little over float32 there, while autocast converts at every op. {TAIL}"),
    (SLOW_BF16, {"avx512_bf16", "amx_bf16"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (median of 2 "
     "pairs of configurations equal but for dtype): this CPU has amx_bf16, so the likely cause is a model too small "
     f"for its matrix units to pay for autocast's conversions at every op. {TAIL}"),
    (SLOW_BF16[:2], None, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (one pair of configurations): "
     f"this CPU may have no native bfloat16 instructions (its flags could not be read), so autocast emulates it. {TAIL}"),
    ([trial(0, "float32", 300.0), trial(1, "bfloat16", 200.0), trial(2, "float16", 50.0)], {"avx512_bf16"},
     "Note: float16 trained 6.0x slower than float32 on this CPU (one pair of configurations): this CPU has no native "
     f"float16 instructions (neither avx512_fp16 nor amx_fp16 in its flags), so autocast emulates it. {TAIL}"),
    # a cpu_isa cap without the precision's instructions is the reason, whatever the CPU has
    ([trial(0, "float32", 600.0, isa="avx2"), trial(1, "bfloat16", 100.0, isa="avx2")], {"avx512_bf16", "amx_bf16"},
     "Note: bfloat16 trained 6.0x slower than float32 on this CPU with cpu_isa avx2 (one pair of configurations): the "
     f"trials capped PyTorch's CPU kernels at avx2 (cpu_isa), which has no native bfloat16 instructions, so autocast "
     f"emulates it. {TAIL}"),
    # cpu_isa swept: each cap's pairs apart, the slow one named (not a median across caps)
    ([trial(0, "float32", 650.0, isa="avx2"), trial(1, "bfloat16", 95.0, isa="avx2"),
      trial(2, "float32", 750.0, isa="avx512_core_bf16"), trial(3, "bfloat16", 780.0, isa="avx512_core_bf16")],
     {"avx512_bf16"}, "Note: bfloat16 trained 6.8x slower than float32 on this CPU with cpu_isa avx2 (one pair of "
     "configurations): the trials capped PyTorch's CPU kernels at avx2 (cpu_isa), which has no native bfloat16 "
     f"instructions, so autocast emulates it. {TAIL}"),
    ([trial(0, "float32", 600.0, isa="avx512_core_amx"), trial(1, "bfloat16", 100.0, isa="avx512_core_amx")],
     {"avx512_bf16", "amx_bf16"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU with cpu_isa "
     "avx512_core_amx (one pair of configurations): this CPU has amx_bf16, so the likely cause is a model too small for its matrix units to pay "
     f"for autocast's conversions at every op. {TAIL}"),
    # an Arm CPU: its own flag names (Features), not the x86 ones
    (SLOW_BF16[:2], {"fp", "asimd", "bf16"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (one pair of "
     "configurations): this CPU has Arm's bf16 instructions, so the likely cause is a model too small for them to pay "
     f"for autocast's conversions at every op. {TAIL}"),
    (SLOW_BF16[:2], {"fp", "asimd"}, "Note: bfloat16 trained 6.0x slower than float32 on this CPU (one pair of "
     f"configurations): this Arm CPU has no native bfloat16 instructions (no bf16 in its flags), so autocast emulates it. {TAIL}"),
    ([trial(0, "float32", 300.0), trial(1, "bfloat16", 160.0)], set(), None),  # 1.9x: not "much"
    ([trial(0, "float32", 300.0), trial(1, "bfloat16", 400.0)], set(), None),  # faster
    ([trial(0, "float32", 600.0, slot="cuda:0"), trial(1, "bfloat16", 100.0, slot="cuda:0")], set(), None),  # a GPU
    ([trial(0, "float32", 600.0), trial(1, "bfloat16", None, status="oom")], set(), None),  # nothing to pair with
    ([trial(0, "float32", 600.0, 8), trial(1, "bfloat16", 100.0, 16)], set(), None),  # not equal but for dtype
    # a tour's sweep on a busy CPU: one pair slower 3.07x, one faster (0.99); "2.0x slower" was their mean
    ([trial(0, "float32", 24.7), trial(1, "bfloat16", 8.05), trial(2, "float32", 44.2, 16),
      trial(3, "bfloat16", 44.8, 16)], {"avx512_bf16"}, None),
    # both slower: the geometric mean of the two (2.0 and 8.0 -> 4.0x, not 5.0x)
    ([trial(0, "float32", 200.0), trial(1, "bfloat16", 100.0), trial(2, "float32", 800.0, 16),
      trial(3, "bfloat16", 100.0, 16)], {"avx512f"}, "Note: bfloat16 trained 4.0x slower than float32 on this CPU "
     "(median of 2 pairs of configurations equal but for dtype): this CPU has no native bfloat16 instructions "
     f"(neither avx512_bf16 nor amx_bf16 in its flags), so autocast emulates it. {TAIL}"),
])
def test_half_precision_note(trials: list[Any], flags: set[str] | None, expected: str | None) -> None:
    assert half_precision_note(trials, flags) == expected


def test_a_fixed_cpu_isa_cap_is_the_reason() -> None:
    """``cpu_isa`` fixed in the spec is not among the trials' parameters: the caller passes it."""
    note = half_precision_note(SLOW_BF16, {"avx512_bf16"}, "avx2")
    assert note is not None and "this CPU with cpu_isa avx2" in note and "capped PyTorch's CPU kernels at avx2" in note
    assert "capped" not in (half_precision_note(SLOW_BF16, {"avx512_bf16"}, "avx512_core_bf16") or "")


def test_a_cap_is_not_the_reason_where_the_cpu_lacks_the_instructions_anyway() -> None:
    """An experiment tour: float16 as slow under cpu_isa avx2 as under avx512_core, on a CPU without
    native float16, was blamed on the avx2 cap."""
    swept = [trial(0, "float32", 600.0, isa="avx2"), trial(1, "float16", 180.0, isa="avx2"),
             trial(2, "float32", 620.0, isa="avx512_core"), trial(3, "float16", 160.0, isa="avx512_core")]
    note = half_precision_note(swept, {"avx512f", "avx512_bf16"})
    assert note is not None and "capped" not in note, note
    assert "this CPU has no native float16 instructions (neither avx512_fp16 nor amx_fp16 in its flags)" in note


def test_the_pairs_are_configurations_equal_but_for_dtype() -> None:
    assert slowdowns(SLOW_BF16) == {"bfloat16": [6.0, 6.0]}


def test_cpu_flags_read_proc_cpuinfo(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nflags\t\t: other\n")
    assert cpu_flags(str(tmp_path / "cpuinfo")) == {"fpu", "avx512f", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "absent")) is None


def test_the_summary_says_it_once(tmp_path: Path) -> None:
    from orchestrator.report.closing import summary
    from orchestrator.spec.load import load_spec
    from orchestrator.urls import Origins

    spec = load_spec(write_spec(tmp_path, """
        name: halves
        experiment: experiments.bert
        space:
          batch_size: [8, 16]
          dtype: [float32, bfloat16]
        """))
    lines = summary(spec, SLOW_BF16, SLOW_BF16[2:3], 4, 10.0, 12.0, None, False, Origins())
    notes = [ln for ln in lines if ln.startswith("Note: bfloat16 trained 6.0x slower than float32 on this CPU")]
    assert len(notes) == 1 and lines.index(notes[0]) == next(i for i, ln in enumerate(lines) if ln.startswith("Best:")) + 1
    assert not [ln for ln in summary(spec, SLOW_BF16[:1], SLOW_BF16[:1], 4, 1.0, 1.0, None, False, Origins())
                if ln.startswith("Note:")]
