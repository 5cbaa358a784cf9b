"""Named learning-rate schedules: zero-argument callables that describe themselves.

TensorFlow only needs a dynamic learning rate to be a callable taking no arguments; the proto
records nothing but its tag. A :class:`Schedule` is such a callable with a name and a formula, so
tag tables can say which schedule feeds which tables, and TOML specs can declare schedules
without Python. Calling it returns the value at :attr:`Schedule.step` (set it, or use
:meth:`Schedule.value`). Schedules compare by identity: one schedule object is one tag, two
schedules with equal formulas are two tags.

Kinds (``step`` counts from 0):

- ``constant``: ``value``.
- ``exponential_decay``: ``initial * decay_rate ** (step / decay_steps)`` (the exponent floored
  when ``staircase``), in float32 in TensorFlow's order (``ExponentialDecay``).
- ``warmup_cosine``: ``peak * (step + 1) / warmup_steps`` during the warm-up (reaching ``peak``
  at its last step), then a cosine from ``peak`` to ``final`` over ``decay_steps``, then ``final``.
- ``piecewise_constant``: ``values[i]`` for ``boundaries[i-1] <= step < boundaries[i]``.
- ``adam_bias_correction``: ``learning_rate * sqrt(1 - beta2**t) / (1 - beta1**t)``, t = step + 1:
  the rate TPU Adam needs to behave like bias-corrected Adam (the defaults are Adam's, from the
  algorithm table).
- ``global_step``: the step itself (the input of a frequency estimator or a step counter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.algorithms import schedules
from tpuemb_cfg.algorithms.adam import bias_corrected_rate
from tpuemb_cfg.algorithms.table import ADAM_BETA_1, ADAM_BETA_2
from tpuemb_cfg.embedding import _checks as chk

#: kind -> (required parameters, optional parameters with defaults)
KINDS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "constant": (("value",), {}),
    "exponential_decay": (("initial", "decay_rate", "decay_steps"), {"staircase": False}),
    "warmup_cosine": (("peak", "warmup_steps", "decay_steps"), {"final": 0.0}),
    "piecewise_constant": (("boundaries", "values"), {}),
    "adam_bias_correction": (
        ("learning_rate",),
        {"beta1": ADAM_BETA_1, "beta2": ADAM_BETA_2},
    ),
    "global_step": ((), {}),
}


class Schedule:
    """A named dynamic learning rate (see the module docstring for the kinds)."""

    def __init__(self, name: str, kind: str, **params: Any) -> None:
        owner = f"schedule {name!r}"
        if kind not in KINDS:
            raise chk.fail(
                owner, f"unknown kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}"
            )
        required, optional = KINDS[kind]
        unknown = sorted(set(params) - set(required) - set(optional))
        if unknown:
            allowed = ", ".join((*required, *optional)) or "none"
            raise chk.fail(
                owner, f"unknown parameter(s) {', '.join(unknown)} for kind {kind!r}; "
                f"allowed: {allowed}"
            )
        missing = [p for p in required if p not in params]
        if missing:
            raise chk.fail(
                owner, f"kind {kind!r} needs parameter(s) {', '.join(missing)}"
            )
        self.name = name
        self.kind = kind
        # Required parameters first, then the optional ones, each in declaration order.
        self.params: dict[str, Any] = {k: params[k] for k in required}
        self.params.update({k: params.get(k, v) for k, v in optional.items()})
        self.step = 0
        self._check(owner)

    def _check(self, owner: str) -> None:
        p = self.params
        if self.kind == "piecewise_constant":
            bounds, values = p["boundaries"], p["values"]
            if not isinstance(bounds, list | tuple) or not isinstance(values, list | tuple):
                raise chk.fail_type(owner, "`boundaries` and `values` must be lists")
            for b in bounds:
                chk.integer(owner, "boundaries", b)
            for v in values:
                chk.real(owner, "values", v)
            if len(values) != len(bounds) + 1:
                raise chk.fail(
                    owner,
                    f"`values` needs one entry more than `boundaries`; received "
                    f"{len(values)} values for {len(bounds)} boundaries",
                )
            if list(bounds) != sorted(bounds):
                raise chk.fail(owner, f"`boundaries` must be ascending; received {bounds!r}")
            return
        for key, value in p.items():
            if key == "staircase":
                chk.boolean(owner, key, value)
            elif key.endswith("_steps"):
                if chk.integer(owner, key, value) < (0 if key == "warmup_steps" else 1):
                    raise chk.fail(owner, f"`{key}` must be >= 1; received {value!r}")
            else:
                chk.real(owner, key, value)

    def value(self, step: int) -> float:
        """The learning rate at ``step``, computed by the one home of each kind
        (:mod:`tpuemb_cfg.algorithms.schedules`; Adam's bias correction:
        :func:`tpuemb_cfg.algorithms.adam.bias_corrected_rate`): ``exponential_decay`` in float32
        in TensorFlow's order, the others in float64 from exact operations and the executor's
        own ``pow64``/``cos64``, never libm's, so a simulation sends the same bits on every
        machine (and the same rates as a simulation spec's or a Keras schedule of the same
        kind)."""
        p = self.params
        if self.kind == "constant":
            return float(p["value"])
        if self.kind == "exponential_decay":
            return float(schedules.exponential_decay(
                p["initial"], p["decay_rate"], p["decay_steps"], p["staircase"], step))
        if self.kind == "warmup_cosine":
            return schedules.warmup_cosine(p["peak"], p["warmup_steps"], p["decay_steps"],
                                           p["final"], step)
        if self.kind == "piecewise_constant":
            return float(schedules.piecewise_constant(p["boundaries"], p["values"], step))
        if self.kind == "adam_bias_correction":
            return float(bias_corrected_rate(p["learning_rate"], float(p["beta1"]),
                                             float(p["beta2"]), step))
        return float(step)  # global_step

    def __call__(self) -> float:
        return self.value(self.step)

    def describe(self) -> str:
        """``warmup_cosine(peak=0.1, warmup_steps=1000, ...)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.kind}({args})"

    def __repr__(self) -> str:
        return f"Schedule({self.name!r}, {self.kind!r}" + "".join(
            f", {k}={v!r}" for k, v in self.params.items()
        ) + ")"


def schedule_from_mapping(name: str, table: Mapping[str, Any]) -> Schedule:
    """A schedule from a TOML table ``{kind = "...", <parameters>}``."""
    params = dict(table)
    kind = params.pop("kind", None)
    if not isinstance(kind, str):
        raise chk.fail(
            f"schedule {name!r}",
            f"needs `kind`, one of {', '.join(sorted(KINDS))}; received {chk.show(kind)}",
        )
    return Schedule(name, kind, **params)
