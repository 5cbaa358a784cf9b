"""Running the user's Python (a ``.py`` spec, a ``CustomOptimizer``'s or ``CustomCombiner``'s
callable) so that whatever it does ends in one line a user can act on.

- **os._exit.** ``os._exit(n)`` ends the process at once: no ``finally`` block, no message, and
  the exit status the code chose, so a spec calling ``os._exit(0)`` made ``tpuemb compile`` look
  successful with nothing written. While user code runs (:func:`exit_guard`), ``os._exit`` is
  replaced by a function that records the call and raises :class:`ExitCalled`, a
  ``BaseException`` (an ``except Exception`` in the user's code does not swallow it); the caller
  reports it as an error, and reports a call the user's code caught too, once the code returns.
  Only the ``os._exit`` the code looks up at call time is replaced (``posix._exit`` or a
  reference taken before the code ran are not), and only in this process: a child the code
  forks (``multiprocessing``) still ends with it.
- **BaseException.** Whatever the code raises becomes an error naming the exception, including
  ``BaseException`` subclasses of its own (``class Stop(BaseException)``) and ``SystemExit``
  (``sys.exit()`` in a spec is a mistake, not a way to end tpuemb). ``KeyboardInterrupt`` keeps
  its meaning: Ctrl-C stops tpuemb (exit status 130).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ExitCalled", "exit_guard", "tree_leaves", "user_value"]

#: The children of a node of a user's structure, as (path, child) pairs; ``None`` for a leaf.
Children = Callable[[Any, str], "list[tuple[str, Any]] | None"]


#: The most containers :func:`tree_leaves` walks: a structure that shares one list many times
#: over (2^depth leaves from a few objects) is refused rather than walked for ever.
MAX_TREE_NODES = 1_000_000


def tree_leaves(root: Any, children: Children, *, what: str) -> list[tuple[str, Any]]:
    """The leaves of the user's structure ``root`` (``what`` names it) with their paths, depth
    first in ``children``'s order, walked without recursion (any depth). A structure that
    contains itself (a list appended to itself, at any depth) is a ValueError naming the path
    where it does, not a RecursionError; so is one of more than :data:`MAX_TREE_NODES`
    containers."""
    out: list[tuple[str, Any]] = []
    inside: set[int] = set()  # the nodes on the current path
    todo: list[tuple[Any, str, bool]] = [(root, "", False)]  # (node, path, leaving it)
    walked = 0
    while todo:
        node, path, leaving = todo.pop()
        if leaving:
            inside.discard(id(node))
            continue
        kids = children(node, path)
        if kids is None:
            out.append((path, node))
            continue
        if id(node) in inside:
            raise ValueError(f"{what} contains itself at {path!r}: it must be a tree (dicts, "
                             "lists and tuples holding the features)")
        walked += 1
        if walked > MAX_TREE_NODES:
            raise ValueError(f"{what} holds more than {MAX_TREE_NODES:,} dicts, lists and "
                             "tuples: does it share one container many times over?")
        inside.add(id(node))
        todo.append((node, path, True))
        todo.extend((kid, kid_path, False) for kid_path, kid in reversed(list(kids)))
    return out


def user_value(x: Any) -> Any:
    """A hyper-parameter or learning rate: a number, or a zero-argument callable's value."""
    return x() if callable(x) else x


class ExitCalled(BaseException):
    """User code called ``os._exit(code)`` under :func:`exit_guard`."""

    def __init__(self, code: object) -> None:
        super().__init__(f"os._exit({code!r})")
        self.code = code


@contextmanager
def exit_guard() -> Iterator[list[object]]:
    """Within the block, ``os._exit(code)`` raises :class:`ExitCalled`; the list yielded holds
    the code of every such call (one the user's code caught included)."""
    calls: list[object] = []
    real = os._exit
    process = os.getpid()

    def refuse(code: object) -> None:
        if os.getpid() != process:  # a child the code forked (multiprocessing) ends as usual
            real(code)  # type: ignore[arg-type]
        calls.append(code)
        raise ExitCalled(code)

    os._exit = refuse  # type: ignore[assignment]
    try:
        yield calls
    finally:
        os._exit = real
