"""Keras optimizers as tpuemb optimizers: what TFRS and keras-rs do, without Keras or TensorFlow.

Model Garden, TensorFlow Recommenders (TFRS) and keras-rs models hand a Keras optimizer to the
embedding layer, which translates it into ``tf.tpu.experimental.embedding``'s optimizer:

- legacy Keras 2 optimizers (``tf.keras.optimizers.legacy``, ``tf_keras``) by TFRS's
  ``translate_keras_optimizer``: the hyper-parameters below are read from ``get_config()``;
  ``clipnorm`` and ``clipvalue`` must be unset and the listed Keras-only options must keep their
  defaults, else it refuses;
- Keras 3 optimizers by keras-rs (``keras_to_tf_tpu_optimizer``): the same hyper-parameters, plus
  ``weight_decay`` as ``weight_decay_factor`` (not multiplied by the learning rate, as keras-rs
  writes it, although Keras scales its decay by the rate), ``clipvalue`` as gradient clipping
  and ``gradient_accumulation_steps`` as gradient accumulation; ``clipnorm``,
  ``global_clipnorm``, ``use_ema`` and ``loss_scale_factor`` are refused. Subclasses count as
  their base (``AdamW`` is an ``Adam``).

====================  =========================================================================
Keras                 tpuemb
====================  =========================================================================
``SGD``               :class:`SGD` (``momentum`` 0 and ``nesterov`` off; legacy: ``decay`` 0)
``Adagrad``           :class:`Adagrad` (``initial_accumulator_value``; ``epsilon`` must be 1e-7)
``Adam``              :class:`Adam` (``beta_1``, ``beta_2``, ``epsilon``; ``amsgrad`` off;
                      legacy: ``decay`` 0)
``Ftrl``              :class:`FTRL` (``learning_rate_power``, ``initial_accumulator_value``,
                      ``l1/l2_regularization_strength``, ``beta``; no L2 shrinkage)
====================  =========================================================================

The learning rate: a number stays a constant; a Keras ``LearningRateSchedule`` becomes a
:class:`KerasSchedule`, a dynamic learning rate (one tag) whose value at a global step is the
schedule's; a plain zero-argument callable of a Keras 3 optimizer is kept as it is (keras-rs),
one of a legacy optimizer is called once, as TFRS's ``get_config()`` calls it: a Python number
is the constant rate, a tensor makes the rate dynamic (a new callable). Optimizer names
(:data:`NAMES`: ``"sgd"``, ``"adagrad"``, ``"adam"``, ``"ftrl"``) give TensorFlow's defaults, as in
both libraries. TensorFlow gives each translated
optimizer its own callable, so translate a shared Keras optimizer once and share the result when
the tables should share one tag (TFRS does this for the layer's global optimizer).

Nothing here imports Keras: an optimizer is read through its class name (walking its base
classes) and ``get_config()``, and a plain ``dict`` may stand for it: Keras' serialized form
``{"class_name": "Adam", "config": {...}}``, or ``get_config()``'s output with ``class_name``
given (or a ``name`` that is a known class name, as legacy Keras writes it).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.algorithms.table import KERAS_NAMES
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding.errors import EmbeddingConfigError
from tpuemb_cfg.embedding.keras_schedules import SCHEDULE_FUNCTIONS
from tpuemb_cfg.embedding.optimizers import FTRL, SGD, Adagrad, Adam, Optimizer

__all__ = ["NAMES", "SCHEDULES", "KerasSchedule", "from_keras"]

_GENERAL_REFUSED_LEGACY = ("clipnorm", "clipvalue")  # TFRS
_GENERAL_REFUSED_KERAS3 = ("clipnorm", "global_clipnorm", "loss_scale_factor")  # keras-rs


@dataclass(frozen=True)
class _Mapping:
    """One Keras class: the tpuemb class, the arguments passed on (besides the learning rate),
    and the Keras-only options that must keep these values."""

    target: type[Optimizer]
    supported: tuple[str, ...]
    fixed: Mapping[str, Any]


_FTRL_ARGUMENTS = (
    "learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
    "l2_regularization_strength", "beta",
)

#: TFRS's table (``_OPTIMIZER_PARAMETERS``), the fixed values being the legacy defaults.
LEGACY: dict[str, _Mapping] = {
    "SGD": _Mapping(SGD, (), dict(decay=0.0, momentum=0.0, nesterov=False)),
    "Adagrad": _Mapping(Adagrad, ("initial_accumulator_value",), {"epsilon": 1e-7}),
    "Adam": _Mapping(Adam, ("beta_1", "beta_2", "epsilon"), {"decay": 0.0, "amsgrad": False}),
    "Ftrl": _Mapping(FTRL, _FTRL_ARGUMENTS, {"l2_shrinkage_regularization_strength": 0.0}),
}

#: keras-rs' table (``OPTIMIZER_MAPPINGS``).
KERAS3: dict[str, _Mapping] = {
    "SGD": _Mapping(SGD, (), dict(momentum=0.0, nesterov=False)),
    "Adagrad": _Mapping(Adagrad, ("initial_accumulator_value",), {"epsilon": 1e-7}),
    "Adam": _Mapping(Adam, ("beta_1", "beta_2", "epsilon"), {"amsgrad": False}),
    "Ftrl": _Mapping(FTRL, _FTRL_ARGUMENTS, {"l2_shrinkage_regularization_strength": 0.0}),
}

#: Keras classes known to derive from a supported one, for dicts (objects show their bases).
_SUBCLASSES = {"AdamW": "Adam"}


# -- learning-rate schedules ---------------------------------------------------------------------

#: Keras' built-in schedules and Model Garden's ``WarmUpAndPolyDecay``: class name -> (required
#: config keys, float32 value at a global step), computed as TensorFlow computes them
#: (:mod:`~tpuemb_cfg.embedding.keras_schedules`).
SCHEDULES = SCHEDULE_FUNCTIONS


class KerasSchedule:
    """A Keras learning-rate schedule as a dynamic learning rate: a zero-argument callable whose
    value is the schedule's at :attr:`step` (the global step, what Keras reads from the
    optimizer's ``iterations``), like :class:`~tpuemb_cfg.embedding.schedules.Schedule`.

    ``kind`` is the Keras class name and ``config`` its ``get_config()``; the built-in kinds
    and Model Garden's ``WarmUpAndPolyDecay`` (:data:`SCHEDULES`) are computed as TensorFlow
    computes them, in float32 (``keras_schedules``: the value is TensorFlow's float32, as a
    Python float). ``function`` instead takes the value from a schedule object of another class
    (``function(step)``, as Keras calls it).
    One object is one tag: schedules compare by identity, as callables do in TensorFlow.
    """

    def __init__(
        self,
        kind: str,
        config: Mapping[str, Any],
        *,
        function: Callable[[int], Any] | None = None,
    ) -> None:
        owner = f"Keras schedule {kind}"
        if function is None:
            if kind not in SCHEDULES:
                raise chk.fail(
                    owner,
                    f"is not one of Keras' built-in schedules or Model Garden's "
                    f"({', '.join(SCHEDULES)}); pass the "
                    "optimizer object itself (its schedule is then called with the step) or use "
                    "a tpuemb_cfg.embedding.Schedule",
                )
            missing = [k for k in SCHEDULES[kind][0] if k not in config]
            if missing:
                raise chk.fail(owner, f"config lacks {', '.join(missing)}: {dict(config)!r}")
        self.kind = kind
        self.config = dict(config)
        self.name = str(self.config.get("name") or kind)
        self.function = function
        self.step = 0

    def value(self, step: int) -> float:
        """The learning rate at global step ``step``."""
        if self.function is not None:
            return float(self.function(step))
        return float(SCHEDULES[self.kind][1](self.config, int(step)))

    def __call__(self) -> float:
        return self.value(self.step)

    def describe(self) -> str:
        """``ExponentialDecay(initial_learning_rate=0.1, decay_steps=100, ...)``."""
        shown = {k: v for k, v in self.config.items() if k != "name"}
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def __repr__(self) -> str:
        return f"KerasSchedule({self.kind!r}, {self.config!r})"


def _schedule(value: Any, owner: str) -> KerasSchedule:
    """A schedule from Keras' serialized form or from a schedule object."""
    if isinstance(value, Mapping):
        kind = value.get("class_name")
        config = value.get("config")
        if not isinstance(kind, str) or not isinstance(config, Mapping):
            raise chk.fail(
                owner,
                "a learning_rate dict must be a serialized Keras schedule, "
                f"{{'class_name': ..., 'config': {{...}}}}; received {value!r}",
            )
        return KerasSchedule(kind.rpartition(">")[2], config)  # "RANKING>WarmUpAndPolyDecay"
    kind = _known_base(value, SCHEDULES) or type(value).__name__
    config = value.get_config()
    if kind in SCHEDULES:
        return KerasSchedule(kind, config)
    return KerasSchedule(kind, config, function=value)


