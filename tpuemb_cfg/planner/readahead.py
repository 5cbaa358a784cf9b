"""Reading one record batch ahead: Parquet's decoding runs in a background thread while the
planner converts, counts and preprocesses the record batch before (pyarrow releases the GIL
while it decompresses and decodes, so the two overlap).

Memory: at most one item beyond the one the consumer holds (the thread starts on an item only
once the consumer has taken the one before), whatever the sample's length; a Parquet record
batch lives in Arrow's memory pool until the consumer converts it. The thread is a daemon and
stops before its next item once the consumer is closed (an error, Ctrl-C, a pass cut short); an
exception of the iterator is raised in the consumer's thread, as if it had read the item itself.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = ["read_ahead"]

T = TypeVar("T")

#: How often (seconds) a reader waiting for the consumer to take an item looks whether it left.
_POLL = 0.1

_END = object()


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """The items of ``items``, each taken from it in a daemon thread while the consumer works
    on the one before."""
    handover: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
    room = threading.Semaphore(1)  # released by the consumer as it takes an item
    stop = threading.Event()

    def work() -> None:
        try:
            while True:
                while not room.acquire(timeout=_POLL):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                item = next(items, _END)
                handover.put((item, None))
                if item is _END:
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            handover.put((_END, exc))

    thread = threading.Thread(target=work, name="tpuemb-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = handover.get()
            room.release()
            if error is not None:
                raise error
            if item is _END:
                break
            yield item
        thread.join()
    finally:
        stop.set()
