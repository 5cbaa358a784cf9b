"""Helpers shared by the rule families, most of them for ``optimization_parameters``.

The optimizer rules (``optimizers``, ``hyperparameters``, ``programs``) and the accumulation,
clipping and deprecated-field families all iterate the tables that have
``optimization_parameters`` (:func:`op_tables`) or a given algorithm (:func:`algorithm_tables`),
print float32 values the way the text format writes them (:func:`fmt`), name enum values
(:func:`enum_name`), report undeclared ones (:func:`undeclared_value`), label a table's
diagnostics (:func:`table_diag`) and check hyper-parameters against the algorithm table
(:func:`table_violations`). Tables and features share :func:`duplicate_names`.
"""

from __future__ import annotations

import heapq
import math
import struct
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple
from weakref import WeakKeyDictionary

from tpuemb_cfg.algorithms import Constraint
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context

if TYPE_CHECKING:
    from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

    TableDescriptor = TPUEmbeddingConfiguration.TableDescriptor


def fmt(x: float) -> str:
    """A float32 value in its shortest round-trip form, as protobuf's text format writes it.

    ``0.1`` rather than ``0.10000000149011612``, ``100.0``, ``3.4028235e+38``; ``-0.0``, ``nan``,
    ``inf`` and ``-inf`` as such.
    """
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        try:
            if struct.unpack("<f", struct.pack("<f", candidate))[0] == x:
                return repr(candidate)
        except OverflowError:  # rounded above float32's maximum
            continue
    return repr(x)  # not a float32 value


def finite(x: float) -> bool:
    """True for a finite float (False for NaN and infinities)."""
    return math.isfinite(x)


def opt_path(table_path: str) -> str:
    """``table_descriptor[i].optimization_parameters``."""
    return f"{table_path}.optimization_parameters"


def optimization(table: TableDescriptor) -> OptimizationParameters | None:
    """The table's ``optimization_parameters``, or ``None`` when absent."""
    if table.HasField("optimization_parameters"):
        return table.optimization_parameters
    return None


def lr_kind(op: OptimizationParameters) -> str | None:
    """``"constant"``, ``"dynamic"`` or ``None`` (no learning rate)."""
    if not op.HasField("learning_rate"):
        return None
    return op.learning_rate.WhichOneof("learning_rate")


class OpTable:
    """A table that has ``optimization_parameters``.

    Made when a rule reaches the table and let go of after it (the index keeps only table
    positions: a million tables would otherwise hold a million of these, with their messages'
    objects, for the whole validation); its field path is made when a finding asks for it.
    """

    __slots__ = ("algorithm", "i", "op", "params", "table")

    def __init__(self, i: int, table: TableDescriptor, op: OptimizationParameters,
                 algorithm: str | None, params: Any) -> None:
        self.i = i
        self.table = table
        self.op = op
        #: The selected member of the oneof ``parameters`` (``None`` when nothing is selected).
        self.algorithm = algorithm
        #: The algorithm's parameters message (``op.<algorithm>``; ``None`` without one).
        self.params = params

    @property
    def op_path(self) -> str:
        """``table_descriptor[i].optimization_parameters``."""
        return f"table_descriptor[{self.i}].optimization_parameters"


class _Index(NamedTuple):
    """Positions of the tables with ``optimization_parameters``, and of those per algorithm
    (8 bytes a table)."""

    with_op: array[int]
    by_algorithm: dict[str, array[int]]


#: Per-validation index of the tables, built once and shared by every rule of this package (a
#: rule iterating only the tables of its algorithm keeps validation linear in the table count).
_INDEX: WeakKeyDictionary[Context, _Index] = WeakKeyDictionary()


def _index(ctx: Context) -> _Index:
    try:
        index = _INDEX.get(ctx)
    except TypeError:  # a context that cannot be weakly referenced: no cache
        index = None
    if index is None:
        index = _Index(array("q"), {})
        for i, table in enumerate(ctx.config.table_descriptor):
            if not table.HasField("optimization_parameters"):
                continue
            index.with_op.append(i)
            name = table.optimization_parameters.WhichOneof("parameters")
            if name is not None:
                index.by_algorithm.setdefault(name, array("q")).append(i)
        try:
            _INDEX[ctx] = index
        except TypeError:
            pass
    return index


