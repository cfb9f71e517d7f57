"""The experiment modules against the contract: real torch on the CPU, tiny models, a few seconds."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from experiments import bert, mlp
from orchestrator.harness.train import wrap_checkpointing
from orchestrator.harness.workload import Workload

CPU = torch.device("cpu")
TINY = {"model": "tiny", "seq_len": 32, "dropout": 0.1, "seed": 0}


def eval_loss(workload: Workload, batch: Any) -> float:
    workload.model.eval()
    with torch.no_grad():
        value = workload.loss(workload.model, batch).item()
    workload.model.train()
    return value


def train(workload: Workload, steps: int, batch_size: int, lr: float) -> list[float]:
    """A plain training loop, as the harness runs it (without the knobs)."""
    optimizer = torch.optim.AdamW(workload.model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = workload.loss(workload.model, workload.make_batch(batch_size))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------------
# BERT: presets and size


def test_presets_have_exactly_the_required_names() -> None:
    assert set(bert.PRESETS) == {"bert-base", "bert-large", "bert-mini", "tiny"}


@pytest.mark.parametrize("name, layers, hidden, heads, intermediate, vocab", [
    ("bert-base", 12, 768, 12, 3072, 30522),
    ("bert-large", 24, 1024, 16, 4096, 30522),
    ("bert-mini", 4, 256, 4, 1024, 30522),
    ("tiny", 2, 64, 2, 256, 1000),
])
def test_preset_architectures(name: str, layers: int, hidden: int, heads: int, intermediate: int,
                              vocab: int) -> None:
    c = bert.PRESETS[name]
    assert (c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size, c.vocab_size) == \
        (layers, hidden, heads, intermediate, vocab)


def test_bert_base_has_about_110m_parameters_counted_once() -> None:
    workload = bert.build({"model": "bert-base"}, torch.device("meta"))  # shapes only, no memory
    n = workload.info["num_parameters"]
    assert 105_000_000 <= n <= 115_000_000
    assert n == bert.expected_parameters(bert.PRESETS["bert-base"]) == 109_514_298  # = HF BertForMaskedLM
    assert len(workload.blocks) == 12 and workload.tokens_per_sample == 128


# ---------------------------------------------------------------------------------------------
# BERT: training, batches, tying, overrides, seeds


def test_tiny_bert_loss_goes_down() -> None:
    workload = bert.build(TINY, CPU)
    held_out = workload.make_batch(256)
    before = eval_loss(workload, held_out)
    losses = train(workload, steps=40, batch_size=16, lr=1e-3)
    after = eval_loss(workload, held_out)
    assert before == pytest.approx(torch.log(torch.tensor(1000.0)).item(), abs=0.2)  # uniform at init
    assert after < 0.9 * before, (before, after)
    assert sum(losses[-5:]) < 0.9 * sum(losses[:5]), losses


def test_make_batch_shapes_masking_and_range() -> None:
    workload = bert.build(TINY, CPU)
    batches = [workload.make_batch(16) for _ in range(3)]
    for inputs, labels in batches:
        assert inputs.shape == labels.shape == (16, 32)
        assert inputs.dtype == labels.dtype == torch.int64
        assert inputs.device.type == labels.device.type == "cpu"
        masked = labels != bert.IGNORE_INDEX
        assert (masked.sum(dim=1) == round(0.15 * 32)).all()  # 5 of 32 per sequence: 15.6%
        assert (inputs[masked] == bert.MASK_ID).all() and (inputs[~masked] != bert.MASK_ID).all()
        assert labels[masked].min() >= 1 and labels[masked].max() < 1000
        assert inputs.min() >= 0 and inputs.max() < 1000
    assert not torch.equal(batches[0][0], batches[1][0])  # fresh data every call


def test_masked_tokens_are_predictable_from_the_sequence() -> None:
    inputs, labels = bert.build(TINY, CPU).make_batch(64)
    ids = torch.where(labels != bert.IGNORE_INDEX, labels, inputs)
    for row in ids:
        periods = [p for p in range(bert.MIN_PERIOD, bert.MAX_PERIOD + 1) if torch.equal(row[p:], row[:-p])]
        assert periods, f"sequence is not periodic: {row.tolist()}"


def test_decoder_weight_is_the_word_embedding() -> None:
    model = bert.build(TINY, CPU).model
    assert model.decoder.weight is model.word.weight
    names = [name for name, _ in model.named_parameters()]
    assert "decoder.weight" not in names and "word.weight" in names  # one Parameter, counted once


@pytest.mark.parametrize("overrides, expected", [
    ({"num_layers": 1}, {"num_layers": 1}),
    ({"hidden_size": 96, "num_heads": 3, "intermediate_size": 128}, {"hidden_size": 96, "num_heads": 3}),
    ({"vocab_size": 50, "max_position": 40}, {"vocab_size": 50, "max_position": 40}),
    ({"num_layers": None}, {"num_layers": 2}),  # None = the preset's value
])
def test_overrides_replace_preset_fields(overrides: dict[str, Any], expected: dict[str, Any]) -> None:
    workload = bert.build({**TINY, **overrides}, CPU)
    for key, value in expected.items():
        assert workload.info[key] == value
    assert len(workload.blocks) == workload.info["num_layers"]
    assert workload.info["num_parameters"] == bert.expected_parameters(bert.resolve_config({**TINY, **overrides})[1])
    inputs, _ = workload.make_batch(2)
    assert workload.model(inputs).shape == (2, 32, workload.info["vocab_size"])


def test_harness_keys_are_ignored_and_lr_is_passed() -> None:
    workload = bert.build({**TINY, "batch_size": 8, "dtype": "bfloat16", "grad_accum_steps": 2, "lr": 3e-4}, CPU)
    assert workload.lr == 3e-4
    assert next(workload.model.parameters()).dtype == torch.float32


def test_same_seed_same_initial_parameters_and_batches() -> None:
    a, b, c = (bert.build({**TINY, "seed": s}, CPU) for s in (0, 0, 1))
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.model.word.weight, c.model.word.weight)
    assert all(torch.equal(x, y) for x, y in zip(a.make_batch(4), b.make_batch(4)))


@pytest.mark.parametrize("module, params", [(bert, TINY), (mlp, {"seed": 0})], ids=["bert", "mlp"])
def test_build_is_deterministic_per_seed_whatever_the_global_rng(module: Any, params: dict[str, Any]) -> None:
    """The seed alone decides the initial weights and the batches (on one kind of device)."""
    torch.manual_seed(123)
    a = module.build(params, CPU)
    torch.manual_seed(456)
    b = module.build(params, CPU)
    c = module.build({**params, "seed": 1}, CPU)
    for (name, pa), (_, pb), (_, pc) in zip(a.model.named_parameters(), b.model.named_parameters(),
                                           c.model.named_parameters()):
        assert torch.equal(pa, pb), name
        if pa.numel() > 1 and name.endswith("weight") and pa.std() > 0:  # random, not ones or zeros
            assert not torch.equal(pa, pc), name
    for _ in range(2):
        assert all(torch.equal(x, y) for x, y in zip(a.make_batch(4), b.make_batch(4)))


@pytest.mark.parametrize("module, params", [(bert, TINY), (mlp, {"seed": 0})], ids=["bert", "mlp"])
def test_build_creates_the_parameters_on_the_device_without_a_copy(module: Any, params: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is built elsewhere and moved (``.to``): on the meta device every parameter is
    meta, and the count is the same as on the CPU (tied weights counted once)."""
    def moved(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"build moved a module or tensor: .to{args[1:]}")

    monkeypatch.setattr(torch.nn.Module, "to", moved)
    monkeypatch.setattr(torch.Tensor, "to", moved)
    on_cpu, on_meta = module.build(params, CPU), module.build(params, torch.device("meta"))
    assert {p.device.type for p in on_cpu.model.parameters()} == {"cpu"}
    assert {p.device.type for p in on_meta.model.parameters()} == {"meta"}
    assert on_cpu.info["num_parameters"] == on_meta.info["num_parameters"] == \
        sum(p.numel() for p in on_cpu.model.parameters())
    if module is bert:
        assert on_cpu.info["num_parameters"] == bert.expected_parameters(bert.PRESETS["tiny"])
        assert on_cpu.model.decoder.weight is on_cpu.model.word.weight


