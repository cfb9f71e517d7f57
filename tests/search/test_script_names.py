"""The auto search on a script's own parameter names (``bench/script_names.py``, shortened): on
recorded landscapes whose knob columns are renamed to names it has no prior for (a category, an
integer, a boolean), it still measures the best within the band and every value before it stops."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import bench_module


@pytest.mark.parametrize("name", ["bert_base_accum_h100_cap020.csv", "bert_base_h200_cap015.csv"])
def test_the_search_finds_the_best_of_names_it_has_no_prior_for(name: str) -> None:
    from orchestrator.replay.landscape import load_landscape

    b = bench_module("script_names")
    with tempfile.TemporaryDirectory() as tmp:
        land = load_landscape(b.renamed_copy(name, Path(tmp)))
        assert set(land.columns) & {"precision", "accum", "gc"} and not set(land.columns) & set(b.RENAME)
        out = b.replay(land, True, range(3), 0.02)
    assert out["found"] == out["looked"] == 3, out
    assert out["stop"] < 0.6, out  # it ended itself well before the grid's time
