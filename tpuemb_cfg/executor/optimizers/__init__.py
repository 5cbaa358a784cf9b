"""Per-row optimizer updates of the reference executor (spec ``optimizers.md`` sections 6, 11-14).

Each optimizer is a pure NumPy function over a block of gathered rows (see ``base``),

    update(params, state, grad, lr, hyper, ctx) -> (params, state)

registered with ``@register(name, state=..., hyper=...)`` under the ``OptimizationParameters
.parameters`` oneof member name, next to the NamedTuples of its state (one field per slot) and of
its bound hyper-parameters. Slot names and default values, laziness, the spec's confidence label
and why an optimizer cannot be simulated all come from the algorithm table
(``tpuemb_cfg.algorithms``). ``params``, every slot and ``grad`` are float32 ``[n_rows, dim]``;
the caller has already de-duplicated, accumulated and clipped ``grad`` and applied weight decay
to ``params`` (spec 6.1-6.2). Every update returns NEW arrays and never writes to its inputs.

    >>> opt = get("adagrad")
    >>> opt.state._fields, opt.slots[0].initial
    (('accumulators',), 0.1)

Adding an optimizer: its entry in the algorithm table, then one decorated update function (with
its state and hyper NamedTuples) in the module of its family; optionally a fused kernel in
``tpuemb_cfg.executor.engines.numba``.
"""

from __future__ import annotations

from ...algorithms import ALGORITHMS
from . import adagrad, adam, frequency, ftrl, momentum, proximal, rmsprop, sgd  # noqa: F401
from .base import REGISTRY, NoHyper, NoState, Optimizer, UpdateContext, UpdateFn, register

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


def unsupported(name: str) -> str | None:
    """Why optimizer ``name`` cannot be simulated (the algorithm table's reason), or ``None``."""
    algorithm = ALGORITHMS.get(name)
    return algorithm.unsupported if algorithm is not None else None


def get(name: str) -> Optimizer:
    """The registered optimizer for the proto oneof member ``name``.

    Raises ``ValueError`` (never ``KeyError``) naming the optimizer and why it cannot be simulated
    when the algorithm table says so, or listing the known names when ``name`` is unknown.
    """
    optimizer = REGISTRY.get(name)
    if optimizer is not None:
        return optimizer
    reason = unsupported(name)
    if reason is not None:
        raise ValueError(
            f"optimizer {name!r} cannot be simulated: {reason}; "
            f"choose another optimizer for this table or leave it out of the simulation"
        )
    if not name:
        raise ValueError(
            "the table has no optimizer (OptimizationParameters.parameters is unset); "
            f"set one of: {', '.join(sorted(REGISTRY))}"
        )
    cannot = sorted(n for n, a in ALGORITHMS.items() if a.unsupported)
    raise ValueError(
        f"unknown optimizer {name!r}: expected one of {', '.join(sorted(REGISTRY))}"
        f" (not simulatable: {', '.join(cannot)})"
    )