# -- optimizers ----------------------------------------------------------------------------------


def _known_base(obj: Any, known: Mapping[str, Any]) -> str | None:
    """The first class name in ``obj``'s method resolution order that ``known`` has."""
    for cls in type(obj).__mro__:
        if cls.__name__ in known:
            return cls.__name__
    return None


def _is_schedule(value: Any) -> bool:
    return callable(value) and callable(getattr(value, "get_config", None))


def _read(optimizer: Any, class_name: str | None) -> tuple[str, dict[str, Any], Any]:
    """(class name, configuration, learning-rate object or None) of an object or a dict."""
    if isinstance(optimizer, Mapping):
        if "class_name" in optimizer and isinstance(optimizer.get("config"), Mapping):
            name = class_name or str(optimizer["class_name"])
            return name, dict(optimizer["config"]), None
        config = dict(optimizer)
        name = class_name or str(config.get("name", ""))
        matches = [k for k in LEGACY if k.lower() == name.lower()]
        name = matches[0] if matches else _SUBCLASSES.get(name, name)
        if not name:
            raise chk.fail(
                "from_keras",
                "a get_config() dict does not say which optimizer it is: pass class_name='Adam' "
                "(or Keras' serialized form {'class_name': ..., 'config': {...}})",
            )
        return name, config, None
    get_config = getattr(optimizer, "get_config", None)
    if not callable(get_config):
        raise chk.fail_type(
            "from_keras",
            f"expected a Keras optimizer (an object with get_config()) or a dict of its "
            f"configuration; received {chk.show(optimizer)} ({chk.type_name(optimizer)})",
        )
    name = class_name or _known_base(optimizer, LEGACY) or type(optimizer).__name__
    try:
        config = dict(get_config())
    except Exception:  # noqa: BLE001 - Keras 3 cannot serialize a lambda learning rate
        config = {}
    raw = getattr(optimizer, "_learning_rate", None)
    if raw is None:
        raw = getattr(optimizer, "_hyper", {}).get("learning_rate")
    for key in (*LEGACY.get(name, KERAS3.get(name, _Mapping(SGD, (), {}))).supported,
                "weight_decay", "clipvalue", "clipnorm", "global_clipnorm", "use_ema",
                "loss_scale_factor", "gradient_accumulation_steps"):
        if key not in config and hasattr(optimizer, key):
            config[key] = getattr(optimizer, key)
    return name, config, raw


