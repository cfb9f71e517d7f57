"""A Hugging Face ``Trainer`` script: TrainingArguments come from the command line
(``HfArgumentParser``), the model is a small BERT built from its config, the data random tokens.
Nothing in it knows about orchestrate (``hf_trainer.yaml`` sweeps it unchanged)."""

from dataclasses import dataclass

import torch
from transformers import BertConfig, BertForSequenceClassification, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    hidden_size: int = 64
    layers: int = 2
    seq_len: int = 64


class RandomText(torch.utils.data.Dataset):
    """Random token ids and labels, as a tokenized dataset gives them."""

    def __init__(self, n: int, seq_len: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (256, seq_len), generator=g)
        self.labels = torch.randint(0, 2, (256,), generator=g)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i % 256], "labels": self.labels[i % 256]}


def main() -> None:
    model_args, training_args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    h = model_args.hidden_size
    config = BertConfig(vocab_size=1000, hidden_size=h, num_hidden_layers=model_args.layers, num_attention_heads=2,
                        intermediate_size=4 * h, max_position_embeddings=model_args.seq_len, num_labels=2)
    model = BertForSequenceClassification(config)
    trainer = Trainer(model=model, args=training_args, train_dataset=RandomText(1_000_000, model_args.seq_len, 1000))
    trainer.train()


if __name__ == "__main__":
    main()
