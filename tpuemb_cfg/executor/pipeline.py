"""The per-row pipeline of spec section 6: what happens to the rows of one partial.

For the rows a partial touches, with ``G`` their de-duplicated, summed gradient and ``w`` their
parameters (spec 6.1-6.4)::

    G = min(max(G, g_lower), g_upper)          6.1 gradient clipping (an absent bound: none)
    w = w - d * w                              6.2 weight decay, d = weight_decay_factor
                                                   (times lr when multiply_..._by_learning_rate)
    w, state = update(w, state, G, lr, hyper)  6.3 the optimizer (``tpuemb_cfg.algorithms``)
    w = min(max(w, w_lower), w_upper)          6.4 weight clipping

Clipping and decay wrap the optimizer here instead of living inside each one.
:func:`apply_pipeline` is the pure function over gathered rows; :class:`RowPipeline` is the
in-place update a ``Storage`` runs where the rows live, fused into one kernel by the numba engine
when it has one for the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .engines import Engine
from .optimizers import UpdateContext
from .plan import TablePlan

__all__ = ["RowPipeline", "apply_pipeline"]


def apply_pipeline(
    table: TablePlan,
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    ctx: UpdateContext,
    clip: Callable[..., np.ndarray],
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Spec 6.1-6.4 on gathered rows: new ``(params, slots)``; the inputs are not modified.

    ``params``, each slot and ``grad``: float32 [n, D]; ``clip``: the engine's elementwise clip.
    """
    if table.clip_gradients is not None:  # 6.1
        grad = clip(grad, *table.clip_gradients)
    if table.weight_decay != 0:  # 6.2
        decay = table.weight_decay * lr if table.decay_by_lr else table.weight_decay
        params = params - decay * params
    optimizer = table.optimizer
    params, state = optimizer.update(  # 6.3
        params, optimizer.state(*slots), grad, lr, table.hyper, ctx
    )
    if table.clip_weights is not None:  # 6.4
        params = clip(params, *table.clip_weights)
    return params, tuple(state)


@dataclass(frozen=True)
class RowPipeline:
    """The pipeline of one partial as an in-place row update (a ``storage.RowUpdate``).

    Called as ``fn(params, slots, rows, grad)`` on the arrays holding ``rows``: the engine's
    fused kernel when it has one, else gather, then :func:`apply_pipeline`, then scatter. A
    non-lazy table (Adam with ``use_non_lazy_adam``, non-lazy Lion) steps every row of the arrays
    it is given, the rows not in ``rows`` with a zero gradient; ``rows`` None: every row, with
    ``grad`` [V, D].
    """

    table: TablePlan
    lr: np.float32
    ctx: UpdateContext
    engine: Engine

    def __call__(
        self,
        params: np.ndarray,
        slots: tuple[np.ndarray, ...],
        rows: np.ndarray | None,
        grad: np.ndarray,
    ) -> None:
        engine = self.engine
        if rows is not None and engine.update_rows(
            self.table, params, slots, rows, grad, self.lr, self.ctx
        ):
            return  # the engine ran 6.1-6.4 fused, in place (every row when not lazy)
        if rows is not None and not self.table.lazy:
            # Non-lazy Adam/Lion step every row: the rows not given step with a zero gradient
            # (here, where the rows live: a shard densifies only its own rows).
            full = np.zeros(params.shape, dtype=np.float32)
            engine.scatter(full, rows, grad)
            rows, grad = None, full
        if rows is None:
            w, state = apply_pipeline(self.table, params, slots, grad, self.lr, self.ctx,
                                      engine.clip)
            params[...] = w
            for slot, value in zip(slots, state, strict=True):
                slot[...] = value
            return
        w, state = apply_pipeline(
            self.table,
            engine.gather(params, rows),
            tuple(engine.gather(slot, rows) for slot in slots),
            grad, self.lr, self.ctx, engine.clip,
        )
        engine.scatter(params, rows, w)
        for slot, value in zip(slots, state, strict=True):
            engine.scatter(slot, rows, value)