def _is_tensor(value: Any) -> bool:
    """A TensorFlow tensor (``tf.Tensor`` among its classes), recognised without TensorFlow."""
    return any(cls.__name__ == "Tensor" and cls.__module__.startswith("tensorflow")
               for cls in type(value).__mro__)


def _tfrs_callable(raw: Callable[[], Any], value: Any) -> Any:
    """TFRS's rule for a plain callable learning rate of a legacy optimizer: it reads the rate
    from ``get_config()``, which calls the callable (``value`` is that result). A tensor makes
    the rate dynamic, through a new callable (``lambda: optimizer.get_config()["learning_rate"]``:
    its own tag); anything else (a Python number) is the constant rate."""
    if not _is_tensor(value):
        return value

    @functools.wraps(raw)
    def learning_rate() -> Any:
        return raw()

    return learning_rate


def _learning_rate(config: Mapping[str, Any], raw: Any, owner: str, keras3: bool) -> Any:
    """A number, a :class:`KerasSchedule` or a zero-argument callable."""
    if raw is not None and _is_schedule(raw):
        return _schedule(raw, owner)
    if raw is not None and callable(raw) and not hasattr(raw, "numpy"):
        if keras3:
            return raw  # keras-rs keeps it: TensorFlow calls it every step
        value = _tfrs_callable(raw, config["learning_rate"] if "learning_rate" in config
                               else raw())
        if callable(value):
            return value
    else:
        value = config.get("learning_rate", 0.001 if raw is None else raw)
    if isinstance(value, Mapping):
        return _schedule(value, owner)
    number = getattr(value, "numpy", None)
    if callable(number):
        value = number()
    if chk.is_real(value) and not isinstance(value, bool):
        return _shortest(float(value))
    raise chk.fail_type(
        owner,
        f"learning_rate {chk.show(value)} is neither a number nor a Keras schedule; pass a "
        "number, a LearningRateSchedule or a zero-argument callable",
    )


def _shortest(value: float) -> float:
    """Keras 3 keeps the learning rate in a float32 variable, so ``Adam(0.002)`` reports
    0.0020000000949949026: give back the shortest decimal with the same float32 (0.002), which
    writes the same proto and compares equal to the hand-written optimizer."""
    if not math.isfinite(value) or struct.unpack("<f", struct.pack("<f", value))[0] != value:
        return value
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == struct.pack("<f", value):
            return candidate
    return value


