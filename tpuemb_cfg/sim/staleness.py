"""What happens to a stale gradient: TensorFlow's two multi-worker optimizer wrappers (spec:
``accumulator.md`` sections 3 and 4), simulated deterministically.

- :class:`DropStaleGradient` (``DropStaleGradientOptimizer``): a worker's whole step is applied
  when it is at most ``max_staleness`` updates old, and dropped otherwise.
- :class:`SyncReplicas` (``SyncReplicasOptimizer``): each variable's conditional accumulator
  (:mod:`.accumulators`) drops gradients older than its clock; the chief averages ``R`` fresh ones
  per update and hands out tokens that say which step a replica computes next.

Where TensorFlow blocks, these models raise :class:`~.accumulators.WouldBlock` or mark a replica
as waiting, so hangs become visible; every decision is logged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._args import int_scalar
from .accumulators import (
    ConditionalAccumulator,
    IndexedSlices,
    SparseConditionalAccumulator,
    WouldBlock,
)

__all__ = [
    "DropStaleGradient",
    "StaleDecision",
    "SyncEvent",
    "SyncReplicas",
    "TokenQueue",
]


# --------------------------------------------------------------------------------------------
# DropStaleGradientOptimizer


@dataclass(frozen=True)
class StaleDecision:
    """One staleness decision of :class:`DropStaleGradient`."""

    local_step: int
    global_step: int
    staleness: int
    applied: bool


class DropStaleGradient:
    """TensorFlow 1.x's ``DropStaleGradientOptimizer`` rule (spec section 3).

    A worker snapshots the global step before computing its gradients (its ``local_step``). When
    it applies them, ``staleness = global_step - local_step``; with ``staleness <= max_staleness``
    the whole step is applied and the global step advances, otherwise the whole step (every
    variable) is dropped, the global step stays, and ``stale_counter`` grows by one. A negative
    ``max_staleness`` drops everything.

    Two ways to use it: :meth:`should_apply` when the caller owns the global step, or
    :meth:`apply_gradients` to let this object hold the shared global step as TensorFlow's
    variable does. Both record a :class:`StaleDecision` in ``decisions`` and count drops.
    """

    def __init__(self, max_staleness: int, global_step: int = 0) -> None:
        self._max_staleness = int_scalar(max_staleness, "max_staleness")
        self._global_step = int_scalar(global_step, "global_step")
        self._stale_counter = 0
        self._decisions: list[StaleDecision] = []

    @property
    def max_staleness(self) -> int:
        return self._max_staleness

    @property
    def global_step(self) -> int:
        """The shared global step held for :meth:`apply_gradients` (+1 per applied step)."""
        return self._global_step

    @property
    def stale_counter(self) -> int:
        """The number of dropped steps."""
        return self._stale_counter

    @property
    def decisions(self) -> list[StaleDecision]:
        """A copy of every decision, oldest first."""
        return list(self._decisions)

    def staleness(self, local_step: int, global_step: int) -> int:
        """``global_step - local_step``: how many updates happened since the snapshot."""
        return int_scalar(global_step, "global_step") - int_scalar(local_step, "local_step")

    def should_apply(self, local_step: int, global_step: int) -> bool:
        """Decide one step: True (apply) when ``global_step - local_step <= max_staleness``.

        Records the decision and counts a drop in ``stale_counter``; does not touch
        ``self.global_step`` (the caller advances its own step when this returns True).
        """
        staleness = self.staleness(local_step, global_step)
        applied = staleness <= self._max_staleness
        if not applied:
            self._stale_counter += 1
        self._decisions.append(StaleDecision(
            local_step=int(local_step), global_step=int(global_step), staleness=staleness,
            applied=applied,
        ))
        return applied

    def apply_gradients(self, local_step: int, apply: Callable[[], object] | None = None) -> bool:
        """One worker's ``apply_gradients`` against the held global step, decided atomically.

        If the step is fresh enough, calls ``apply()`` (the wrapped optimizer's update for every
        variable) and advances ``global_step``; otherwise nothing is applied.
        """
        applied = self.should_apply(local_step, self._global_step)
        if applied:
            if apply is not None:
                apply()
            self._global_step += 1
        return applied

    def staleness_percentage(self, global_step: int | None = None) -> float:
        """TensorFlow's summary "Gradient staleness percentage": ``stale_counter / (step + 1)``."""
        step = self._global_step if global_step is None else int_scalar(global_step, "global_step")
        return self._stale_counter / (step + 1)


