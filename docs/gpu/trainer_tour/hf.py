"""A Hugging Face ``Trainer`` script as users write one: ``TrainingArguments`` from the command
line (``HfArgumentParser``), a small BERT built from its config, random tokens. Its one addition
for the tour: a callback that logs its own count, one line an optimizer step, ``step time seen``
(``time.perf_counter`` after the device is synchronized), to ``own-TAG.log``; ``check.py`` sets
it against the harness's figure over the same window."""

import time
from dataclasses import dataclass

import torch
from transformers import (BertConfig, BertForSequenceClassification, HfArgumentParser, Trainer, TrainerCallback,
                          TrainingArguments)


@dataclass
class TourArguments:
    tag: str = "run"
    hidden_size: int = 256
    layers: int = 4
    seq_len: int = 128


class RandomText(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids, self.labels, self.n = torch.randint(0, 8000, (512, seq_len), generator=g), torch.randint(0, 2, (512,), generator=g), n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i % 512], "labels": self.labels[i % 512]}


class OwnCount(TrainerCallback):
    def __init__(self, tag: str, per_step: int) -> None:
        self.log, self.per_step, self.seen = open(f"own-{tag}.log", "w", buffering=1), per_step, 0

    def on_step_end(self, args, state, control, **kwargs):  # after each optimizer step
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seen += self.per_step
        self.log.write(f"{state.global_step} {time.perf_counter():.6f} {self.seen}\n")


def main() -> None:
    tour, args = HfArgumentParser((TourArguments, TrainingArguments)).parse_args_into_dataclasses()
    h = tour.hidden_size
    model = BertForSequenceClassification(BertConfig(vocab_size=8000, hidden_size=h, num_hidden_layers=tour.layers,
                                                     num_attention_heads=4, intermediate_size=4 * h,
                                                     max_position_embeddings=tour.seq_len, num_labels=2))
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    trainer = Trainer(model=model, args=args, train_dataset=RandomText(10_000_000, tour.seq_len),
                      eval_dataset=RandomText(256, tour.seq_len), callbacks=[OwnCount(tour.tag, per_step)])
    trainer.train()


if __name__ == "__main__":
    main()
