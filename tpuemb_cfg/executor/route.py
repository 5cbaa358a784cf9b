"""The step route of a table: how the executor steps it, decided once per table.

The compiled step (the numba engine's ``Engine.fused``, ``fused.CompiledStep``) runs a table's
forward pass, and then its back-propagation and update, only under the conditions
:func:`step_route` states; every other table goes through the engine's functions and the
per-partial pipeline. The executor reads it once per table when it is made; the memory estimate
reads the same rule. No NumPy, no import of the plan at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .plan import Plan, TablePlan

__all__ = ["StepRoute", "step_route"]


class StepRoute(NamedTuple):
    """How one table steps, chosen once when the executor is made (:func:`step_route`):
    ``forward``, the compiled step's forward pass (else the engine's functions, with a custom
    combiner's callable); ``backward``, the compiled back-propagation and update too (else the
    per-partial pipeline, ``pipeline.RowPipeline``)."""

    forward: bool
    backward: bool


def step_route(plan: Plan, table: TablePlan, *, compiled: bool) -> StepRoute:
    """The route of ``table``: the compiled forward pass where the compiled step can run
    (``compiled``: the numba engine, the tables live in this process) and the table has no
    quantization, no pipelining (both read other values than the live rows) and no custom
    callable; the compiled back-propagation and update too when its gradients form one partial
    (spec 5.1) and the mode updates (it then checks the gradients for NaN and infinities
    itself)."""
    forward = (compiled and table.quantization is None and not table.custom
               and not (plan.pipelined and plan.mode == "TRAINING"))
    return StepRoute(forward, forward and table.accumulate and plan.updates)
