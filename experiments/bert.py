"""BERT masked-language-model pre-training on synthetic tokens, in plain PyTorch (no downloads).

The architecture follows Hugging Face's ``BertForMaskedLM`` (post-LN encoder, GELU, LayerNorm eps
1e-12, an MLM head whose decoder weight is tied to the word embedding), so throughput and memory
are comparable with it; attention runs through ``scaled_dot_product_attention``. The ``bert-base``
preset has 109,514,298 parameters (tied weights counted once), the same as ``BertForMaskedLM``.

Each synthetic sequence repeats a short motif (period 2 to 8) whose token ids are log-uniform
(``P(id) ~ 1/id``, Zipf-like, as word frequencies are): the frequencies are learned within tens of
steps, and a masked token is predictable from the same motif position one period away, which
the model learns over longer runs. Id 0 is reserved for [MASK]; 15% of positions are masked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from orchestrator.harness.workload import Workload, device_generator, param_error
from orchestrator.spec.knobs import is_int


@dataclass(frozen=True)
class BertConfig:
    """Architecture of one encoder; the presets fix every field, params may override any."""

    num_layers: int
    """Encoder layers."""
    hidden_size: int
    """Width of the residual stream; a multiple of ``num_heads``."""
    num_heads: int
    """Attention heads per layer."""
    intermediate_size: int
    """Width of each layer's feed-forward block."""
    vocab_size: int = 30522
    """Token ids, [MASK] (id 0) included."""
    max_position: int = 512
    """Rows of the position embedding: the longest sequence the model takes."""


PRESETS: dict[str, BertConfig] = {
    "bert-base": BertConfig(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
    "bert-large": BertConfig(num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096),
    "bert-mini": BertConfig(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "tiny": BertConfig(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, vocab_size=1000),
}
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(BertConfig))

PARAMS: dict[str, object] = {
    "model": "bert-base", "seq_len": 128, "num_layers": None, "hidden_size": None, "num_heads": None,
    "intermediate_size": None, "vocab_size": None, "max_position": None, "dropout": 0.1,
    "mask_prob": 0.15, "lr": 1e-4, "seed": 0,
}

MASK_ID = 0
IGNORE_INDEX = -100
MIN_PERIOD, MAX_PERIOD = 2, 8  # motif lengths, inclusive
TYPE_VOCAB_SIZE = 2
LAYER_NORM_EPS = 1e-12
INIT_STD = 0.02


# ---------------------------------------------------------------------------------------------
# Parameters


def resolve_config(params: dict[str, Any]) -> tuple[str, BertConfig]:
    """The preset named by ``params["model"]`` with every non-None override applied."""
    name = params.get("model", PARAMS["model"])
    if name not in PRESETS:
        raise param_error("model", f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    overrides = {k: params[k] for k in CONFIG_FIELDS if params.get(k) is not None}
    return str(name), dataclasses.replace(PRESETS[name], **overrides)


def validate_params(params: dict[str, Any]) -> None:
    """Raise ValueError naming the rule and the value; only keys present in ``params`` are checked."""
    if "model" in params:
        resolve_config({"model": params["model"]})
    for key in CONFIG_FIELDS:
        value = params.get(key)
        if value is not None and not (is_int(value) and value > 0):
            raise param_error(key, f"{key} must be a positive integer, got {value!r}")
    if params.get("vocab_size") is not None and params["vocab_size"] < 2:
        raise param_error("vocab_size", f"vocab_size must be at least 2 (id 0 is [MASK]), got {params['vocab_size']}")
    if "dropout" in params:
        p = params["dropout"]
        if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p < 1.0):
            raise param_error("dropout", f"dropout must be a number in [0, 1), got {p!r}")
    if "mask_prob" in params:
        p = params["mask_prob"]
        if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 < p <= 1.0):
            raise param_error("mask_prob", f"mask_prob must be a number in (0, 1], got {p!r}")

    # Cross-field rules see a value when it is given, or comes from a preset that is named here
    # (a preset searched in `space:` is not: build() checks that case).
    _, config = resolve_config(params)
    known = set(CONFIG_FIELDS) if "model" in params else {k for k in CONFIG_FIELDS if params.get(k) is not None}
    check_shapes(params, config, params.get("seq_len"), known)


