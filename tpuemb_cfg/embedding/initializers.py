"""A spec's table initializers resolved to the distribution the simulator draws from.

TensorFlow fills each table with its ``TableConfig``'s initializer, called once on the shape
``[vocabulary_size, dim]``. ``prepare`` resolves each one here into a
:class:`~tpuemb_cfg.model.TableInit` (a distribution and its float64 parameters, computed as
Keras computes them) recorded in the plan (``TablePlan.initializer``); the executor draws the
rows (``executor.initializers``).

Recognised, by class name (``type(obj).__name__``, reading ``get_config()``), by Keras'
serialized form ``{"class_name": ..., "config": {...}}`` or by Keras' name (``"glorot_uniform"``):

- tpuemb's ``TruncatedNormalInitializer(mean, stddev)`` (``TableConfig``'s default:
  ``stddev = 1/sqrt(dim)``), ``RowIdInitializer(offset)``, ``ConstantInitializer(value)``;
- Keras' and TensorFlow's ``Zeros``, ``Ones``, ``Constant``, ``RandomUniform`` (``minval``,
  ``maxval``; default -0.05, 0.05), ``RandomNormal`` and ``TruncatedNormal`` (``mean``,
  ``stddev``; default 0, 0.05), ``VarianceScaling`` (``scale``, ``mode``, ``distribution``,
  ``input_axes``/``output_axes``), ``GlorotUniform``/``GlorotNormal``, ``HeUniform``/
  ``HeNormal``, ``LecunUniform``/``LecunNormal`` and ``Identity`` (``gain``).

``VarianceScaling`` as Keras computes it for a 2-D variable: ``fan_in = vocabulary_size``,
``fan_out = dim`` (with ``input_axes`` and ``output_axes`` both given, the product of those axes
of the shape), ``n = max(1, fan_in)``, ``max(1, fan_out)`` or ``max(1, (fan_in + fan_out) / 2)``
by ``mode``, then a normal truncated at two standard deviations of ``stddev = sqrt(scale / n) /
0.87962566103423978`` (Keras' correction: the truncated distribution's deviation is then
``sqrt(scale / n)``), a normal of ``stddev = sqrt(scale / n)`` (``untruncated_normal``) or a
uniform on ``[-sqrt(3 scale / n), sqrt(3 scale / n)]``.

An initializer's own integer ``seed`` replaces the run's seed for its table (its rows then do
not change with ``--seed``). Any other callable (a function of ``(shape, dtype)``, a Keras
``Orthogonal`` object) is called once on the whole table (``(vocabulary_size, dim)``,
``dtype="float32"``) when the executor starts, and its result (float32, finite, of that shape)
becomes the table's initial rows, like a table given in ``initial_state``: the run does not
depend on the seed, and its bits are what the callable computes. A name or serialized form of
an initializer that is not recognised (``"orthogonal"``: a QR decomposition of the whole table,
not a function of one element) is refused with a message naming the table.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding.tables import (
    ConstantInitializer,
    RowIdInitializer,
    TruncatedNormalInitializer,
)
from tpuemb_cfg.embedding.tag_table import describe_callable
from tpuemb_cfg.model import TableInit

__all__ = ["TRUNCATED_STD", "resolve"]

#: Keras: the standard deviation of a unit normal truncated at two standard deviations.
TRUNCATED_STD = 0.87962566103423978
_MODES = ("fan_in", "fan_out", "fan_avg")
_DISTRIBUTIONS = ("truncated_normal", "untruncated_normal", "uniform")


#: Keras' names and aliases (``keras.initializers.get``) -> the class they stand for.
_ALIASES = {
    "zeros": "Zeros", "zero": "Zeros", "ones": "Ones", "one": "Ones", "constant": "Constant",
    "random_uniform": "RandomUniform", "uniform": "RandomUniform",
    "random_normal": "RandomNormal", "normal": "RandomNormal",
    "truncated_normal": "TruncatedNormal", "variance_scaling": "VarianceScaling",
    "glorot_uniform": "GlorotUniform", "glorot_normal": "GlorotNormal",
    "he_uniform": "HeUniform", "he_normal": "HeNormal", "lecun_uniform": "LecunUniform",
    "lecun_normal": "LecunNormal", "identity": "Identity", "IdentityInitializer": "Identity",
    "orthogonal": "Orthogonal", "OrthogonalInitializer": "Orthogonal",
}
#: VarianceScaling's subclasses: (scale, mode, distribution).
_VARIANCE_SCALING = {
    "GlorotUniform": (1.0, "fan_avg", "uniform"),
    "GlorotNormal": (1.0, "fan_avg", "truncated_normal"),
    "HeUniform": (2.0, "fan_in", "uniform"),
    "HeNormal": (2.0, "fan_in", "truncated_normal"),
    "LecunUniform": (1.0, "fan_in", "uniform"),
    "LecunNormal": (1.0, "fan_in", "truncated_normal"),
}
_KNOWN = ("Zeros", "Ones", "Constant", "RandomUniform", "RandomNormal", "TruncatedNormal",
          "VarianceScaling", "Identity", *_VARIANCE_SCALING)
_WHOLE_TABLE = {"Orthogonal": "an orthogonal matrix (the QR decomposition of the whole table)",
                "STFT": "a short-time Fourier transform basis"}


class _Refused(Exception):
    """What is wrong with an initializer (``resolve`` adds the table)."""


def _number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(
            float(value)):
        raise _Refused(f"{key}={value!r} is not a finite number")
    return float(value)


def _seed(config: Mapping[str, Any]) -> int | None:
    seed = config.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _fans(config: Mapping[str, Any], shape: tuple[int, int]) -> tuple[int, int]:
    """Keras' ``compute_fans`` of a 2-D variable ``shape``."""
    inputs, outputs = config.get("input_axes"), config.get("output_axes")
    if inputs is not None and outputs is not None:
        try:
            return (math.prod(shape[int(a)] for a in inputs),
                    math.prod(shape[int(a)] for a in outputs))
        except (TypeError, ValueError, IndexError):
            raise _Refused(f"input_axes={inputs!r} and output_axes={outputs!r} are not axes of "
                           f"the table's shape {list(shape)}") from None
    return shape[0], shape[1]


