"""The dominance rule behind predicted out-of-memory skips: a table of cases."""

from __future__ import annotations

import pytest

from orchestrator.search.dominance import DEFAULT_ORDER, needs_at_least, predicted_oom

O = DEFAULT_ORDER
CASES = [
    # candidate, reference (ran out of memory), order, needs at least as much?
    ({"batch_size": 64}, {"batch_size": 32}, O, True),
    ({"batch_size": 32}, {"batch_size": 32}, O, True),            # the same configuration
    ({"batch_size": 16}, {"batch_size": 32}, O, False),
    ({"batch_size": 64, "dtype": "float32"}, {"batch_size": 32, "dtype": "bfloat16"}, O, True),
    ({"batch_size": 64, "dtype": "bfloat16"}, {"batch_size": 32, "dtype": "float32"}, O, False),
    ({"batch_size": 64, "dtype": "float16"}, {"batch_size": 64, "dtype": "bfloat16"}, O, True),  # equal rank
    # accumulation: from the second micro-batch on, a buffer the size of the gradients more
    ({"batch_size": 64, "grad_accum_steps": 4}, {"batch_size": 64, "grad_accum_steps": 1}, O, True),
    ({"batch_size": 64, "grad_accum_steps": 1}, {"batch_size": 64, "grad_accum_steps": 4}, O, False),
    ({"batch_size": 64, "activation_checkpointing": False},
     {"batch_size": 64, "activation_checkpointing": True}, O, True),
    ({"batch_size": 64, "activation_checkpointing": True},
     {"batch_size": 64, "activation_checkpointing": False}, O, False),
    ({"batch_size": 64, "memory_fraction": 0.1}, {"batch_size": 64, "memory_fraction": 0.2}, O, True),
    ({"batch_size": 64, "memory_fraction": 0.3}, {"batch_size": 64, "memory_fraction": 0.2}, O, False),
    ({"batch_size": 64, "optimizer": "sgd"}, {"batch_size": 32, "optimizer": "adamw"}, O, False),  # unordered
    ({"batch_size": 64, "optimizer": "adamw"}, {"batch_size": 32, "optimizer": "adamw"}, O, True),
    ({"batch_size": 64, "device": "cpu"}, {"batch_size": 32, "device": "mps"}, O, False),  # never across devices
    ({"batch_size": 64}, {"batch_size": 32, "dtype": "float32"}, O, False),      # different key sets
    ({"seq_len": 256, "batch_size": 8}, {"seq_len": 128, "batch_size": 8}, O, True),
    ({"hidden_size": 512}, {"hidden_size": 256}, {**O, "hidden_size": "increasing"}, True),
    ({"hidden_size": 512}, {"hidden_size": 256}, O, False),                      # no order given
    ({"dtype": "bfloat16"}, {"dtype": "float16"}, {**O, "dtype": {"float16": 1, "bfloat16": 2}}, True),
    ({"mps_high_watermark_ratio": 1.0}, {"mps_high_watermark_ratio": 1.4},
     {**O, "mps_high_watermark_ratio": "decreasing"}, True),
]


@pytest.mark.parametrize("candidate, reference, order, expected", CASES)
def test_needs_at_least(candidate, reference, order, expected) -> None:  # noqa: ANN001
    assert needs_at_least(candidate, reference, order) is expected


def test_predicted_oom_names_the_first_proof() -> None:
    ooms = [(3, {"batch_size": 128, "dtype": "float32"}), (5, {"batch_size": 64, "dtype": "bfloat16"})]
    assert predicted_oom({"batch_size": 256, "dtype": "float32"}, ooms, O) == 3
    assert predicted_oom({"batch_size": 64, "dtype": "float16"}, ooms, O) == 5
    assert predicted_oom({"batch_size": 32, "dtype": "float32"}, ooms, O) is None


def test_the_index_agrees_with_needs_at_least_on_every_pair() -> None:
    """``DominanceIndex`` (arrays, for big spaces) against the rule it vectorizes, on a space with
    every kind of rule: ordered, mapped, decreasing, neutral, unordered, and a knob absent from
    some configurations (another device's)."""
    import itertools

    from orchestrator.search.dominance import DominanceIndex

    order = {**DEFAULT_ORDER, "opt": None}
    configs = [dict(zip(("batch_size", "dtype", "activation_checkpointing", "memory_fraction", "lr", "opt"), c))
               for c in itertools.product((8, 16), ("float32", "bfloat16", "float8"), (False, True), (0.5, 0.9),
                                          (1e-3, 1e-4), ("sgd", "adamw"))]
    configs += [{"batch_size": b, "dtype": "float32"} for b in (8, 16, 32)]
    index = DominanceIndex(configs, order)
    for r, ref in enumerate(configs):
        at_least, at_most = index.at_least([r]), index.at_most([r])
        for i, c in enumerate(configs):
            assert at_least[i] == needs_at_least(c, ref, order), (c, ref)
            assert at_most[i] == needs_at_least(ref, c, order), (c, ref)
    assert index.at_least([]).sum() == 0