def check_shapes(params: dict[str, Any], config: BertConfig, seq_len: int | None, known: set[str]) -> None:
    """hidden_size must split into heads and seq_len fit the position table (where both are known)."""
    if {"hidden_size", "num_heads"} <= known and config.hidden_size % config.num_heads:
        raise param_error("hidden_size" if "hidden_size" in params else "num_heads",
                       f"hidden_size must be divisible by num_heads, got hidden_size {config.hidden_size} "
                       f"and num_heads {config.num_heads}")
    if seq_len is not None and "max_position" in known and seq_len > config.max_position:
        raise param_error("seq_len", f"seq_len must be at most max_position, got seq_len {seq_len} "
                       f"and max_position {config.max_position}")


# ---------------------------------------------------------------------------------------------
# Model


class BertLayer(nn.Module):
    """One post-LN encoder layer: self-attention, then feed-forward, each with residual + LayerNorm."""

    def __init__(self, config: BertConfig, dropout: float) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_heads
        self.attn_dropout = dropout
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out = nn.Linear(h, h)
        self.attn_norm = nn.LayerNorm(h, eps=LAYER_NORM_EPS)
        self.ffn_in = nn.Linear(h, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, h)
        self.ffn_norm = nn.LayerNorm(h, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, t, h = hidden.shape
        heads = lambda x: x.view(b, t, self.num_heads, h // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.query(hidden)), heads(self.key(hidden)), heads(self.value(hidden))
        context = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout if self.training else 0.0)
        context = context.transpose(1, 2).reshape(b, t, h)
        hidden = self.attn_norm(hidden + self.dropout(self.attn_out(context)))
        ffn = self.ffn_out(F.gelu(self.ffn_in(hidden)))
        return self.ffn_norm(hidden + self.dropout(ffn))


class BertForMaskedLM(nn.Module):
    """Embeddings -> encoder layers -> MLM head; ``forward(input_ids)`` returns logits (B, T, V)."""

    def __init__(self, config: BertConfig, dropout: float) -> None:
        super().__init__()
        h = config.hidden_size
        self.config = config
        self.word = nn.Embedding(config.vocab_size, h)
        self.position = nn.Embedding(config.max_position, h)
        self.token_type = nn.Embedding(TYPE_VOCAB_SIZE, h)
        self.embed_norm = nn.LayerNorm(h, eps=LAYER_NORM_EPS)
        self.embed_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(BertLayer(config, dropout) for _ in range(config.num_layers))
        self.head_dense = nn.Linear(h, h)
        self.head_norm = nn.LayerNorm(h, eps=LAYER_NORM_EPS)
        self.decoder = nn.Linear(h, config.vocab_size)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The decoder's weight is the word embedding (one Parameter), as in BERT."""
        self.decoder.weight = self.word.weight

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None) -> None:
        """BERT's init: normal(0, 0.02) weights and embeddings, zero biases, LayerNorm ones."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)) and m is not self.decoder:
                nn.init.normal_(m.weight, 0.0, INIT_STD, generator=generator)
            if isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)  # type: ignore[arg-type]  # a module's bias attribute is a tensor where set

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        # position ids are 0..t-1 and token types all 0: lookups that are plain slices.
        x = self.word(input_ids) + self.position.weight[:t] + self.token_type.weight[0]
        x = self.embed_dropout(self.embed_norm(x))
        for layer in self.layers:
            x = layer(x)
        x = self.head_norm(F.gelu(self.head_dense(x)))
        return self.decoder(x)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters; a tied weight is one Parameter and counted once."""
    return sum(p.numel() for p in model.parameters())


def make_model(config: BertConfig, dropout: float, device: torch.device,
               generator: torch.Generator | None) -> BertForMaskedLM:
    """Build the model on ``device`` in float32, initialized from ``generator`` (a generator of
    ``device``; None: the device's global one).

    The module is created on the meta device (shapes only: no memory, no default init), then its
    parameters are allocated on ``device`` itself and initialized there: nothing is built on the
    CPU and copied. The same seed gives the same weights on the same kind of device; CPU and CUDA
    generators draw different numbers from one seed, so a CPU and a GPU trial start from
    different draws of the same distribution. On ``meta`` it stays shapes only.
    """
    with torch.device("meta"):
        model = BertForMaskedLM(config, dropout)
    if device.type == "meta":
        return model
    model = model.to_empty(device=device)
    model.tie_weights()  # to_empty gave the decoder a Parameter of its own: share the embedding again
    model.init_weights(generator)
    return model


