"""Any Hugging Face ``transformers`` model, built from its config with random weights, trained on
synthetic tokens of its own kind (needs the ``hf`` extra: ``pip install -e '.[hf]'``).

Which model (exactly one of the two, fixed or searched)::

    model: gpt2                  # a hub id or a local folder: AutoConfig.from_pretrained (config only)
    model_type: llama            # offline: AutoConfig.for_model with the config's defaults

Any other parameter that is neither this module's nor a harness knob is a field of the model's
config (``n_layer: 4``, ``hidden_size: 512``, ``num_key_value_heads: 2``) and overrides it; a name
the config does not have is an error naming the closest ones. Fields derived by the config's
``__init__`` are derived again from ``model_type``'s defaults, not from a loaded config's: with
``model:``, override them too (Llama's ``head_dim`` with ``hidden_size``).

What it trains on (``task``, else chosen from the config): ``causal_lm`` (next token; a config
whose architectures end in ``ForCausalLM``/``LMHeadModel``, or a model type with no masked-LM
head), ``masked_lm`` (15% of positions masked, as ``experiments.bert``) or
``sequence_classification`` (one label per sequence, ``num_labels`` classes). The tokens repeat
short motifs (``experiments.bert.make_motifs``), so every task is learnable and a loss falls.

The weights are random (nothing is downloaded but the config), float32, created on the device
(``with torch.device(device)``); the harness autocasts. ``use_cache`` is off (training keeps no
key/value cache). ``activation_checkpointing: true`` calls the model's own
``gradient_checkpointing_enable`` (non-reentrant).

``transformers`` is imported here, in the trial process (and the probe's), never by the
orchestrator.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Callable

import torch

from experiments.bert import MIN_PERIOD, make_batch, make_motifs
from orchestrator.spec import knobs
from orchestrator.harness.workload import Workload, device_generator, param_error

if TYPE_CHECKING:
    from transformers import PretrainedConfig

try:
    import transformers
    from transformers import AutoConfig
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("experiments.hf needs the transformers package: pip install -e '.[hf]' "
                      f"(in a clone of orchestrate), or pip install 'transformers>=5,<6' ({exc})") from exc

TASKS = ("causal_lm", "masked_lm", "sequence_classification")
MIN_VOCAB = 3
OWN: dict[str, object] = {
    "model": None, "model_type": None, "task": None, "seq_len": 128, "mask_prob": 0.15,
    "attn_implementation": None, "lr": 1e-4, "seed": 0,
}
"""This module's parameters and defaults. There is no ``PARAMS``: every config field is a
parameter too, so ``validate_params`` checks the names against the model's config instead."""


# ---------------------------------------------------------------------------------------------
# The config