# --------------------------------------------------------------------------------------------
# SyncReplicasOptimizer


class TokenQueue:
    """TensorFlow's token queue of ``SyncReplicasOptimizer``: the global steps tokens hold, in
    order, stored as runs of equal steps (``[step, count]``), so that ``--init-tokens`` or
    ``replicas_to_aggregate`` of 2^31 costs two numbers, not 2^31 entries. Iterating yields
    every token (``list(queue)`` for a short queue)."""

    def __init__(self) -> None:
        self._runs: deque[list[int]] = deque()
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[int]:
        for step, count in self._runs:
            for _ in range(count):
                yield step

    def put(self, step: int, count: int) -> None:
        """Enqueue ``count`` tokens holding ``step``."""
        if count <= 0:
            return
        if self._runs and self._runs[-1][0] == step:
            self._runs[-1][1] += count
        else:
            self._runs.append([step, count])
        self._length += count

    def popleft(self) -> int:
        """Dequeue the oldest token (``IndexError`` when empty, as ``deque``)."""
        run = self._runs[0]
        run[1] -= 1
        if not run[1]:
            self._runs.popleft()
        self._length -= 1
        return run[0]


@dataclass(frozen=True)
class SyncEvent:
    """One event of a :class:`SyncReplicas` run.

    ``kind``: ``"apply"`` (a replica's gradient for ``variable``: ``accepted`` tells whether the
    accumulator kept it), ``"token"`` (``replica`` dequeued a token holding ``step``), ``"wait"``
    (``replica`` found the token queue empty), ``"take"`` (the chief's take for ``variable`` fired),
    ``"update"`` (the chief applied the aggregated gradients; ``step`` is the new global step),
    ``"enqueue"`` (``count`` tokens holding ``step`` were added to the queue).
    """

    kind: Literal["apply", "token", "wait", "take", "update", "enqueue"]
    global_step: int
    replica: int | None = None
    variable: str | None = None
    local_step: int | None = None
    accepted: bool | None = None
    step: int | None = None
    count: int | None = None


Gradient = npt.ArrayLike | IndexedSlices | tuple[Any, Any]