def test_on_the_cpu_bert_draws_its_weights_and_batches_as_the_cpu_built_model_did() -> None:
    """Building on the device changed nothing on the CPU: the weights come from a CPU generator
    seeded with the seed (the word embedding is its first draw) and the batches from another, so
    a CPU trial computes what it did before (the same loss_first)."""
    workload = bert.build(TINY, CPU)
    expected = torch.empty_like(workload.model.word.weight).normal_(0.0, bert.INIT_STD,
                                                                   generator=torch.Generator().manual_seed(0))
    assert torch.equal(workload.model.word.weight, expected)
    batch = bert.make_batch(4, 32, 1000, 0.15, CPU, torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(workload.make_batch(4), batch))


def test_bert_init_statistics() -> None:
    model = bert.build({"model": "bert-mini", "seq_len": 32}, CPU).model
    assert model.word.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(model.layers[0].query.bias == 0) and torch.all(model.head_norm.weight == 1)
    assert torch.all(model.decoder.bias == 0)


def test_blocks_can_be_checkpointed_by_the_harness() -> None:
    plain, wrapped = bert.build(TINY, CPU), bert.build(TINY, CPU)
    assert wrap_checkpointing(wrapped.blocks) == 2
    batch = plain.make_batch(4)
    for w in (plain, wrapped):
        w.model.eval()  # no dropout: both runs compute the same function
        w.loss(w.model, batch).backward()
    for (name, pa), (_, pb) in zip(plain.model.named_parameters(), wrapped.model.named_parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=name)


