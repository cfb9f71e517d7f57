"""Will it fit? Proofs by dominance, the boundary per batch column, and the memory line."""

from __future__ import annotations

import pytest

from orchestrator.search.dominance import DEFAULT_ORDER
from orchestrator.search.feasibility import Observed, fit_probabilities, scaling_dimension
from orchestrator.search.space import config_key

BATCHES = (16, 32, 64, 128, 256)
DTYPES = ("float32", "bfloat16")
CONFIGS = [{"batch_size": b, "dtype": d} for b in BATCHES for d in DTYPES]


def probabilities(observed: dict[tuple, Observed], cap: float | None = None) -> dict[tuple, float]:
    seen = {config_key({"batch_size": b, "dtype": d}): o for (b, d), o in observed.items()}
    p = fit_probabilities(CONFIGS, seen, dict(DEFAULT_ORDER), "batch_size", cap)
    return {(c["batch_size"], c["dtype"]): x for c, x in zip(CONFIGS, p)}


def test_the_scaling_dimension_is_the_increasing_one_with_most_values() -> None:
    values = {"batch_size": BATCHES, "seq_len": (128, 256), "dtype": DTYPES, "lr": (0.1, 0.2, 0.3)}
    assert scaling_dimension(list(values), DEFAULT_ORDER, values) == "batch_size"
    assert scaling_dimension(["dtype", "lr"], DEFAULT_ORDER, values) is None


def test_with_nothing_known_the_boundary_is_equally_likely_in_every_gap() -> None:
    p = probabilities({})
    assert [p[(b, "float32")] for b in BATCHES] == pytest.approx([5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def test_an_oom_proves_every_configuration_that_needs_as_much() -> None:
    p = probabilities({(64, "bfloat16"): Observed(False)})
    assert p[(64, "bfloat16")] == p[(128, "bfloat16")] == p[(256, "bfloat16")] == 0.0
    assert p[(64, "float32")] == p[(256, "float32")] == 0.0   # float32 needs more than bfloat16
    assert p[(16, "bfloat16")] == pytest.approx(2 / 3) and p[(32, "bfloat16")] == pytest.approx(1 / 3)


def test_a_fit_proves_every_configuration_that_needs_less() -> None:
    p = probabilities({(64, "float32"): Observed(True, 8.0)})
    assert all(p[(b, d)] == 1.0 for b in (16, 32, 64) for d in DTYPES)
    assert p[(128, "float32")] == pytest.approx(2 / 3) and p[(256, "float32")] == pytest.approx(1 / 3)


def test_two_peaks_and_the_limit_predict_the_rest_of_the_column() -> None:
    # peak = 1 + 0.1 * batch: 128 needs 13.8, 256 needs 26.6 GiB; the device allows 20
    p = probabilities({(32, "float32"): Observed(True, 4.2), (64, "float32"): Observed(True, 7.4)}, cap=20.0)
    assert p[(128, "float32")] > 0.9 and p[(256, "float32")] < 0.1


def test_without_a_known_limit_an_oom_brackets_it() -> None:
    # the line says 256 needs 26.6 and it ran out: the limit is between 7.4 (what fitted) and 26.6
    p = probabilities({(32, "float32"): Observed(True, 4.2), (64, "float32"): Observed(True, 7.4),
                       (256, "float32"): Observed(False)})
    assert 0.02 <= p[(128, "float32")] <= 0.98        # 13.8: inside the bracket, not decided
    # no line of its own for bfloat16: float32's line bounds it (it needs less), the limit is
    # bracketed at 17.0 +- 9.6: at 256, below 26.6, so a chance of 17.0 / 26.6
    assert p[(256, "bfloat16")] == pytest.approx(17.0 / 26.6)


def test_a_group_without_a_line_borrows_its_siblings() -> None:
    """float32 measured at two batches (peak = 1 + 0.1 * batch), bfloat16 never: where float32's
    line is far below the limit, bfloat16 (which needs less) likely fits; measured bfloat16 and
    unmeasured float32 the other way round: float32 needs between the line and twice it."""
    p = probabilities({(32, "float32"): Observed(True, 4.2), (64, "float32"): Observed(True, 7.4)}, cap=60.0)
    assert p[(256, "bfloat16")] == 0.98                  # float32's 26.6 is far below 60
    q = probabilities({(32, "bfloat16"): Observed(True, 4.2), (64, "bfloat16"): Observed(True, 7.4)}, cap=40.0)
    assert q[(128, "float32")] == 0.98                   # 13.8 to 27.6: below 40
    assert q[(256, "float32")] == pytest.approx((40.0 - 26.6) / 26.6)   # 26.6 to 53.2 against 40
    before = probabilities({}, cap=40.0)                  # nothing measured: the boundary prior
    assert before[(256, "float32")] == pytest.approx(1 / 6)


def test_memory_that_does_not_grow_gives_no_line() -> None:
    p = probabilities({(32, "float32"): Observed(True, 5.0), (64, "float32"): Observed(True, 5.0)}, cap=6.0)
    assert p[(128, "float32")] == pytest.approx(2 / 3)  # the boundary model, not a flat line
