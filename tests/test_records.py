"""What a trial's MLflow run is tagged with, from its result file."""

from __future__ import annotations

from orchestrator.records import run_tags


def test_fallback_ops_are_named_in_a_tag_and_absent_when_none_fell_back() -> None:
    result = {"applied": {"device": "mps"}, "provenance": {"torch_version": "2.13.0"},
              "info": {"mps_fallback_ops": ["aten::_linalg_svd", "aten::nonzero"]}}
    tags = run_tags(result, "ok", None)
    assert tags["mps_fallback_ops"] == "aten::_linalg_svd, aten::nonzero"
    assert tags["device"] == "mps" and tags["status"] == "ok"
    assert "mps_fallback_ops" not in run_tags({"info": {"mps_fallback_ops": []}}, "ok", None)