def overrides_of(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters that are config fields: neither this module's nor a harness knob."""
    return {k: v for k, v in params.items() if k not in OWN and k not in knobs.KNOBS}


def base_config(params: dict[str, Any]) -> PretrainedConfig:
    """The named model's config, without overrides: from the hub or a folder, or by model type."""
    model, model_type = params.get("model"), params.get("model_type")
    if (model is None) == (model_type is None):
        field = "model_type" if model_type is not None else "model"
        raise param_error(field, "give exactly one of model (a hub id or a local folder) and model_type "
                                 f"(offline, e.g. gpt2), got model {model!r} and model_type {model_type!r}")
    if model is not None:
        try:
            return AutoConfig.from_pretrained(str(model))
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise param_error("model", f"cannot load the config of model {model!r}: {first} (offline? "
                                       "give model_type instead, with its fields as overrides)") from None
    names = sorted(transformers.CONFIG_MAPPING.keys())
    if model_type not in names:
        close = difflib.get_close_matches(str(model_type), names, n=3)
        raise param_error("model_type", f"unknown model_type {model_type!r} for transformers "
                                        f"{transformers.__version__}"
                                        + (f"; did you mean {', '.join(close)}?" if close else ""))
    return AutoConfig.for_model(model_type)


def check_fields(config: PretrainedConfig, overrides: dict[str, Any]) -> None:
    """Every override names a field of ``config`` (its aliases included: ``num_hidden_layers``)."""
    for name in overrides:
        if not hasattr(config, name):
            fields = sorted(config.to_dict())
            close = difflib.get_close_matches(name, fields + sorted(OWN) + sorted(knobs.KNOBS), n=3)
            raise param_error(name, f"{name!r} is not a parameter of experiments.hf, a harness knob, or a "
                                    f"field of {config.model_type}'s config"
                                    + (f"; did you mean {', '.join(close)}?" if close else ""))


def resolve_config(params: dict[str, Any]) -> PretrainedConfig:
    """The config the trial builds: the named one with every override applied."""
    base = base_config(params)
    overrides = overrides_of(params)
    check_fields(base, overrides)
    try:
        if params.get("model") is not None:
            return AutoConfig.from_pretrained(str(params["model"]), **overrides)
        return AutoConfig.for_model(params["model_type"], **overrides)
    except Exception as exc:  # noqa: BLE001 - the config's own checks (a field's type or range), whatever they raise
        raise refused(base.model_type, overrides, exc) from None


def said(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line (huggingface_hub's validation errors say the rule on
    their second), clipped; its type where it has none."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def refused(model_type: str, overrides: dict[str, Any], exc: Exception) -> Exception:
    """``param_error`` for a config (or a model built from it) that refuses the overrides: the
    field its message names, else the first override. Without overrides the fault is not the
    spec's: the exception itself."""
    if not overrides:
        return exc
    message = said(exc)
    field = next((k for k in overrides if repr(k) in message or f"`{k}`" in message), next(iter(overrides)))
    given = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
    return param_error(field, f"{model_type}'s config refuses {given}: {message}")


def max_positions(config: PretrainedConfig) -> int | None:
    """The longest sequence the position embedding table takes (None: rotary positions, which
    have no table, or unknown)."""
    if "rope_parameters" in config.to_dict():
        return None
    value = getattr(config, "max_position_embeddings", None)
    return value if knobs.is_int(value) else None


def infer_task(config: PretrainedConfig) -> str:
    """The task a config was made for: its ``architectures`` where it names them, else the heads
    its model type has (masked LM first, unless it is a decoder)."""
    from transformers.models.auto import modeling_auto as auto

    for arch in getattr(config, "architectures", None) or ():
        if arch.endswith("ForMaskedLM"):
            return "masked_lm"
        if arch.endswith(("ForCausalLM", "LMHeadModel")):
            return "causal_lm"
        if arch.endswith("ForSequenceClassification"):
            return "sequence_classification"
    kind = config.model_type
    if kind in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return "masked_lm"
    if kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal_lm"
    if kind in auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        return "sequence_classification"
    raise param_error("task", f"{kind} has no masked-LM, causal-LM or sequence-classification head in "
                              f"transformers {transformers.__version__}")


# ---------------------------------------------------------------------------------------------
# Parameters


def validate_params(params: dict[str, Any]) -> None:
    """Raise ValueError naming the parameter, the rule and the value. Sees the fixed parameters
    before any trial; the config is loaded (and its field names checked) where the model is fixed."""
    task = params.get("task")
    if task is not None and task not in TASKS:
        raise param_error("task", f"task must be one of {', '.join(TASKS)}, got {task!r}")
    seq_len = params.get("seq_len")
    if seq_len is not None and not (knobs.is_int(seq_len) and seq_len > 0):
        raise param_error("seq_len", f"seq_len must be a positive integer, got {seq_len!r}")
    if "mask_prob" in params:
        p = params["mask_prob"]
        if not (knobs.is_number(p) and 0.0 < p <= 1.0):
            raise param_error("mask_prob", f"mask_prob must be a number in (0, 1], got {p!r}")
    if params.get("model") is None and params.get("model_type") is None:
        return  # the model is searched (or missing): build checks it, in the smoke step before any trial
    config = resolve_config(params)
    check_task(config, task or infer_task(config), model_field(params))
    check_seq_len(config, params.get("seq_len"))
    check_vocab(config)


def model_field(params: dict[str, Any]) -> str:
    """The parameter that names the model: ``model`` or ``model_type``."""
    return "model" if params.get("model") is not None else "model_type"


def check_vocab(config: PretrainedConfig) -> None:
    vocab = getattr(config, "vocab_size", None)
    if not (isinstance(vocab, int) and vocab >= MIN_VOCAB):
        raise param_error("vocab_size", f"vocab_size must be at least {MIN_VOCAB} (id 0 is [MASK], the tokens "
                                        f"are drawn from 1..vocab_size-1), got {vocab!r}")


def check_task(config: PretrainedConfig, task: str, field: str = "model_type") -> None:
    """The model type has a head for ``task``, and is no encoder-decoder (T5, BART: their heads
    need decoder inputs and end-of-sequence tokens that synthetic motifs do not give)."""
    from transformers.models.auto import modeling_auto as auto

    if getattr(config, "is_encoder_decoder", False):
        raise param_error(field, f"{config.model_type} is an encoder-decoder model: experiments.hf trains encoders "
                                 "and decoders only; sweep your own training script instead (docs/script.md)")

    heads = {"causal_lm": auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "masked_lm": auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
             "sequence_classification": auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES}
    if config.model_type not in heads[task]:
        has = [t for t in TASKS if config.model_type in heads[t]]
        raise param_error("task", f"{config.model_type} has no {task} head in transformers "
                                  f"{transformers.__version__}; it has {', '.join(has) or 'none of ' + ', '.join(TASKS)}")


def check_seq_len(config: PretrainedConfig, seq_len: int | None) -> None:
    limit = max_positions(config)
    if seq_len is not None and limit is not None and seq_len > limit:
        raise param_error("seq_len", f"seq_len must be at most the config's max_position_embeddings, got "
                                     f"seq_len {seq_len} and max_position_embeddings {limit}")


# ---------------------------------------------------------------------------------------------
# Batches and losses: the model computes its own loss from ``labels``

Batch = tuple[torch.Tensor, torch.Tensor]
"""(input_ids, labels) on the device: labels are the ids (causal LM, shifted by the model),
-100 except at masked positions (masked LM), or one class per sequence."""


def batch_maker(task: str, seq_len: int, vocab_size: int, mask_prob: float, num_labels: int,
                device: torch.device, generator: torch.Generator | None) -> Callable[[int], Batch]:
    """``make_batch(batch_size)`` for ``task``: fixed shapes, on the device, no host sync."""
    def causal(batch_size: int) -> Batch:
        ids, _ = make_motifs(batch_size, seq_len, vocab_size, device, generator)
        return ids, ids

    def masked(batch_size: int) -> Batch:  # [MASK] is id 0, which no motif draws
        return make_batch(batch_size, seq_len, vocab_size, mask_prob, device, generator)

    def classify(batch_size: int) -> Batch:  # the class is the motif's period: learnable from the tokens
        ids, period = make_motifs(batch_size, seq_len, vocab_size, device, generator)
        return ids, ((period.squeeze(1) - MIN_PERIOD) % num_labels)

    return {"causal_lm": causal, "masked_lm": masked, "sequence_classification": classify}[task]


def model_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """The model's own loss (cross-entropy over the vocabulary or the classes)."""
    input_ids, labels = batch
    return model(input_ids=input_ids, labels=labels).loss


# ---------------------------------------------------------------------------------------------
# The experiment contract


def model_class(config: PretrainedConfig, task: str) -> type:
    """The class ``from_config`` builds for ``task``: looked up in transformers' auto mapping,
    which imports the model's modules then (``transformers`` imports them lazily)."""
    from transformers.models.auto import modeling_auto as auto

    mapping = {"causal_lm": auto.MODEL_FOR_CAUSAL_LM_MAPPING, "masked_lm": auto.MODEL_FOR_MASKED_LM_MAPPING,
               "sequence_classification": auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING}[task]
    return mapping[type(config)]


def preload(fixed: dict[str, Any]) -> None:
    """The preload hook (``orchestrator/harness/ahead.py``): once per fork server, the model's
    class for the fixed ``model``/``model_type``, so that its modules (hundreds, with what they
    import: 0.6 s on a small CPU, about 2 s of a Hugging Face trial's start-up on an H100 host) are
    imported once, not by every trial. Touches no device. Nothing when the model is searched."""
    if fixed.get("model") is None and fixed.get("model_type") is None:
        return
    config = resolve_config(fixed)
    model_class(config, fixed.get("task") or infer_task(config))


def build(params: dict[str, Any], device: torch.device) -> Workload:
    """The workload for one trial; harness keys in ``params`` (batch_size, dtype, ...) are ignored."""
    validate_params(params)
    config = resolve_config(params)
    task = params.get("task") or infer_task(config)
    seq_len = int(params.get("seq_len", OWN["seq_len"]))
    check_task(config, task, model_field(params))
    check_seq_len(config, seq_len)
    if hasattr(config, "use_cache"):
        config.use_cache = False  # training: no key/value cache kept for generation
    if task == "sequence_classification" and getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = 0  # the last token is found by the pad id, which the batches never hold
    mask_prob = float(params.get("mask_prob", OWN["mask_prob"]))
    seed = int(params.get("seed", OWN["seed"]))

    auto = {"causal_lm": transformers.AutoModelForCausalLM, "masked_lm": transformers.AutoModelForMaskedLM,
            "sequence_classification": transformers.AutoModelForSequenceClassification}[task]
    kwargs: dict[str, Any] = {"dtype": torch.float32}
    if params.get("attn_implementation") is not None:
        kwargs["attn_implementation"] = params["attn_implementation"]
    check_vocab(config)
    vocab = int(config.vocab_size)
    torch.manual_seed(seed)  # the model's init draws from the device's global generator
    with torch.device(device):  # the parameters are created, and initialised, on the device
        try:
            model = auto.from_config(config, **kwargs)
        except (TypeError, ValueError) as exc:  # a head count that does not divide the width, an unknown attention
            if "attn_implementation" in params and "attn" in str(exc).lower():
                raise param_error("attn_implementation", f"attn_implementation {params['attn_implementation']!r} "
                                  f"is refused by transformers: {said(exc)}") from None
            raise refused(config.model_type, overrides_of(params), exc) from None
    make = batch_maker(task, seq_len, vocab, mask_prob, int(config.num_labels), device,
                       device_generator(device, seed))  # the batches'

    def checkpoint() -> None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    info = {"num_parameters": sum(p.numel() for p in model.parameters()), "architecture": type(model).__name__,
            "model_type": config.model_type, "task": task, "seq_len": seq_len,
            "attn_implementation": model.config._attn_implementation,
            "transformers_version": transformers.__version__,
            "config_overrides": overrides_of(params)}
    if params.get("model") is not None:
        info["model"] = str(params["model"])
    return Workload(model=model, make_batch=make, loss=model_loss, tokens_per_sample=seq_len,
                    enable_checkpointing=checkpoint if model.supports_gradient_checkpointing else None,
                    lr=float(params.get("lr", OWN["lr"])), info=info)
