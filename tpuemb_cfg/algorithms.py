"""The algorithm table: every fact about an optimization algorithm, in one place.

One :class:`Algorithm` per member of the ``OptimizationParameters.parameters`` oneof
(``schema.md`` section 2, ``optimizers.md`` section 12). Everything else reads it:

- sizing (:mod:`tpuemb_cfg.derived`): the slot names, in TensorFlow's state-variable order;
- the compiler (:mod:`tpuemb_cfg.embedding.optimizers`): slot names and the hyper-parameter
  constraints its constructors check;
- the executor (:mod:`tpuemb_cfg.executor.optimizers`): slot names, default initial values,
  laziness and whether the algorithm can be simulated at all;
- the validator (:mod:`tpuemb_cfg.rules`): the OPT range rules are generated from the
  constraints of :attr:`Algorithm.hyper`.

This module is plain data and imports nothing heavy (no protobuf, no NumPy), so ``tpuemb
validate`` pays nothing for it.

Adding an algorithm starts here: one :class:`Algorithm` entry (see ``docs/architecture.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Constraint",
    "Hyper",
    "Slot",
    "get",
    "slot_names",
]


@dataclass(frozen=True)
class Slot:
    """One optimizer slot: its name (state files, TensorFlow's variable name) and default value.

    ``initial`` is the value the slot starts at when no initial state gives it; ``initial_from``,
    when set, names the hyper-parameter field of the algorithm's message that holds it instead
    (``frequency_aware_adagrad``'s ``initial_accumulator_value``).
    """

    name: str
    initial: float = 0.0
    initial_from: str | None = None

    def initial_value(self, hyper: Any) -> float:
        """The default initial value, reading ``hyper`` (the proto sub-message) if needed."""
        if self.initial_from is None:
            return self.initial
        return float(getattr(hyper, self.initial_from))


@dataclass(frozen=True)
class Constraint:
    """A range condition on a hyper-parameter, checked by an OPT rule and a constructor.

    ``bad(value)`` is true when the finite ``value`` is out of range; ``expected`` states the
    valid range (``"0 <= beta1 < 1"``), ``why`` what goes wrong, ``hint`` the fix; ``rule`` the
    id of the OPT rule that reports it; ``section`` the spec section it enforces.
    """

    rule: str
    bad: Callable[[float], bool]
    expected: str
    why: str
    hint: str
    section: str = ""


@dataclass(frozen=True)
class Hyper:
    """One hyper-parameter field of the algorithm's proto message and its constraints."""

    field: str
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class Algorithm:
    """Everything tpuemb knows about one optimization algorithm.

    ``name``: the oneof member of ``OptimizationParameters.parameters`` (also the executor's
    registry key). ``message``: the proto message type. ``slots``: in TensorFlow's state-variable
    order. ``non_lazy_flag``: the boolean field that, when true, makes every row update every step
    (``use_non_lazy_adam``); lazy otherwise. ``equations``: the spec's confidence label of the
    update (section 12). ``unsupported``: why the executor cannot simulate it (``None``: it can).
    ``packable``: whether low-dimensional packing can be effective. ``section``: the spec section.
    """

    name: str
    message: str
    slots: tuple[Slot, ...] = ()
    hyper: tuple[Hyper, ...] = ()
    non_lazy_flag: str | None = None
    equations: str = ""
    unsupported: str | None = None
    packable: bool = False
    section: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.slots)

    def lazy(self, hyper: Any) -> bool:
        """Whether only touched rows update (spec 6.5): false only when the non-lazy flag is set."""
        if self.non_lazy_flag is None:
            return True
        return not bool(getattr(hyper, self.non_lazy_flag, False))


def _s(*names: str, **initial: float) -> tuple[Slot, ...]:
    return tuple(Slot(name, initial.get(name, 0.0)) for name in names)


_LIST: tuple[Algorithm, ...] = (
    Algorithm(
        "adagrad", "AdagradParameters", _s("accumulators", accumulators=0.1),
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.2",
    ),
    Algorithm(
        "adagrad_momentum", "AdagradMomentumParameters", _s("accumulators", "momenta"),
        equations="TPU-OSS", section="12.3",
    ),
    Algorithm(
        "bounded_adagrad", "BoundedAdagradParameters", _s("accumulators", accumulators=0.1),
        equations="RECON", section="12.4",
    ),
    Algorithm(
        "frequency_aware_adagrad", "FrequencyAwareAdagradParameters",
        (Slot("accumulators", initial_from="initial_accumulator_value"), Slot("counters")),
        equations="RECON", section="12.5",
    ),
    Algorithm(
        "stochastic_gradient_descent", "StochasticGradientDescentParameters",
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.1",
    ),
    Algorithm(
        "ftrl", "FtrlParameters", _s("accumulators", "linears", accumulators=0.1),
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.6",
    ),
    Algorithm(
        "adam", "AdamParameters", _s("momenta", "velocities"),
        non_lazy_flag="use_non_lazy_adam", equations="TPU-OSS, CPU-KERNEL", section="12.7",
    ),
    Algorithm(
        "momentum", "MomentumParameters", _s("momenta"),
        equations="PROTO, CPU-KERNEL", section="12.8",
    ),
    Algorithm(
        "lion", "LionParameters", _s("momenta"),
        non_lazy_flag="use_non_lazy_lion", equations="PROTO", section="12.9",
    ),
    Algorithm(
        "rms_prop", "RmsPropParameters", _s("ms", "mom"),
        equations="PROTO, CPU-KERNEL", section="12.10",
    ),
    Algorithm(
        "centered_rms_prop", "CenteredRmsPropParameters", _s("ms", "mom", "mg"),
        equations="PROTO, CPU-KERNEL", section="12.11",
    ),
    Algorithm(
        "mdl_adagrad_light", "MdlAdagradLightParameters",
        _s("accumulators", "weights", "benefits"),
        equations="NONE", section="12.12",
        unsupported=(
            "TensorFlow publishes no update equations for MDL Adagrad Light (spec section 12.12)"
        ),
    ),
    Algorithm(
        "adadelta", "AdadeltaParameters", _s("accumulators", "updates"),
        equations="PROTO, CPU-KERNEL", section="12.13",
    ),
    Algorithm(
        "proximal_adagrad", "ProximalAdagradParameters", _s("accumulators", accumulators=0.1),
        equations="PROTO, CPU-KERNEL", section="12.14",
    ),
    Algorithm(
        "online_yogi", "OnlineYogiParameters", _s("vs", "linears"),
        equations="NONE", section="12.15",
        unsupported=(
            "TensorFlow publishes no update equations for Online Yogi; the proto only describes "
            "it in prose (spec section 12.15)"
        ),
    ),
    Algorithm(
        "proximal_yogi", "ProximalYogiParameters", _s("v", "m", v=1e-6),
        equations="RECON", section="12.16",
    ),
    Algorithm(
        "frequency_estimator", "FrequencyEstimatorParameters", _s("last_hit_step"),
        equations="PROTO", section="12.17",
    ),
    Algorithm(
        "user_defined_program", "UserDefinedProgramParameters",
        equations="NONE", section="12.18",
        unsupported=(
            "simulating a user-defined optimizer needs an XLA HLO interpreter, which the executor "
            "does not have (spec section 12.18)"
        ),
    ),
    Algorithm(
        "assign", "AssignParameters", equations="PROTO", section="12.19",
    ),
)

#: Every algorithm by its oneof member name, in the proto's declaration order of this table.
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in _LIST}


def get(name: str) -> Algorithm:
    """The algorithm named ``name``; ``KeyError`` never escapes: ``ValueError`` lists the names."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(
            f"unknown optimization algorithm {name!r}; expected one of: "
            + ", ".join(sorted(ALGORITHMS))
        ) from None


def slot_names(name: str) -> tuple[str, ...]:
    """The slot names of algorithm ``name`` in TensorFlow's state order (``()`` if unknown).

    ``user_defined_program`` has no fixed slots (they come from its program; see ``derived``).
    """
    algorithm = ALGORITHMS.get(name)
    return algorithm.slot_names if algorithm is not None else ()
