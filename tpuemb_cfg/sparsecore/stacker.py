"""TensorFlow's ``SparseCoreLayoutStacker`` in Python: which tables share a stacked table.

Same constructor, methods and argument names as
``tensorflow.python.tpu._pywrap_sparse_core_layout.SparseCoreLayoutStacker``, and
:meth:`SparseCoreLayoutStacker.GetLayouts` returns tpuemb's ``SparseCoreTableLayouts`` whose bytes
(``SerializeToString(deterministic=True)``) and text format are TensorFlow's. The keyword-only
``tf_version`` (default 2.21; ``tpuemb_cfg.base.tf_versions``, the one home of what differs)
chooses whose: 2.20's ``AddTable`` takes no ``num_features`` and its layouts carry neither
``per_sparse_core_batch_size`` nor ``num_features``; the stacks are the same.

The rules (N = num_partitions x sparse_cores_per_partition; docs/sparsecore/stacking-tensorflow.md):

- a table's padded width is its width rounded up to a multiple of 8, its padded height its height
  rounded up to a multiple of 8N;
- it costs ``4 x padded width x (output_samples / sparse_cores_per_partition)`` activation bytes and
  ``4 x padded width x padded height / num_partitions`` bytes of each chip's shard;
- it joins the **first** stack of its group (same padded width and group string) whose totals stay
  strictly below every limit (activation, shard, rows 2^31-1; a limit of 0 is off), else it opens a
  new stack; with stacking disabled every table is its own stack;
- the output lists groups in (padded width, group string byte-wise) order, stacks in creation order,
  tables in the order they were added; the k-th table (from 0) of a stack starts at row
  ``(padded rows before it) / N`` of each SparseCore and is rotated by ``(k x N / num_partitions)
  mod N`` SparseCores.

The arithmetic is the C++'s, value for value: ``int`` (32-bit) for the partition counts and N,
``int64_t`` elsewhere, division truncating toward zero (remainders keep the dividend's sign), and
the two expressions where C++ promotes to ``size_t`` (the shard bytes, ``sizeof(float) x ... /
num_partitions``, and the rotation, ``(tables - 1) x N / num_partitions mod N``) computed modulo
2^64 as unsigned numbers. Positive inputs never notice; negative ones give TensorFlow's odd but
deterministic values, and tpuemb accepts them as silently as TensorFlow does.

Where TensorFlow kills the process, tpuemb raises one error instead: ``ValueError`` for zero
partitions or SparseCores (TensorFlow: SIGFPE at the first ``AddTable``; tpuemb refuses them at
construction) and for a ``Set*`` call after ``AddTable`` (TensorFlow: SIGABRT, ``Check failed:
stacks_by_group_.empty() must call before AddTable``); ``TypeError`` naming the argument where
pybind11 refuses a value (a float, a string for a number, ``None`` for a string, an integer out of
its C++ range).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.platform import sparsecore_chips
from tpuemb_cfg.base.sparsecore_defaults import (
    ACTIVATION_MEMORY_BYTES_LIMIT,
    STACKED_ROW_LIMIT,
    VARIABLE_SHARD_BYTES_LIMIT,
)
from tpuemb_cfg.base.tf_versions import DEFAULT_TF_VERSION, tensorflow_version

if TYPE_CHECKING:
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

__all__ = [
    "ACTIVATION_MEMORY_BYTES_LIMIT",
    "STACKED_ROW_LIMIT",
    "VARIABLE_SHARD_BYTES_LIMIT",
    "SparseCoreLayoutStacker",
]

# The stacker's default limits (TensorFlow's ``tf_xla_sparse_core_stacking_mem_limit_bytes``,
# ``tf_xla_sparse_core_stacking_table_shard_limit_bytes`` and ``row_limit_``) are
# tpuemb_cfg.base.sparsecore_defaults', re-exported here.

#: ``"v5p 4, v6e 2, TPU7x 2"``: the SparseCores of a partition (a device) per chip kind.
_CORES_PER_PARTITION = ", ".join(f"{c.name} {c.sparse_cores_per_device}"
                                 for c in sparsecore_chips())

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_U64 = 1 << 64
_ABORT_AFTER_ADD = (
    "{method}({value!r}) after AddTable: TensorFlow 2.21 aborts the process here (SIGABRT, "
    "'Check failed: stacks_by_group_.empty() must call before AddTable'); call every Set* method "
    "before the first AddTable")


def _wrap(value: int, bits: int) -> int:
    """``value`` as a two's-complement integer of ``bits`` bits (C++ wraps on overflow)."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def _cdiv(a: int, b: int) -> int:
    """C++ ``a / b`` on ``int64_t``: truncated toward zero."""
    if b == -1 and a == _INT64[0]:
        raise ValueError(f"{a} / -1 overflows int64: TensorFlow dies here (SIGFPE); "
                         "use values of a sensible size")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _next_multiple(n: int, factor: int) -> int:
    """TensorFlow's ``NextLargestMultiple``: ``n + factor - n % factor`` unless ``factor``
    divides ``n`` (with C++'s remainder, so -5 and 64 give 64 and 100 and -64 give 0)."""
    extra = n - _cdiv(n, factor) * factor
    return n if extra == 0 else _wrap(n + factor - extra, 64)


