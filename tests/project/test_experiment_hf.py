"""experiments.hf against the contract: real transformers models from tiny configs built offline,
trained on the CPU for a few dozen steps; the config loaded from a local folder as from the hub;
the parameters checked against the model's own config; a real trial through the harness with
the model's own activation checkpointing; and a sweep with the auto search, run as a user would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")

from conftest import check_records, orchestrate, write_spec  # noqa: E402
from experiments import bert, hf  # noqa: E402
from orchestrator.harness import train  # noqa: E402
from orchestrator.protocol import config_of  # noqa: E402

CPU = torch.device("cpu")
TINY = {  # two layers, width 32, vocabulary 64: a training step takes milliseconds
    "gpt2": {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 64,
             "bos_token_id": 1, "eos_token_id": 1},
    "bert": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 64, "max_position_embeddings": 64},
    "llama": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 64, "vocab_size": 64, "bos_token_id": 1, "eos_token_id": 2},
}
NO_DROPOUT = {"gpt2": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
              "bert": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}, "llama": {}}


def tiny(model_type: str, **more: Any) -> dict[str, Any]:
    return {"model_type": model_type, "seq_len": 32, **TINY[model_type], **more}


def train_steps(workload: Any, steps: int, batch_size: int = 16, lr: float = 3e-3) -> list[float]:
    optimizer = torch.optim.AdamW(workload.model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = workload.loss(workload.model, workload.make_batch(batch_size))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("model_type, task, architecture", [
    ("gpt2", "causal_lm", "GPT2LMHeadModel"),
    ("bert", "masked_lm", "BertForMaskedLM"),
    ("llama", "causal_lm", "LlamaForCausalLM"),
])
def test_a_tiny_model_of_each_kind_learns_its_synthetic_tokens(model_type: str, task: str, architecture: str) -> None:
    workload = hf.build(tiny(model_type), CPU)
    assert (workload.info["task"], workload.info["architecture"]) == (task, architecture)
    assert workload.tokens_per_sample == 32 and workload.model.config.use_cache is False
    losses = train_steps(workload, 60)
    assert losses[0] == pytest.approx(torch.log(torch.tensor(64.0)).item(), abs=0.3)  # uniform at init
    assert sum(losses[-5:]) < 0.9 * sum(losses[:5]), losses  # the tokens' frequencies, at least


def test_sequence_classification_labels_each_sequence_by_its_motif() -> None:
    workload = hf.build(tiny("bert", task="sequence_classification", num_labels=3), CPU)
    assert workload.info["architecture"] == "BertForSequenceClassification"
    ids, labels = workload.make_batch(64)
    assert ids.shape == (64, 32) and labels.shape == (64,) and set(labels.tolist()) == {0, 1, 2}
    period = [next(p for p in range(2, 9) if all(row[i] == row[i % p] for i in range(32))) for row in ids.tolist()]
    assert labels.tolist() == [(p - 2) % 3 for p in period]  # learnable from the tokens alone
    losses = train_steps(workload, 3)
    assert all(torch.isfinite(torch.tensor(losses)))


def test_a_gpt2_classifier_without_a_pad_token_takes_batches() -> None:
    workload = hf.build(tiny("gpt2", task="sequence_classification"), CPU)
    assert workload.model.config.pad_token_id == 0  # no motif draws id 0: the last token is the last
    assert torch.isfinite(workload.loss(workload.model, workload.make_batch(4)))


def test_masked_lm_batches_are_experiments_bert_s() -> None:
    workload = hf.build(tiny("bert", seed=5), CPU)
    ours = bert.make_batch(8, 32, 64, 0.15, CPU, torch.Generator().manual_seed(5))
    for a, b in zip(workload.make_batch(8), ours):
        assert torch.equal(a, b)


def test_bert_base_built_this_way_has_experiments_bert_s_parameters() -> None:
    workload = hf.build({"model_type": "bert"}, torch.device("meta"))  # shapes only: no memory
    assert next(workload.model.parameters()).device.type == "meta"  # made on the device, not copied
    assert workload.info["num_parameters"] == bert.expected_parameters(bert.PRESETS["bert-base"]) == 109_514_298


def test_the_config_comes_from_a_local_folder_as_from_the_hub_with_overrides(tmp_path: Path) -> None:
    transformers.AutoConfig.for_model("gpt2", **TINY["gpt2"]).save_pretrained(tmp_path / "my-gpt2")
    hf.validate_params({"model": str(tmp_path / "my-gpt2"), "n_layer": 3})
    workload = hf.build({"model": str(tmp_path / "my-gpt2"), "n_layer": 3, "seq_len": 16}, CPU)
    assert len(workload.model.transformer.h) == 3 and workload.model.config.n_embd == 32
    assert workload.info["model"] == str(tmp_path / "my-gpt2") and workload.info["config_overrides"] == {"n_layer": 3}


def test_same_seed_same_weights_and_batches() -> None:
    a, b, c = (hf.build(tiny("llama", seed=s), CPU) for s in (1, 1, 2))
    torch.manual_seed(123)  # the global RNG between builds does not matter
    for (name, pa), (_, pb), (_, pc) in zip(a.model.named_parameters(), b.model.named_parameters(),
                                            c.model.named_parameters()):
        assert torch.equal(pa, pb), name
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.model.parameters(), c.model.parameters()))
    assert torch.equal(a.make_batch(4)[0], b.make_batch(4)[0])


@pytest.mark.parametrize("model_type", ["gpt2", "bert"])
def test_checkpointing_is_the_model_s_own_and_leaves_the_gradients_unchanged(model_type: str) -> None:
    params = tiny(model_type, **NO_DROPOUT[model_type])
    plain, checkpointed = hf.build(params, CPU), hf.build(params, CPU)
    assert train.enable_checkpointing(checkpointed) and checkpointed.model.is_gradient_checkpointing
    assert not plain.model.is_gradient_checkpointing
    batch = plain.make_batch(4)
    for w in (plain, checkpointed):
        w.model.train()  # transformers checkpoints in training mode only
        w.loss(w.model, batch).backward()
    for (name, pa), (_, pb) in zip(plain.model.named_parameters(), checkpointed.model.named_parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=name)


@pytest.mark.parametrize("config, task", [
    ({"model_type": "gpt2"}, "causal_lm"),
    ({"model_type": "llama"}, "causal_lm"),
    ({"model_type": "bert"}, "masked_lm"),
    ({"model_type": "roberta"}, "masked_lm"),
    ({"model_type": "distilbert"}, "masked_lm"),
    ({"model_type": "bert", "is_decoder": True}, "causal_lm"),
    ({"model_type": "bert", "architectures": ["BertForSequenceClassification"]}, "sequence_classification"),
    ({"model_type": "roberta", "architectures": ["RobertaForCausalLM"]}, "causal_lm"),
])
def test_the_task_comes_from_the_config(config: dict[str, Any], task: str) -> None:
    kind = config.pop("model_type")
    assert hf.infer_task(transformers.AutoConfig.for_model(kind, **config)) == task


@pytest.mark.parametrize("params, field, message", [
    ({"model_type": "gpt2", "n_layr": 4}, "n_layr",
     "'n_layr' is not a parameter of experiments.hf, a harness knob, or a field of gpt2's config; did you mean n_layer"),
    ({"model_type": "gtp2"}, "model_type", "unknown model_type 'gtp2' for transformers"),
    ({"model_type": "gpt2", "model": "gpt2"}, "model_type", "give exactly one of model (a hub id or a local folder) "
                                                            "and model_type (offline, e.g. gpt2), got model 'gpt2' and "
                                                            "model_type 'gpt2'"),
    ({"model_type": "gpt2", "task": "masked_lm"}, "task", "gpt2 has no masked_lm head in transformers"),
    ({"model_type": "gpt2", "task": "translation"}, "task",
     "task must be one of causal_lm, masked_lm, sequence_classification, got 'translation'"),
    ({"model_type": "gpt2", "seq_len": 2048}, "seq_len", "seq_len must be at most the config's "
                                                        "max_position_embeddings, got seq_len 2048 and "
                                                        "max_position_embeddings 1024"),
    ({"model_type": "bert", "mask_prob": 0}, "mask_prob", "mask_prob must be a number in (0, 1], got 0"),
    ({"model": "/nonexistent/folder"}, "model", "cannot load the config of model '/nonexistent/folder': "),
    # the HF tour: each was "experiments.hf failed its smoke step ... (fix the experiment, or --no-check)"
    ({"model_type": "gpt2", "vocab_size": 2}, "vocab_size", "vocab_size must be at least 3"),
    ({"model_type": "gpt2", "n_layer": "two"}, "n_layer", "gpt2's config refuses n_layer='two': "),
    ({"model_type": "t5"}, "model_type", "t5 is an encoder-decoder model: experiments.hf trains encoders and "
                                         "decoders only"),
])
def test_validate_params_rejects(params: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        hf.validate_params(params)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.field == field  # type: ignore[attr-defined]  # the spec line it points at
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("params", [
    {"model_type": "gpt2", "n_layer": 4, "num_hidden_layers": 4, "batch_size": 8, "dtype": "bfloat16"},
    {"model_type": "llama", "seq_len": 4096, "task": "sequence_classification"},  # rotary: no position table
    {"seq_len": 64, "n_layer": 2},  # the model is searched: its fields are checked when a trial builds it
])
def test_validate_params_accepts(params: dict[str, Any]) -> None:
    hf.validate_params(params)


def test_build_rejects_a_tiny_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocab_size must be at least 3"):
        hf.build(tiny("gpt2", vocab_size=2), CPU)


@pytest.mark.parametrize("more, field, message", [
    ({"n_embd": 30, "n_head": 4}, "n_layer", "gpt2's config refuses n_layer=2, n_embd=30, n_head=4, "),
    ({"attn_implementation": "flash_attention_9"}, "attn_implementation",
     "attn_implementation 'flash_attention_9' is refused by transformers: "),
])
def test_a_model_its_config_cannot_build_names_the_spec_s_fields(more: dict[str, Any], field: str,
                                                                  message: str) -> None:
    """Caught only as the model is built (a width the heads do not divide, an attention that does
    not exist): a parameter's fault, so the smoke step points at the spec's line, not the code."""
    with pytest.raises(ValueError) as info:
        hf.build(tiny("gpt2", **more), CPU)
    assert str(info.value).startswith(message) and info.value.field == field, str(info.value)  # type: ignore[attr-defined]


def test_a_trial_through_the_harness_checkpoints_and_measures() -> None:
    config = {"experiment": "experiments.hf", "not_applied": {},
              "params": {**tiny("gpt2"), "device": "cpu", "batch_size": 4, "dtype": "bfloat16",
                         "activation_checkpointing": True, "grad_accum_steps": 2},
              "trial": {"warmup_steps": 1, "measure_steps": 3, "min_measure_s": 0.0}}
    out = train.run(config_of(config), train.Progress())
    assert out["finite"] and out["applied"]["activation_checkpointing"] is True
    assert out["applied"]["dtype"] == "autocast bfloat16" and "activation_checkpointing" not in out["not_applied"]
    assert out["metrics"]["samples_per_s"] > 0 and out["metrics"]["tokens_per_s"] == pytest.approx(
        out["metrics"]["samples_per_s"] * 32)
    assert out["info"]["architecture"] == "GPT2LMHeadModel" and out["info"]["num_parameters"] > 0


@pytest.mark.slow
def test_a_gpt2_config_sweeps_end_to_end_with_the_auto_search(project: Path) -> None:
    """As docs/experiment.md and sweeps/hf_causal_lm.yaml show it, on a model small enough for the
    CPU: the config built offline, the spec checked by the probe, a real trial per configuration."""
    spec = write_spec(project, """
        name: tiny_gpt2
        experiment: experiments.hf
        device: cpu
        fixed:
          model_type: gpt2
          n_layer: 2
          n_embd: 32
          n_head: 2
          vocab_size: 64
          n_positions: 64
          seq_len: 32
        space:
          batch_size: [2, 8]
          activation_checkpointing: [false, true]
        search:
          n_trials: 4
        trial:
          warmup_steps: 1
          measure_steps: 3
          min_measure_s: 0.0
        """)
    proc = orchestrate([str(spec)], project, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "auto search" in proc.stdout
    records = check_records(project, "tiny_gpt2")
    assert records["results"] and all(t.user_attrs["status"] == "ok" for t in records["results"])


def test_a_misspelt_config_field_is_a_spec_error_before_any_trial(project: Path) -> None:
    spec = write_spec(project, """
        name: typo
        experiment: experiments.hf
        device: cpu
        fixed:
          model_type: gpt2
          n_layr: 2
        space:
          batch_size: [2]
        """)
    proc = orchestrate([str(spec)], project, timeout=200)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (f"{spec}:6: fixed.n_layr: 'n_layr' is not a parameter of experiments.hf, a harness "
                           "knob, or a field of gpt2's config; did you mean n_layer?\n")
    assert not (project / "mlruns" / "optuna.db").exists()  # nothing created


def test_a_value_only_the_smoke_step_can_judge_is_its_field_s_line(project: Path) -> None:
    """The HF tour's ``n_embd: 30, n_head: 4``: "experiments.hf failed its smoke step ... (fix the
    experiment, or skip this check with --no-check)", at the ``experiment:`` line; with
    ``--no-check`` every trial then failed."""
    spec = write_spec(project, """
        name: heads
        experiment: experiments.hf
        device: cpu
        fixed:
          model_type: gpt2
          n_embd: 30
          n_head: 4
          n_layer: 1
        space:
          batch_size: [2]
        """)
    proc = orchestrate([str(spec)], project, timeout=200)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"{spec}:6: fixed.n_embd: gpt2's config refuses n_embd=30, n_head=4, n_layer=1: "
                                  "`embed_dim` must be divisible by num_heads"), proc.stderr
    assert proc.stderr.endswith("(found by the smoke step: one training step of the first configuration)\n")
    assert not (project / "mlruns" / "optuna.db").exists()  # nothing created


def test_the_shipped_spec_s_fixed_parameters_pass_the_probe_s_check() -> None:
    from conftest import ROOT
    from orchestrator.spec.load import load_spec

    spec = load_spec(ROOT / "sweeps" / "hf_causal_lm.yaml")
    hf.validate_params(spec.fixed)  # what the probe runs before a study exists
    workload = hf.build({**spec.fixed, "batch_size": 4}, torch.device("meta"))
    assert workload.info["task"] == "causal_lm" and workload.info["num_parameters"] == 124_439_808  # GPT-2 small


@pytest.mark.parametrize("fixed, module", [
    (tiny("llama"), "transformers.models.llama.modeling_llama"),
    ({**tiny("bert"), "task": "sequence_classification"}, "transformers.models.bert.modeling_bert"),
    ({"seq_len": 32}, None),  # the model is searched: nothing to import ahead
])
def test_preload_imports_the_fixed_model_s_modules(fixed: dict[str, Any], module: str | None) -> None:
    """The preload hook (``orchestrator/harness/ahead.py``), in a fresh interpreter that has
    imported the experiment: the model's modules, which ``transformers`` imports lazily, are
    imported by the hook, so the trials forked after it do not import them."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    code = ("import json, sys; import experiments.hf as hf; mods = set(sys.modules); "
            f"hf.preload(json.loads({json.dumps(json.dumps(fixed))})); "
            "print(json.dumps(sorted(set(sys.modules) - mods)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    new = json.loads(out.stdout.strip().splitlines()[-1])
    if module is None:
        assert not any(m.startswith("transformers.models.") and ".modeling_" in m for m in new)
    else:
        assert module in new