def _variance_scaling(name: str, config: Mapping[str, Any], shape: tuple[int, int],
                      source: str) -> TableInit:
    scale, mode, distribution = _VARIANCE_SCALING.get(
        name, (_number(config, "scale", 1.0), config.get("mode", "fan_in"),
               config.get("distribution", "truncated_normal")))
    if scale <= 0.0:
        raise _Refused(f"scale={scale!r}: it must be positive")
    if mode not in _MODES:
        raise _Refused(f"mode={mode!r}: expected one of {', '.join(_MODES)}")
    distribution = str(distribution).lower()
    distribution = "truncated_normal" if distribution == "normal" else distribution
    if distribution not in _DISTRIBUTIONS:
        raise _Refused(f"distribution={distribution!r}: expected one of "
                       f"{', '.join(_DISTRIBUTIONS)}")
    fan_in, fan_out = _fans(config, shape)
    n = {"fan_in": max(1.0, fan_in), "fan_out": max(1.0, fan_out),
         "fan_avg": max(1.0, (fan_in + fan_out) / 2.0)}[mode]
    scale /= n
    seed = _seed(config)
    if distribution == "truncated_normal":
        return TableInit("truncated_normal", source, stddev=math.sqrt(scale) / TRUNCATED_STD,
                         seed=seed)
    if distribution == "untruncated_normal":
        return TableInit("normal", source, stddev=math.sqrt(scale), seed=seed)
    limit = math.sqrt(3.0 * scale)
    return TableInit("uniform", source, low=-limit, high=limit, seed=seed)