class SyncReplicas:
    """``tf.compat.v1.train.SyncReplicasOptimizer`` as a deterministic, single-threaded model.

    ``R = replicas_to_aggregate`` of ``N = total_num_replicas`` replicas contribute to each update.
    Each variable has its own accumulator (dense, with its declared shape, or sparse with per-row
    MEAN); replicas apply with their ``local_step`` and then dequeue a token holding the step to use
    next; the chief takes ``R`` gradients per variable, updates, advances the global step and
    enqueues ``max(N, R)`` tokens. Where TensorFlow blocks, this model raises :class:`WouldBlock`
    (chief) or marks the replica as waiting (replica), so hangs become visible.
    """

    def __init__(self, replicas_to_aggregate: int, total_num_replicas: int | None = None, *,
                 dense: Mapping[str, Sequence[int | None] | None] | None = None,
                 sparse: Iterable[str] = (), dtype: npt.DTypeLike = np.float32,
                 global_step: int = 0) -> None:
        self.replicas_to_aggregate = int_scalar(replicas_to_aggregate, "replicas_to_aggregate")
        if self.replicas_to_aggregate < 1:
            raise ValueError(
                f"replicas_to_aggregate must be >= 1, got {self.replicas_to_aggregate}"
            )
        total = self.replicas_to_aggregate if total_num_replicas is None else total_num_replicas
        self.total_num_replicas = int_scalar(total, "total_num_replicas")
        if self.total_num_replicas < 1:
            raise ValueError(f"total_num_replicas must be >= 1, got {self.total_num_replicas}")
        self.tokens_per_step = max(self.total_num_replicas, self.replicas_to_aggregate)
        self.accumulators: dict[str, ConditionalAccumulator | SparseConditionalAccumulator] = {}
        for name, shape in (dense or {}).items():
            self.accumulators[name] = ConditionalAccumulator(shape, dtype)
        for name in sparse:
            if name in self.accumulators:
                raise ValueError(f"variable {name!r} is declared both dense and sparse")
            self.accumulators[name] = SparseConditionalAccumulator(None, dtype)
        if not self.accumulators:
            raise ValueError("Must supply at least one variable (pass dense= or sparse=)")
        self._global_step = int_scalar(global_step, "global_step")
        self.local_steps = [self._global_step] * self.total_num_replicas
        self.tokens = TokenQueue()
        self._waiting: deque[int] = deque()
        self._taken: dict[str, Any] = {}
        self._events: list[SyncEvent] = []

    @property
    def global_step(self) -> int:
        return self._global_step

    @property
    def events(self) -> list[SyncEvent]:
        """A copy of the event log, oldest first (accumulator drops: see ``accumulators``)."""
        return list(self._events)

    @property
    def waiting(self) -> list[int]:
        """Replicas blocked on an empty token queue, in the order they will be served."""
        return list(self._waiting)

    def chief_init(self) -> None:
        """Align every accumulator's clock with the global step (TensorFlow's chief init op)."""
        for accumulator in self.accumulators.values():
            accumulator.set_global_step(self._global_step)

    def init_tokens(self, num_tokens: int = -1) -> int:
        """``get_init_tokens_op``: put the first tokens in the queue; returns how many.

        ``-1`` means ``R`` tokens; fewer than ``R - N`` cannot finish the first step (ValueError).
        """
        count = int_scalar(num_tokens, "num_tokens")
        needed = self.replicas_to_aggregate - self.total_num_replicas
        if count == -1:
            count = self.replicas_to_aggregate
        elif count < needed:
            raise ValueError(
                f"Too few tokens to finish the first step: {count} (given) vs {needed} (needed)"
            )
        if count > 0:
            self._enqueue(count)
        return max(count, 0)

    def start(self, num_init_tokens: int = -1) -> None:
        """The chief's start-up: :meth:`chief_init`, then :meth:`init_tokens`."""
        self.chief_init()
        self.init_tokens(num_init_tokens)

    def replica_step(self, replica: int, grads: Mapping[str, Gradient]) -> dict[str, bool]:
        """One replica's train op: apply its gradients with its ``local_step``, then take a token.

        ``grads`` maps variable names to dense arrays or sparse ``IndexedSlices`` /
        ``(indices, values)``; a variable left out has no gradient this step. Returns, per
        variable, whether the accumulator accepted the gradient. Raises :class:`WouldBlock` if the
        replica is still waiting for a token from its previous step. Gradients go to the
        accumulators one variable at a time, in ``grads`` order: a gradient refused with
        ``ValueError`` (a shape error) stops the step, the variables before it keep theirs.
        """
        rid = self._replica(replica)
        if rid in self._waiting:
            raise WouldBlock(
                f"replica {rid} is still waiting for a token (queue empty); the chief must finish "
                f"step {self._global_step} first",
                global_step=self._global_step,
            )
        parsed = [(name, self._split(name, grad)) for name, grad in grads.items()]
        local_step = self.local_steps[rid]
        accepted: dict[str, bool] = {}
        for name, grad in parsed:
            accumulator = self.accumulators[name]
            if isinstance(accumulator, SparseConditionalAccumulator):
                assert isinstance(grad, IndexedSlices)
                ok = accumulator.apply_indexed_slices_grad(
                    grad.indices, grad.values, local_step, grad.dense_shape)
            else:
                ok = accumulator.apply_grad(grad, local_step)
            accepted[name] = ok
            self._events.append(SyncEvent(
                kind="apply", global_step=self._global_step, replica=rid, variable=name,
                local_step=local_step, accepted=ok,
            ))
        if self.tokens:
            self._give_token(rid)
        else:
            self._waiting.append(rid)
            self._events.append(SyncEvent(kind="wait", global_step=self._global_step, replica=rid))
        return accepted

    def chief_step(self, update: Callable[[dict[str, Any]], object] | None = None
                   ) -> dict[str, Any]:
        """The chief's train op: take ``R`` gradients per variable, update, enqueue tokens.

        Takes fire per variable as soon as that accumulator holds ``R`` gradients (as TensorFlow's
        independent take ops do), so a call may fire some takes and then raise :class:`WouldBlock`
        naming the variables still short; the fired ones are kept for the next call. When every
        take has fired, ``update(aggregated)`` runs (the wrapped optimizer), the global step
        advances, ``max(N, R)`` tokens are enqueued and waiting replicas are served in order.
        Returns the aggregated gradients (dense arrays, or ``(indices, values)`` for sparse).
        """
        required = self.replicas_to_aggregate
        for name, accumulator in self.accumulators.items():
            if name in self._taken or accumulator.num_accumulated() < required:
                continue
            if isinstance(accumulator, SparseConditionalAccumulator):
                self._taken[name] = accumulator.take_indexed_slices_grad(required)
            else:
                self._taken[name] = accumulator.take_grad(required)
            self._events.append(SyncEvent(kind="take", global_step=self._global_step,
                                          variable=name))
        short = {name: acc.num_accumulated() for name, acc in self.accumulators.items()
                 if name not in self._taken}
        if short:
            detail = ", ".join(f"{name!r} has {count}" for name, count in short.items())
            raise WouldBlock(
                f"chief step {self._global_step} would block: each variable needs {required} fresh "
                f"gradients; {detail}",
                num_required=required, num_accumulated=min(short.values()),
                global_step=self._global_step,
            )
        aggregated = self._taken
        if update is not None:
            update(aggregated)  # if this raises, the takes are kept and the next call retries
        self._taken = {}
        self._global_step += 1
        self._events.append(SyncEvent(kind="update", global_step=self._global_step,
                                      step=self._global_step))
        self._enqueue(self.tokens_per_step)
        return aggregated

    def num_dropped(self) -> dict[str, int]:
        """Stale gradients dropped so far, per variable."""
        return {name: acc.num_dropped for name, acc in self.accumulators.items()}

    def _replica(self, replica: int) -> int:
        rid = int_scalar(replica, "replica")
        if not 0 <= rid < self.total_num_replicas:
            raise ValueError(
                f"replica {rid} does not exist: replicas are 0..{self.total_num_replicas - 1}"
            )
        return rid

    def _split(self, name: str, grad: Gradient) -> Any:
        accumulator = self.accumulators.get(name)
        if accumulator is None:
            raise ValueError(
                f"unknown variable {name!r}: declared variables are {sorted(self.accumulators)}"
            )
        sparse = isinstance(accumulator, SparseConditionalAccumulator)
        if sparse and type(grad) is tuple and len(grad) == 2:
            grad = IndexedSlices(grad[0], grad[1])
        if sparse != isinstance(grad, IndexedSlices):
            kind = "sparse (IndexedSlices)" if sparse else "dense (an array)"
            raise ValueError(f"Unknown grad type! variable {name!r} takes {kind} gradients")
        return grad

    def _give_token(self, rid: int) -> None:
        token = self.tokens.popleft()
        self.local_steps[rid] = token
        self._events.append(SyncEvent(kind="token", global_step=self._global_step, replica=rid,
                                      step=token))

    def _enqueue(self, count: int) -> None:
        self.tokens.put(self._global_step, count)
        self._events.append(SyncEvent(kind="enqueue", global_step=self._global_step,
                                      step=self._global_step, count=count))
        while self._waiting and self.tokens:
            self._give_token(self._waiting.popleft())