def _integer(name: str, value: Any, bounds: tuple[int, int], ctype: str) -> int:
    """``value`` as pybind11 converts it to a C++ integer, or the TypeError pybind11 raises."""
    if isinstance(value, float) or isinstance(value, str | bytes):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__}); "
                        f"pass an int (TensorFlow's binding refuses it too)")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__}); "
                        f"pass an int (TensorFlow's binding refuses it too)") from None
    if not bounds[0] <= number <= bounds[1]:
        raise TypeError(f"{name} = {number} does not fit a C++ {ctype} "
                        f"({bounds[0]}..{bounds[1]}); TensorFlow's binding refuses it: pass a "
                        f"value in that range")
    return number


def _flag(name: str, value: Any) -> bool:
    """``value`` as pybind11 converts it to a C++ ``bool``: ``True``/``False``, ``None`` (false)
    and numbers (their truth value); strings and containers are refused."""
    if value is None:
        return False
    if isinstance(value, str | bytes) or not hasattr(type(value), "__bool__"):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__}); "
                        f"pass True or False")
    return bool(value)


def _text(name: str, value: Any) -> str:
    """``value`` as a C++ string: a ``str`` (or UTF-8 ``bytes``, which pybind11 also takes)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise TypeError(f"{name} = {value!r} is not UTF-8; pass a str") from None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r} ({type(value).__name__}); "
                        f"pass a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError(f"{name} = {value!r} cannot be encoded as UTF-8; pass a str without "
                        f"lone surrogates") from None
    return value


@dataclass(frozen=True)
class _Table:
    """One added table, with what is known before the stack is complete."""

    name: str
    height: int
    width: int
    padded_height: int
    padded_width: int
    row_offset: int
    rotation: int
    batch_size: int
    num_features: int


@dataclass
class _Stack:
    """A stack being filled: its running totals (``int64_t`` in TensorFlow) and its tables."""

    rows: int = 0
    activation_bytes: int = 0
    shard_bytes: int = 0
    tables: list[_Table] = field(default_factory=list)


class SparseCoreLayoutStacker:
    """Decides which tables share a stacked table, as TensorFlow's stacker does (2.21's, or the
    ``tf_version`` given: ``"2.20"`` or ``"2.21"``).

    ``num_partitions`` is the number of devices (a chip is one, or more: ``devices_per_chip`` of
    ``tpuemb_cfg.base.platform``), ``sparse_cores_per_partition`` the SparseCores of each
    (``sparse_cores_per_device``); ``disable_table_stacking`` puts every table in its own stack.
    Call the ``Set*`` methods first, then :meth:`AddTable` once per table (the order decides
    the stacks), then :meth:`GetLayouts` (as often as wanted; later ``AddTable`` calls show in
    later results, as in TensorFlow).
    """

    def __init__(self, num_partitions: int, disable_table_stacking: bool,
                 sparse_cores_per_partition: int, *, tf_version: str = DEFAULT_TF_VERSION
                 ) -> None:
        self._version = tensorflow_version(tf_version)
        partitions = _integer("num_partitions", num_partitions, _INT32, "int")
        enabled = not _flag("disable_table_stacking", disable_table_stacking)
        per_partition = _integer("sparse_cores_per_partition", sparse_cores_per_partition,
                                 _INT32, "int")
        if partitions == 0 or per_partition == 0:
            raise ValueError(
                f"num_partitions={partitions}, sparse_cores_per_partition={per_partition}: both "
                f"must be non-zero (TensorFlow 2.21 divides by them and dies with SIGFPE at the "
                f"first AddTable); pass the number of partitions (devices) and the SparseCores "
                f"of each ({_CORES_PER_PARTITION})")
        cores = _wrap(partitions * per_partition, 32)
        if cores == 0 or _wrap(cores * 8, 32) == 0:
            raise ValueError(
                f"num_partitions={partitions} x sparse_cores_per_partition={per_partition} "
                f"overflows TensorFlow's 32-bit SparseCore count to 0 (it would die with SIGFPE); "
                f"pass realistic counts")
        self._partitions = partitions
        self._per_partition = per_partition
        self._cores = cores
        self._enabled = enabled
        self._activation_limit = ACTIVATION_MEMORY_BYTES_LIMIT
        self._shard_limit = VARIABLE_SHARD_BYTES_LIMIT
        self._row_limit = STACKED_ROW_LIMIT
        # (padded width, group) -> stacks in creation order; output sorted by the key.
        self._groups: dict[tuple[int, str], list[_Stack]] = {}

    def _before_add(self, method: str, value: object) -> None:
        if self._groups:
            raise ValueError(_ABORT_AFTER_ADD.format(method=method, value=value))

    def SetActivationMemoryBytesLimit(self, arg0: int, /) -> None:  # TensorFlow's method name
        """Activation bytes per SparseCore a stack must stay below (0: no limit)."""
        limit = _integer("activation memory bytes limit", arg0, _INT64, "int64_t")
        self._before_add("SetActivationMemoryBytesLimit", arg0)
        self._activation_limit = limit

    def SetVariableShardBytesLimit(self, arg0: int, /) -> None:  # TensorFlow's method name
        """Bytes of a stack's shard on one chip a stack must stay below (0: no limit)."""
        limit = _integer("variable shard bytes limit", arg0, _INT64, "int64_t")
        self._before_add("SetVariableShardBytesLimit", arg0)
        self._shard_limit = limit

    def SetStackingEnabled(self, arg0: bool, /) -> None:  # TensorFlow's method name
        """Turn stacking on or off (``True`` re-enables it after ``disable_table_stacking``)."""
        enabled = _flag("stacking enabled", arg0)
        self._before_add("SetStackingEnabled", arg0)
        self._enabled = enabled

    def AddTable(  # TensorFlow's method name and arguments  # noqa: PLR0913
            self, table_name: str, table_height: int, table_width: int, group: str,
            output_samples: int, num_features: int | None = None) -> None:
        """Place one table: in the first stack of its (padded width, group) that it fits, else in
        a new stack. ``output_samples`` are the rows looked up per step (all chips).
        ``num_features``: required by TensorFlow 2.21's binding, refused by 2.20's (a
        TypeError, as pybind11 raises one)."""
        name = _text("table_name", table_name)
        height = _integer("table_height", table_height, _INT64, "int64_t")
        width = _integer("table_width", table_width, _INT64, "int64_t")
        key = _text("group", group)
        samples = _integer("output_samples", output_samples, _INT64, "int64_t")
        features = self._num_features(num_features)

        batch_size = _cdiv(samples, self._per_partition)
        padded_width = _next_multiple(width, 8)
        padded_height = _next_multiple(height, _wrap(self._cores * 8, 32))
        activation = _wrap(4 * padded_width * batch_size, 64)
        # sizeof(float) is a size_t: the product and the division are unsigned 64-bit.
        shard = _wrap((4 * padded_width * padded_height) % _U64
                      // (self._partitions % _U64), 64)

        stacks = self._groups.setdefault((padded_width, key), [])
        stack = self._fitting(stacks, activation, shard, padded_height)
        if stack is None:
            stack = _Stack()
            stacks.append(stack)
        k = len(stack.tables)
        cores = self._cores % _U64
        rotation = _wrap((k * cores) % _U64 // (self._partitions % _U64) % cores, 64)
        stack.tables.append(_Table(
            name=name, height=height, width=width, padded_height=padded_height,
            padded_width=padded_width, row_offset=_cdiv(stack.rows, self._cores),
            rotation=rotation, batch_size=batch_size, num_features=features))
        stack.rows = _wrap(stack.rows + padded_height, 64)
        stack.shard_bytes = _wrap(stack.shard_bytes + shard, 64)
        stack.activation_bytes = _wrap(stack.activation_bytes + activation, 64)

    def _num_features(self, value: int | None) -> int:
        """``num_features`` as this version's binding takes it: an ``int64_t`` (2.21), or no
        such argument (2.20: 0, never written)."""
        version = self._version
        if not version.add_table_num_features:
            if value is not None:
                raise TypeError(f"num_features={value!r}: TensorFlow {version.name}'s AddTable "
                                f"takes no num_features (its arguments: table_name, "
                                f"table_height, table_width, group, output_samples); leave it "
                                f"out, or stack as TensorFlow 2.21 (tf_version='2.21')")
            return 0
        if value is None:
            raise TypeError(f"AddTable() is missing num_features: TensorFlow {version.name}'s "
                            f"binding requires it (the features looking the table up)")
        return _integer("num_features", value, _INT64, "int64_t")

    def _fitting(self, stacks: list[_Stack], activation: int, shard: int,
                 rows: int) -> _Stack | None:
        """The first stack the table fits in: every total + the table's share stays strictly
        below its limit (a limit of 0 is off)."""
        if not self._enabled:
            return None
        for stack in stacks:
            if (self._activation_limit != 0
                    and _wrap(stack.activation_bytes + activation, 64) >= self._activation_limit):
                continue
            if (self._shard_limit != 0
                    and _wrap(stack.shard_bytes + shard, 64) >= self._shard_limit):
                continue
            if self._row_limit != 0 and _wrap(stack.rows + rows, 64) >= self._row_limit:
                continue
            return stack
        return None

    def GetLayouts(self) -> SparseCoreTableLayouts:  # TensorFlow's method name
        """Every table's layout, groups in (padded width, group string) order (TensorFlow 2.20:
        without ``per_sparse_core_batch_size`` and ``num_features``)."""
        from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

        layouts = SparseCoreTableLayouts()
        # std::pair<int64_t, std::string> order: the string compares byte-wise.
        for key in sorted(self._groups, key=lambda k: (k[0], k[1].encode("utf-8"))):
            for stack in self._groups[key]:
                stacked_name = ""
                for table in stack.tables:  # "_" only between non-empty prefixes, as in C++
                    stacked_name = f"{stacked_name}_{table.name}" if stacked_name else table.name
                total_rows = _cdiv(stack.rows, self._cores)
                for table in stack.tables:
                    out = layouts.tables.add()
                    out.table_name = table.name
                    out.stacked_table_name = stacked_name
                    out.num_sparse_cores = self._cores
                    out.num_partitions = self._partitions
                    out.total_rows_per_sparse_core_shard = total_rows
                    out.unsharded_shape.extend((table.height, table.width))
                    out.unsharded_padded_shape.extend((table.padded_height, table.padded_width))
                    out.sparse_core_shard_row_offset = table.row_offset
                    out.sparse_core_shard_rotation = table.rotation
                    if self._version.layout_batch_fields:
                        out.per_sparse_core_batch_size = table.batch_size
                        out.num_features = table.num_features
        return layouts
