"""``planner.readahead``: the items in order, one taken ahead at most, the iterator's errors raised
in the consumer, the thread gone once the consumer is closed."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tpuemb_cfg.planner.readahead import read_ahead


class _Source:
    """0, 1, ... ``n - 1``, counting how many were taken; ``fail_at``: raise there instead."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.taken = n, fail_at, 0

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            if i == self.fail_at:
                raise OSError(f"bad item {i}")
            self.taken += 1
            yield i


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tpuemb-read-ahead"]


def test_the_items_come_in_order_and_at_most_one_ahead() -> None:
    source = _Source(7)
    seen = []
    for item in read_ahead(iter(source)):
        seen.append(item)
        assert source.taken <= len(seen) + 1  # the one held and at most one more
    assert seen == list(range(7))
    assert source.taken == 7


def test_an_error_of_the_iterator_is_raised_in_the_consumer_after_the_items_before() -> None:
    seen = []
    with pytest.raises(OSError, match="bad item 3"):
        for item in read_ahead(iter(_Source(7, fail_at=3))):
            seen.append(item)
    assert seen == [0, 1, 2]


def test_a_closed_consumer_stops_the_thread_and_takes_no_more() -> None:
    source = _Source(100)
    items = read_ahead(iter(source))
    assert next(items) == 0
    items.close()
    for thread in _readers():
        thread.join(timeout=30)
    assert not _readers()
    assert source.taken <= 2
