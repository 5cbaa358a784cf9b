"""Per-row optimizer updates of the reference executor (spec ``optimizers.md`` sections 6, 11-14).

Each optimizer is a pure NumPy function over a block of gathered rows (see
``tpuemb_cfg.algorithms.update``),

    update(params, state, grad, lr, hyper, ctx) -> (params, state)

registered under the ``OptimizationParameters.parameters`` oneof member name by the module of
its family (``tpuemb_cfg.algorithms.<family>``, named by the algorithm table), next to the
NamedTuples of its state (one field per slot) and of its bound hyper-parameters, and its scalar
element (what the compiled kernels are made from). Slot names and default values, laziness,
the spec's confidence label and why an optimizer cannot be simulated all come from the
algorithm table (``tpuemb_cfg.algorithms``). ``params``, every slot and ``grad`` are float32
``[n_rows, dim]``; the caller has already de-duplicated, accumulated and clipped ``grad`` and
applied weight decay to ``params`` (spec 6.1-6.2). Every update returns NEW arrays and never
writes to its inputs.

    >>> opt = get("adagrad")
    >>> opt.state._fields, opt.slots[0].initial
    (('accumulators',), 0.1)

Adding an optimizer: docs/architecture.md.
"""

from __future__ import annotations

from ...algorithms.update import (
    REGISTRY,
    NoHyper,
    NoState,
    Optimizer,
    UpdateContext,
    UpdateFn,
    get,
    load,
    register,
    unsupported,
)

__all__ = [
    "REGISTRY",
    "NoHyper",
    "NoState",
    "Optimizer",
    "UpdateContext",
    "UpdateFn",
    "get",
    "register",
    "unsupported",
]

load()