def _known(name: str, config: Mapping[str, Any], shape: tuple[int, int],
           source: str) -> TableInit:
    """The :class:`TableInit` of Keras' class ``name`` with ``config`` on ``shape``."""
    if name == "Zeros":
        return TableInit("constant", source, value=0.0)
    if name == "Ones":
        return TableInit("constant", source, value=1.0)
    if name == "Constant":
        value = config.get("value", 0.0)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _Refused(f"value={value!r}: tpuemb takes a scalar constant")
        return TableInit("constant", source, value=_number(config, "value", 0.0))
    if name == "Identity":
        return TableInit("identity", source, value=_number(config, "gain", 1.0))
    if name == "RandomUniform":
        return TableInit("uniform", source, low=_number(config, "minval", -0.05),
                         high=_number(config, "maxval", 0.05), seed=_seed(config))
    if name in ("RandomNormal", "TruncatedNormal"):
        return TableInit("normal" if name == "RandomNormal" else "truncated_normal", source,
                         mean=_number(config, "mean", 0.0),
                         stddev=_number(config, "stddev", 0.05), seed=_seed(config))
    return _variance_scaling(name, config, shape, source)


def _resolve(initializer: Any, shape: tuple[int, int]) -> TableInit | None:
    kind = type(initializer)
    config: Mapping[str, Any]
    if kind is TruncatedNormalInitializer:
        mean = _number(vars(initializer), "mean", 0.0)
        stddev = _number(vars(initializer), "stddev", 1.0)
        seed = _seed(vars(initializer))
        if mean == 0.0 and stddev == 1.0 / math.sqrt(shape[1]) and seed is None:
            return None  # TableConfig's default: spec section 11
        return TableInit("truncated_normal", repr(initializer), mean=mean, stddev=stddev,
                         seed=seed)
    if kind is RowIdInitializer:
        return TableInit("row_id", repr(initializer), value=_number(vars(initializer),
                                                                    "offset", 0.0))
    if kind is ConstantInitializer:
        return TableInit("constant", repr(initializer),
                         value=_number(vars(initializer), "value", 0.0))
    if isinstance(initializer, str):
        name, config, source = _ALIASES.get(initializer, initializer), {}, repr(initializer)
    elif isinstance(initializer, Mapping):
        name = str(initializer.get("class_name", "")).rpartition(">")[2]
        config = initializer.get("config") or {}
        if not isinstance(config, Mapping):
            raise _Refused(f"{initializer!r} is not Keras' serialized form "
                           "{'class_name': ..., 'config': {...}}")
        name, source = _ALIASES.get(name, name), f"{name}({dict(config)!r})"
    else:
        name = kind.__name__
        get_config = getattr(initializer, "get_config", None)
        try:
            config = dict(get_config()) if name in _KNOWN and callable(get_config) else {}
        except Exception:  # noqa: BLE001 - the object's own code: then it is just a callable
            name = ""
        if name not in _KNOWN:
            if callable(initializer):
                return TableInit("callable", describe_callable(initializer), fn=initializer)
            raise _Refused(f"{initializer!r} is neither an initializer tpuemb knows nor a "
                           "callable")
        if name == "Identity" and "gain" not in config:  # Keras 3 does not serialize it
            config = {**config, "gain": getattr(initializer, "gain", 1.0)}
        source = f"{name}({config!r})"
    if name in _KNOWN:
        return _known(name, config, shape, source)
    why = _WHOLE_TABLE.get(name)
    reason = (f"it computes {why}, not a function of each element" if why
              else "it is not an initializer tpuemb knows")
    raise _Refused(f"{source}: {reason}; pass the initializer object itself (a callable is "
                   "called once on the whole table) or give the table's rows in initial_state "
                   f"(known: {', '.join(_KNOWN)}, RowIdInitializer, ConstantInitializer, "
                   "TruncatedNormalInitializer)")


def resolve(initializer: Any, table: str, vocabulary: int, dimension: int) -> TableInit | None:
    """The :class:`TableInit` of ``initializer`` (a ``TableConfig.initializer``) for the table
    ``table`` of ``vocabulary`` x ``dimension`` (the ``TableConfig``'s, whose shape Keras sees);
    None for the default (``TableConfig``'s truncated normal of deviation 1/sqrt(dim), or no
    initializer). Raises ``InputError`` naming the table for one that cannot be used."""
    if initializer is None:
        return None
    try:
        return _resolve(initializer, (int(vocabulary), int(dimension)))
    except _Refused as exc:
        raise InputError(f"table {table!r}: initializer {exc}") from None