def _entries(ctx: Context, positions: Iterable[int]) -> Iterator[OpTable]:
    """The :class:`OpTable` of each table at ``positions`` (tables with
    ``optimization_parameters``), made as it is reached."""
    tables = ctx.config.table_descriptor
    algorithms = ctx.derived.algorithms  # the selected member, of a table with parameters
    for i in positions:
        table = tables[i]
        op = table.optimization_parameters
        name = algorithms[i]
        yield OpTable(i, table, op, name, getattr(op, name) if name else None)


def op_tables(ctx: Context) -> Iterator[OpTable]:
    """Every table that has ``optimization_parameters``, in table order."""
    return _entries(ctx, _index(ctx).with_op)


def algorithm_tables(ctx: Context, *algorithms: str) -> Iterator[OpTable]:
    """Every table whose algorithm is one of ``algorithms``, in table order (every table with an
    algorithm when none is named)."""
    index = _index(ctx)
    if not algorithms:
        return (entry for entry in _entries(ctx, index.with_op) if entry.algorithm is not None)
    empty: array[int] = array("q")
    found = [index.by_algorithm.get(name, empty) for name in algorithms]
    return _entries(ctx, found[0] if len(found) == 1 else heapq.merge(*found))


def table_diag(
    ctx: Context, t: OpTable, field: str, message: str, *, hint: str | None = None
) -> Diagnostic:
    """``<table label>: <message>`` at ``field`` of the table's ``optimization_parameters``
    (``t.op_path`` itself for ``""``)."""
    path = f"{t.op_path}.{field}" if field else t.op_path
    return ctx.diag(path, f"{ctx.table_label(t.i)}: {message}", hint=hint)


def constant_rates(ctx: Context) -> Iterator[tuple[OpTable, float]]:
    """(table, learning_rate.constant) of every table with a constant learning rate."""
    for t in op_tables(ctx):
        if lr_kind(t.op) == "constant":
            yield t, t.op.learning_rate.constant


def duplicate_names(
    ctx: Context, field: str, what: str, messages: Iterable[Any]
) -> Iterator[Diagnostic]:
    """``<field>[j]: name 'x' is already used by <field>[i]`` at every message (the elements of
    the repeated ``field``) whose non-empty name an earlier one has."""
    first: dict[str, int] = {}
    for j, message in enumerate(messages):
        name = message.name
        if not name:
            continue
        if name in first:
            yield ctx.diag(
                f"{field}[{j}].name",
                f"{field}[{j}]: name {name!r} is already used by {field}[{first[name]}]",
                hint=f"give every {what} a unique name",
            )
        else:
            first[name] = j


def table_violations(
    ctx: Context, at: OpTable, checks: Iterable[tuple[str, Constraint]]
) -> Iterator[Diagnostic]:
    """One diagnostic per (field, constraint) of ``checks`` that table ``at`` fails.

    ``checks`` name fields of the table's algorithm message; NaN and infinities are skipped
    (OPT002/OPT003 report them), so one bad value gives one diagnostic.
    """
    for field, constraint in checks:
        value = getattr(at.params, field, None)
        if not isinstance(value, float) or not finite(value) or not constraint.bad(value):
            continue
        yield table_diag(
            ctx, at, f"{at.algorithm}.{field}",
            f"{at.algorithm}.{field} is {fmt(value)}, expected {constraint.expected}: "
            f"{constraint.why}",
            hint=constraint.hint,
        )


def enum_name(message: Any, field: str, number: int) -> str | None:
    """The name of enum value ``number`` of ``message.field``, ``None`` when undeclared."""
    try:
        value = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(number)
    except (AttributeError, KeyError):
        return None
    return None if value is None else value.name


def enum_names(message: Any, field: str) -> str:
    """``"UNSPECIFIED (0), ENABLED (1), ..."`` for the enum of ``message.field``."""
    try:
        values = message.DESCRIPTOR.fields_by_name[field].enum_type.values
    except (AttributeError, KeyError):
        return "?"
    return ", ".join(f"{v.name} ({v.number})" for v in values)


def undeclared_value(ctx: Context, t: OpTable, path: str, hint: str) -> Iterator[Diagnostic]:
    """One diagnostic when the enum field at ``path`` (dotted, below the table's
    ``optimization_parameters``) holds a number its enum does not declare: proto3 enums are
    open, so binary, JSON and text input can carry any number."""
    *parents, field = path.split(".")
    message: Any = t.op
    for parent in parents:
        message = getattr(message, parent)
    number = getattr(message, field)
    if enum_name(message, field, number) is None:
        yield table_diag(
            ctx, t, path,
            f"{path} is {number}, which the enum does not declare; expected one of "
            f"{enum_names(message, field)}",
            hint=hint,
        )
