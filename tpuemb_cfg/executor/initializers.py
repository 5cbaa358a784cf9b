"""The initial rows of a table from its spec's initializer.

TensorFlow fills each table with its ``TableConfig``'s initializer, called once on the shape
``[vocabulary_size, dim]``. A compiled spec carries the initializers (``TableConfig.initializer``);
``prepare`` resolves each one here into a :class:`TableInit` (a distribution and its float64
parameters, computed as Keras computes them) recorded in the plan (``TablePlan.initializer``),
and the executor draws the rows counter-based (``counter``): element (r, c) is a function of
(seed, table index, r, c) alone, so a row computed when a step first touches it, a host's rows
of a Ray-sharded table and the whole table agree bit for bit. The values follow each
initializer's distribution and parameters; they are not TensorFlow's draws (its generator is
another), except for the deterministic initializers, which give exactly TensorFlow's values.

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
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError
from ..usercode import ExitCalled, exit_guard
from . import counter

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["TableInit", "called_tables", "resolve", "table_rows"]

F32 = np.float32
#: Keras: the standard deviation of a unit normal truncated at two standard deviations.
TRUNCATED_STD = 0.87962566103423978
_MODES = ("fan_in", "fan_out", "fan_avg")
_DISTRIBUTIONS = ("truncated_normal", "untruncated_normal", "uniform")


@dataclass(frozen=True)
class TableInit:
    """A table's initial values: ``kind`` and its float64 parameters.

    - ``truncated_normal``: ``mean + stddev x``, x a unit normal within (-2, 2);
    - ``normal``: ``mean + stddev x``, x a unit normal;
    - ``uniform``: uniform on [``low``, ``high``];
    - ``constant``: ``value`` everywhere;
    - ``row_id``: row r holds ``value + r`` in every column;
    - ``identity``: ``value`` where r == c, else 0;
    - ``callable``: ``fn((vocabulary_size, dim), dtype="float32")``, once.

    ``seed``: the initializer's own seed (None: the run's); ``source``: what the spec said, for
    messages.
    """

    kind: str
    source: str
    mean: float = 0.0
    stddev: float = 0.0
    low: float = 0.0
    high: float = 0.0
    value: float = 0.0
    seed: int | None = None
    fn: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without ``fn``: a plan goes to the Ray hosts, which get a callable's table
        from the driver and never call it, so the function need not be importable there."""
        return (TableInit, tuple(None if f.name == "fn" else getattr(self, f.name)
                                 for f in fields(self)))


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
    from ..embedding.tables import (
        ConstantInitializer,
        RowIdInitializer,
        TruncatedNormalInitializer,
    )

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
        from ..embedding.tag_table import describe_callable

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


def table_rows(init: TableInit, seed: int, table: int, rows: np.ndarray,
               dimension: int) -> np.ndarray:
    """float32 [len(rows), dimension]: the initial values of ``rows`` (int64 ids) of table
    index ``table`` (see :class:`TableInit`; ``init.seed`` replaces ``seed``)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    seed = seed if init.seed is None else init.seed
    if init.kind == "truncated_normal":
        return counter.normal_rows(seed, table, rows, dimension, init.stddev, init.mean)
    if init.kind == "normal":
        return counter.gaussian_rows(seed, table, rows, dimension, init.mean, init.stddev)
    if init.kind == "uniform":
        return counter.uniform_rows(seed, table, rows, dimension, init.low, init.high)
    out = np.zeros((rows.shape[0], dimension), dtype=F32)
    if init.kind == "constant":
        out[...] = F32(init.value)
    elif init.kind == "row_id":
        out[...] = (rows.astype(np.float64) + init.value).astype(F32)[:, None]
    elif init.kind == "identity":
        diagonal = np.flatnonzero(rows < dimension)
        out[diagonal, rows[diagonal]] = F32(init.value)
    else:
        raise InputError(f"{init.source}: a callable initializer gives whole tables only "
                         "(executor.initializers.called_tables)")
    return out


def _called(name: str, init: TableInit, shape: tuple[int, int]) -> np.ndarray:
    """``init.fn(shape, dtype="float32")`` checked: float32 of ``shape``, finite."""
    what = f"table {name!r}: the initializer {init.source}"
    try:
        with exit_guard() as exits:
            result = init.fn(shape, dtype="float32")
    except ExitCalled as exc:
        raise InputError(f"{what} called os._exit({exc.code!r})") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code: any exception, reported as input
        raise InputError(f"{what} raised {type(exc).__name__}: {exc} (it is called once with "
                         f"shape={shape} and dtype='float32')") from exc
    if exits:
        raise InputError(f"{what} called os._exit({exits[0]!r})")
    number = getattr(result, "numpy", None)
    if callable(number) and not isinstance(result, np.ndarray):
        result = number()
    try:
        values = np.asarray(result)
    except Exception:  # noqa: BLE001 - anything NumPy cannot read is reported
        values = np.asarray(None)
    if values.dtype.kind not in "fiu":
        raise InputError(f"{what} returned {type(result).__name__}; expected an array of "
                         f"numbers of shape {shape}")
    if values.shape != shape:
        raise InputError(f"{what} returned shape {values.shape}; expected {shape} "
                         "(vocabulary_size, dim)")
    values = values.astype(F32)
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        row, column = (int(i) for i in bad[0])
        raise InputError(f"{what} returned {values[row, column]} at row {row}, column "
                         f"{column}; initial values must be finite float32")
    return values


def called_tables(plan: Plan, given: Mapping[str, Any] | None,
                  source: str | None = None) -> dict[str, Any] | None:
    """``given`` (initial arrays by state-file key) plus the tables whose initializer is a
    callable (called once here, unless ``given`` holds the table): what the executor starts
    from. A table given in part (``executor.partial``: the rows a run touched) gets its rows on
    top of the callable's table, whose other rows are its initial values."""
    from .partial import rows_key, split_partial, values_key
    from .state import table_key

    tables = [t for t in plan.tables if t.initializer is not None
              and t.initializer.kind == "callable" and table_key(t.name) not in (given or {})]
    if not tables:
        return None if given is None else dict(given)
    out = dict(given or {})
    for table in tables:
        key = table_key(table.name)
        whole = _called(table.name, table.initializer, (table.vocabulary, table.dimension))
        if values_key(key) in out:  # checked as every partial table is
            _, found = split_partial(plan, {k: out[k] for k in (rows_key(table.name),
                                                                values_key(key)) if k in out},
                                     source)
            part = found[table.name]
            whole[part.rows] = part.values[key]
            del out[values_key(key)]
        out[key] = whole
    return out
