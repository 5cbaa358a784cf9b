"""Per-row optimizer updates of the reference executor (spec ``optimizers.md`` sections 6, 11-14).

Each optimizer is a pure NumPy function over a block of gathered rows,

    update(params, slots, grad, lr, hyper, ctx) -> (params, slots)

registered under the ``OptimizationParameters.parameters`` oneof member name together with its
slots (name and default initial value, in TensorFlow's state-variable order), its laziness and the
spec's confidence label. ``params``, every slot and ``grad`` are float32 ``[n_rows, dim]``;
the caller has already de-duplicated, accumulated and clipped ``grad`` and applied weight decay
to ``params`` (spec 6.1-6.2). Every update returns NEW arrays and never writes to its inputs.

    >>> spec = get("adagrad")
    >>> [slot.name for slot in spec.slots], spec.slots[0].initial(None)
    (['accumulators'], 0.1)
"""

from __future__ import annotations

from . import adagrad, adam, frequency, ftrl, momentum, proximal, rmsprop, sgd
from .base import OptimizerSpec, SlotSpec, UpdateContext, UpdateFn

__all__ = [
    "REGISTRY",
    "UNSUPPORTED",
    "OptimizerSpec",
    "SlotSpec",
    "UpdateContext",
    "UpdateFn",
    "get",
]

REGISTRY: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in (
        *sgd.SPECS,
        *adagrad.SPECS,
        *ftrl.SPECS,
        *adam.SPECS,
        *momentum.SPECS,
        *rmsprop.SPECS,
        *proximal.SPECS,
        *frequency.SPECS,
    )
}

UNSUPPORTED: dict[str, str] = {
    "mdl_adagrad_light": (
        "TensorFlow publishes no update equations for MDL Adagrad Light (spec section 12.12)"
    ),
    "online_yogi": (
        "TensorFlow publishes no update equations for Online Yogi; the proto only describes it "
        "in prose (spec section 12.15)"
    ),
    "user_defined_program": (
        "simulating a user-defined optimizer needs an XLA HLO interpreter, which the executor "
        "does not have (spec section 12.18)"
    ),
}


def get(name: str) -> OptimizerSpec:
    """The registered optimizer for the proto oneof member ``name``.

    Raises ``ValueError`` (never ``KeyError``) naming the optimizer and why it cannot be simulated
    when it is one of ``UNSUPPORTED``, or listing the known names when ``name`` is unknown.
    """
    spec = REGISTRY.get(name)
    if spec is not None:
        return spec
    if name in UNSUPPORTED:
        raise ValueError(
            f"optimizer {name!r} cannot be simulated: {UNSUPPORTED[name]}; "
            f"choose another optimizer for this table or leave it out of the simulation"
        )
    if not name:
        raise ValueError(
            "the table has no optimizer (OptimizationParameters.parameters is unset); "
            f"set one of: {', '.join(sorted(REGISTRY))}"
        )
    raise ValueError(
        f"unknown optimizer {name!r}: expected one of {', '.join(sorted(REGISTRY))}"
        f" (not simulatable: {', '.join(sorted(UNSUPPORTED))})"
    )