# ---------------------------------------------------------------------------------------------
# BERT: parameter validation


@pytest.mark.parametrize("params, message", [
    ({"model": "bert-bse"}, "unknown model preset 'bert-bse'; choose one of bert-base, bert-large, bert-mini, tiny"),
    ({"model": "tiny", "hidden_size": 65}, "hidden_size must be divisible by num_heads, got hidden_size 65 and num_heads 2"),
    ({"hidden_size": 768, "num_heads": 5}, "hidden_size must be divisible by num_heads, got hidden_size 768 and num_heads 5"),
    ({"model": "tiny", "seq_len": 1024}, "seq_len must be at most max_position, got seq_len 1024 and max_position 512"),
    ({"seq_len": 64, "max_position": 32}, "seq_len must be at most max_position, got seq_len 64 and max_position 32"),
    ({"num_layers": 0}, "num_layers must be a positive integer, got 0"),
    ({"vocab_size": 1}, "vocab_size must be at least 2 (id 0 is [MASK]), got 1"),
    ({"dropout": 1.0}, "dropout must be a number in [0, 1), got 1.0"),
    ({"mask_prob": 0}, "mask_prob must be a number in (0, 1], got 0"),
])
def test_validate_params_rejects(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        bert.validate_params(params)
    assert str(info.value) == message
    assert info.value.field in params  # type: ignore[attr-defined]  # the spec line to point at


@pytest.mark.parametrize("params", [
    {},
    {"model": "bert-large", "seq_len": 512, "batch_size": 8, "dtype": "float16"},
    {"hidden_size": 1024},  # the preset may be searched: num_heads is not known yet
    {"num_layers": None, "dropout": 0.0, "mask_prob": 1.0},
])
def test_validate_params_accepts(params: dict[str, Any]) -> None:
    bert.validate_params(params)


def test_build_rejects_what_validation_could_not_know() -> None:
    with pytest.raises(ValueError, match="hidden_size must be divisible by num_heads"):
        bert.build({"model": "tiny", "hidden_size": 65}, CPU)


# ---------------------------------------------------------------------------------------------
# The MLP experiment


def test_mlp_loss_goes_down() -> None:
    workload = mlp.build({"seed": 0}, CPU)
    held_out = workload.make_batch(1024)
    before = eval_loss(workload, held_out)
    train(workload, steps=60, batch_size=64, lr=workload.lr)
    after = eval_loss(workload, held_out)
    assert after < 0.6 * before, (before, after)


def test_mlp_follows_the_contract() -> None:
    workload = mlp.build({"num_layers": 3, "num_classes": 5, "batch_size": 32}, CPU)
    x, y = workload.make_batch(32)
    assert x.shape == (32, 64) and y.shape == (32,) and 0 <= y.min() and y.max() < 5
    assert len(workload.blocks) == 3 and workload.tokens_per_sample is None
    assert workload.loss(workload.model, (x, y)).shape == ()
    a, b = mlp.build({"seed": 3}, CPU), mlp.build({"seed": 3}, CPU)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))


@pytest.mark.parametrize("params, message", [
    ({"hidden_size": 0}, "hidden_size must be a positive integer, got 0"),
    ({"num_layers": 2.5}, "num_layers must be a positive integer, got 2.5"),
    ({"num_classes": 1}, "num_classes must be an integer >= 2, got 1"),
])
def test_mlp_validate_params_rejects(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        mlp.validate_params(params)
    assert str(info.value) == message