# ---------------------------------------------------------------------------------------------
# Data and loss

MlmBatch = tuple[torch.Tensor, torch.Tensor]
"""(input_ids, labels), both (batch, seq_len) int64: [MASK] at masked inputs, -100 at unmasked labels."""


def make_motifs(batch_size: int, seq_len: int, vocab_size: int, device: torch.device,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, period): each sequence repeats a motif of ``period`` (2 to 8) token ids in 1..V-1
    (id 0 is never drawn), log-uniform like word frequencies; ids (batch, seq_len) int64, period
    (batch, 1). On ``device``, with fixed shapes and no host sync."""
    kw: dict[str, Any] = {"device": device, "generator": generator}
    # floor(V ** u) for uniform u is log-uniform on 1..V-1: P(id) ~ 1/id, like word frequencies.
    u = torch.rand(batch_size, MAX_PERIOD, **kw)
    motif = torch.pow(float(vocab_size), u).long().clamp_(1, vocab_size - 1)
    period = torch.randint(MIN_PERIOD, MAX_PERIOD + 1, (batch_size, 1), **kw)
    return motif.gather(1, torch.arange(seq_len, device=device) % period), period


def make_batch(batch_size: int, seq_len: int, vocab_size: int, mask_prob: float, device: torch.device,
               generator: torch.Generator | None) -> MlmBatch:
    """One batch of masked periodic sequences, generated on ``device`` with fixed shapes.

    Exactly ``max(1, round(mask_prob * seq_len))`` positions per sequence are masked, so no batch is
    without labels (a NaN loss) and the loss normalizer never changes.
    """
    kw: dict[str, Any] = {"device": device, "generator": generator}
    ids, _ = make_motifs(batch_size, seq_len, vocab_size, device, generator)
    n_masked = max(1, round(mask_prob * seq_len))
    masked_at = torch.rand(batch_size, seq_len, **kw).argsort(dim=1)[:, :n_masked]
    masked = torch.zeros(batch_size, seq_len, dtype=torch.bool, device=device).scatter_(1, masked_at, True)
    labels = torch.where(masked, ids, IGNORE_INDEX)
    inputs = torch.where(masked, MASK_ID, ids)
    return inputs, labels


def mlm_loss(model: nn.Module, batch: MlmBatch) -> torch.Tensor:
    """Cross-entropy over every position's logits; unmasked positions (-100) are ignored."""
    inputs, labels = batch
    logits = model(inputs)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE_INDEX)


# ---------------------------------------------------------------------------------------------
# The experiment contract


def build(params: dict[str, Any], device: torch.device) -> Workload:
    """The workload for one trial; harness keys in ``params`` (batch_size, dtype, ...) are ignored."""
    validate_params(params)
    preset, config = resolve_config(params)
    seq_len = int(params.get("seq_len", PARAMS["seq_len"]))
    check_shapes(params, config, seq_len, set(CONFIG_FIELDS))
    dropout = float(params.get("dropout", PARAMS["dropout"]))
    mask_prob = float(params.get("mask_prob", PARAMS["mask_prob"]))
    seed = int(params.get("seed", PARAMS["seed"]))

    model = make_model(config, dropout, device, device_generator(device, seed))
    generator = device_generator(device, seed)  # the batches'

    def batch_fn(batch_size: int) -> MlmBatch:
        return make_batch(batch_size, seq_len, config.vocab_size, mask_prob, device, generator)

    info = {"num_parameters": count_parameters(model), "preset": preset, **dataclasses.asdict(config),
            "seq_len": seq_len, "dropout": dropout, "mask_prob": mask_prob,
            "data_generator": "device" if generator is not None else "global"}
    return Workload(model=model, make_batch=batch_fn, loss=mlm_loss, tokens_per_sample=seq_len,
                    blocks=tuple(model.layers), lr=float(params.get("lr", PARAMS["lr"])), info=info)


def expected_parameters(config: BertConfig) -> int:
    """The parameter count by formula (for checking a model against its config)."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    embeddings = (v + config.max_position + TYPE_VOCAB_SIZE) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    head = (h * h + h) + 2 * h + v  # dense, LayerNorm, decoder bias (its weight is the embedding)
    return embeddings + config.num_layers * layer + head

