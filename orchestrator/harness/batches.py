"""What a batch a script's DataLoader yields counts as: its examples (``samples``) and, for a
language model's ``input_ids``, its tokens. A DataLoader that batches by ``batch_size`` fetched
that many examples (``fetched``), whatever its collate made of them; any other batch is read by
its shape (``first_dimension``). ``harness/script.py``'s meter counts them where every DataLoader
yields (``counting_batches``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch


class Meter(Protocol):
    """What ``counting_batches`` tells (``harness/script.py``'s ``Meter``)."""

    def on_pass(self, iterator: int, source: int, ended: bool) -> None: ...

    def on_batch(self, batch: object, expected: int | None = None, source: int = 0,
                 fetched: int | None = None) -> None: ...


def first_dimension(batch: object, expected: int | None = None) -> tuple[int | None, int | None]:
    """(samples, tokens) of one batch: a tensor's first dimension; a mapping's ``input_ids`` (its
    elements are the tokens, padding included) or else its first tensor; a sequence by its shape:
    per-example mappings (a collate that returns its list) count one each, a tuple of per-example
    tuples (``tuple(zip(*batch))``, detection models' collate) counts its first tuple's items, a
    sequence of stacked tensors (``(x, y)``) its first tensor's first dimension. Where the shape
    leaves it open (a list of per-example tensors or tuples), the count that equals ``expected``
    (the DataLoader's ``batch_size``) is taken, and in an epoch's last, shorter batch the count
    that does not exceed it (an example's own first dimension, a sequence's length, can). (None,
    None) where no tensor is found."""
    if isinstance(batch, torch.Tensor):
        return (int(batch.shape[0]), None) if batch.dim() else (None, None)
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids") if "input_ids" in batch else None
        if isinstance(ids, torch.Tensor) and ids.dim():
            return int(ids.shape[0]), (int(ids.numel()) if ids.dim() == 2 else None)
        for value in batch.values():
            found = first_dimension(value)
            if found[0] is not None:
                return found
        return None, None
    if not isinstance(batch, (list, tuple)) or not batch:
        return None, None
    first = batch[0]
    if all(isinstance(item, Mapping) for item in batch):  # per-example mappings
        ids = [item.get("input_ids") for item in batch]
        tokens = sum(int(t.numel()) for t in ids if isinstance(t, torch.Tensor)) if all(
            isinstance(t, torch.Tensor) and t.dim() == 1 for t in ids) else None
        return len(batch), tokens
    if isinstance(first, (list, tuple)) and first:  # per-field tuples of examples, or per-example tuples
        guess, other = (len(first), len(batch)) if isinstance(batch, tuple) else (len(batch), len(first))
        return (other if expected is not None and guess != expected and other == expected else guess), None
    samples, tokens = first_dimension(first)
    if expected is not None and samples != expected and (len(batch) == expected or (  # per-example tensors
            len(batch) < expected and (samples is None or samples > expected))):  # an epoch's last batch: never over
        return len(batch), None
    return samples, tokens


def fetched(loader_iter: object) -> int | None:
    """The examples a DataLoader that batches by ``batch_size`` fetched for the batch its iterator
    just yielded: the batch size, and for a map-style dataset's last batch of an epoch (not
    dropped) the rest; an iterable dataset's last, shorter batch counts as whole. Whatever the
    collate made of them: a nested ``((image, features), label)``, a sequence-first ``(L, B)``
    tensor, padding-free packed ``input_ids`` of shape ``(1, T)`` were read by their shape as 2, L
    and 1. None where the loader does not batch by a batch size (``batch_size=None``, a
    ``batch_sampler`` of its own): the batch's shape then says (``first_dimension``)."""
    from torch.utils.data import BatchSampler
    from torch.utils.data.dataloader import _DatasetKind

    sampler = getattr(loader_iter, "_index_sampler", None)
    if not getattr(loader_iter, "_auto_collation", False) or type(sampler) is not BatchSampler:
        return None
    size = sampler.batch_size
    if not isinstance(size, int) or size <= 0:
        return None
    if getattr(loader_iter, "_dataset_kind", None) != _DatasetKind.Map or sampler.drop_last:
        return size
    try:
        batches, total = len(sampler), len(sampler.sampler)  # type: ignore[arg-type]  # a sampler without len: TypeError
    except TypeError:
        return size
    return size if getattr(loader_iter, "_num_yielded", 0) < batches else total - size * (batches - 1)


def counting_batches(meter: Meter) -> Callable[[], None]:
    """Every batch a DataLoader's iterator yields goes through ``meter.on_batch``; returns the undo."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    inner = _BaseDataLoaderIter.__next__

    def __next__(self: Any) -> Any:
        source = id(getattr(self, "_dataset", None))
        try:
            batch = inner(self)
        except StopIteration:
            meter.on_pass(id(self), source, ended=True)
            raise
        meter.on_pass(id(self), source, ended=False)
        sampler = getattr(self, "_index_sampler", None) if getattr(self, "_auto_collation", False) else None
        meter.on_batch(batch, getattr(sampler, "batch_size", None), source, fetched(self))
        return batch

    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]  # the one place every loader yields

    def undo() -> None:
        _BaseDataLoaderIter.__next__ = inner  # type: ignore[method-assign]  # the original put back
    return undo
