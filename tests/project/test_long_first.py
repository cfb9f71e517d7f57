"""The suite's order for pytest-xdist (``conftest.long_first``): every test once and in its
module's order, a long module's tests together, the first worker's share starting with the
longest module; also when the tests chosen are mostly long ones (a developer's ``-n 2`` over a few
long modules once stopped the collection with StopIteration)."""

from __future__ import annotations

import pytest

from conftest import LONGEST, long_first

LONG = sorted(LONGEST, key=lambda n: -LONGEST[n])


@pytest.mark.parametrize("modules, workers", [
    ([(LONG[0], 4), (LONG[1], 4), (LONG[2], 4), ("spec/test_rules.py", 2)], 2),  # fewer short tests than the shares ask
    ([(LONG[0], 4), (LONG[1], 4), ("spec/test_rules.py", 4)], 2),
    ([(LONG[3], 3), ("project/test_zygote.py", 4)], 2),
    ([(LONG[0], 2), (LONG[1], 2), (LONG[2], 2), ("a.py", 5), ("b.py", 5), ("c.py", 5)], 3),
    ([("a.py", 3), ("b.py", 3)], 3),                                                  # none long
    ([(LONG[0], 3)], 1),
])
def test_every_test_once_long_modules_together_and_first(modules: list[tuple[str, int]], workers: int) -> None:
    items = [f"{m}::t{i}" for m, n in modules for i in range(n)]
    module = {item: item.split("::")[0] for item in items}
    out = long_first(items, module, workers)
    assert sorted(out) == sorted(items)
    for m, _ in modules:
        at = [i for i, item in enumerate(out) if module[item] == m]
        assert [out[i] for i in at] == [x for x in items if module[x] == m]  # in their order
        if m in LONGEST:
            assert at == list(range(at[0], at[0] + len(at)))  # together
    longs = [m for m, _ in modules if m in LONGEST]
    if longs:
        assert module[out[0]] == max(longs, key=lambda n: LONGEST[n])