def _refuse(owner: str, option: str, value: Any, library: str) -> EmbeddingConfigError:
    return chk.fail(
        owner,
        f"{option}={value!r} has no TPU embedding equivalent ({library} refuses it); leave it "
        "at its default, or give the embedding tables an optimizer of their own",
    )


#: The optimizer names TFRS and keras-rs accept (lower case only): each gives the
#: ``tf.tpu.experimental.embedding`` optimizer with TensorFlow's defaults.
NAMES: dict[str, Callable[[], Optimizer]] = {
    name: next(c for c in (SGD, Adagrad, Adam, FTRL) if c.algorithm == algorithm)
    for name, algorithm in KERAS_NAMES.items()
}


def _from_name(name: str) -> Optimizer:
    if name not in NAMES:
        raise chk.fail(
            "from_keras",
            f"unknown optimizer name {name!r}: TFRS and keras-rs accept "
            f"{', '.join(repr(n) for n in NAMES)} (lower case; each gives TensorFlow's "
            f"defaults); for other settings pass a Keras optimizer or a tpuemb_cfg.embedding "
            f"optimizer",
        )
    return NAMES[name]()


def from_keras(optimizer: Any, *, class_name: str | None = None) -> Optimizer:
    """The tpuemb optimizer a Keras ``optimizer`` stands for on the TPU embedding tables.

    ``optimizer``: a Keras 2 (legacy) or Keras 3 ``SGD``, ``Adagrad``, ``Adam`` (or ``AdamW``)
    or ``Ftrl`` object, or a dict of its configuration (see the module docstring), or one of the
    names TFRS and keras-rs accept (``"sgd"``, ``"adagrad"``, ``"adam"``, ``"ftrl"``: TensorFlow's
    defaults); a tpuemb optimizer is returned as it is, as both libraries pass TensorFlow's
    through. ``class_name`` names the Keras class when a dict does not. Translated as TFRS
    (legacy optimizers) and keras-rs (Keras 3) translate it, so the configuration compiles to
    the bytes TensorFlow writes for that model. Raises ``ValueError`` (``EmbeddingConfigError``)
    for an optimizer or an option those translations refuse, naming it.
    """
    if isinstance(optimizer, Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        return _from_name(optimizer)
    name, config, raw = _read(optimizer, class_name)
    owner = f"Keras {name}"
    if config.get("is_legacy_optimizer") is False:
        raise chk.fail(
            owner,
            "is a tf.keras (Keras 2) optimizer of the new kind, which TFRS refuses for TPU "
            "embeddings: use tf.keras.optimizers.legacy." + name + " or a Keras 3 optimizer",
        )
    keras3 = "use_ema" in config or "gradient_accumulation_steps" in config
    table = KERAS3 if keras3 else LEGACY
    library = "keras-rs" if keras3 else "TFRS"
    mapping = table.get(_SUBCLASSES.get(name, name))
    if mapping is None:
        raise chk.fail(
            owner,
            f"is not translated for TPU embeddings ({library} supports "
            f"{', '.join(table)}); use one of them or a tpuemb_cfg.embedding optimizer",
        )
    _check_refused(config, mapping, owner, keras3)
    arguments: dict[str, Any] = {"learning_rate": _learning_rate(config, raw, owner, keras3)}
    for argument in mapping.supported:
        if argument in config:
            arguments[argument] = config[argument]
    if keras3:
        for option, (argument, value) in _KERAS3_ARGUMENTS.items():
            if config.get(option) is not None:
                arguments[argument] = config[option] if value is None else value
    return mapping.target(**arguments)


#: Keras 3 options keras-rs passes on: the tpuemb argument each sets and its value (``None``:
#: the option's).
_KERAS3_ARGUMENTS: dict[str, tuple[str, object]] = {
    "weight_decay": ("weight_decay_factor", None),
    "clipvalue": ("clipvalue", None),
    "gradient_accumulation_steps": ("use_gradient_accumulation", True),
}


def _check_refused(config: dict[str, Any], mapping: _Mapping, owner: str, keras3: bool) -> None:
    """Raise for an option of ``config`` the translation (TFRS, or keras-rs for Keras 3)
    refuses: a general one that is set, or one it fixes at another value."""
    library = "keras-rs" if keras3 else "TFRS"
    refused = _GENERAL_REFUSED_KERAS3 if keras3 else _GENERAL_REFUSED_LEGACY
    for option in refused:
        if config.get(option) is not None:
            raise _refuse(owner, option, config[option], library)
    if keras3 and config.get("use_ema"):
        raise _refuse(owner, "use_ema", config["use_ema"], library)
    for option, default in mapping.fixed.items():
        if option in config and config[option] != default:
            raise _refuse(owner, option, config[option], library)
