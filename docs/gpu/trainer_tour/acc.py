"""An Accelerate loop as users write one: ``Accelerator(gradient_accumulation_steps, mixed_precision)``,
``prepare``, ``accumulate``, ``backward``, clipping on the synchronizing step, a per-step
scheduler, and an evaluation every 5 updates with ``gather_for_metrics``; a small BERT built from
its config, random tokens. Its one addition for the tour: its own count, one line an optimizer
update, ``step time seen`` (after the device is synchronized), to ``own-TAG.log`` (``check.py``)."""

import argparse
import time

import torch
from accelerate import Accelerator
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup


def tokens(n: int, seq_len: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(n)
    return torch.utils.data.TensorDataset(torch.randint(0, 8000, (n, seq_len), generator=g),
                                          torch.randint(0, 2, (n,), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--mixed-precision", default="no", choices=["no", "bf16", "fp16"])
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--tag", default="run")
    args = p.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum, mixed_precision=args.mixed_precision)
    model = BertForSequenceClassification(BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4,
                                                     num_attention_heads=4, intermediate_size=1024,
                                                     max_position_embeddings=128, num_labels=2))
    train = torch.utils.data.DataLoader(tokens(65536, 128), batch_size=args.batch_size, shuffle=True, drop_last=True)
    evaluation = torch.utils.data.DataLoader(tokens(256, 128), batch_size=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = get_linear_schedule_with_warmup(optimizer, 10, 100000)
    model, optimizer, train, evaluation, scheduler = accelerator.prepare(model, optimizer, train, evaluation, scheduler)
    log, seen, updates = open(f"own-{args.tag}.log", "w", buffering=1), 0, 0
    for epoch in range(1000):
        for ids, labels in train:
            with accelerator.accumulate(model):
                loss = model(input_ids=ids, labels=labels).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            seen += ids.shape[0]
            if not accelerator.sync_gradients:
                continue
            updates += 1
            if args.eval_every and updates % args.eval_every == 0:
                model.eval()
                for e_ids, e_labels in evaluation:
                    with torch.no_grad():
                        logits = model(input_ids=e_ids).logits
                    accelerator.gather_for_metrics((logits.argmax(-1), e_labels))
                model.train()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            log.write(f"{updates} {time.perf_counter():.6f} {seen}\n")


if __name__ == "__main__":
    main()
