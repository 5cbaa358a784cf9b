"""Memory of a configuration before any TPU time: per host (legacy), per SparseCore, chip and
host (SparseCore), against the memory each has, with the tables that dominate.

**Legacy** (:func:`legacy_memory`): what the executor holds on each host of the Ray backend.
With V rows, N hosts, q = V div N and r = V mod N, host h holds ``rows_h = q + [h < r]`` rows
of every table under both sharding strategies (``layout.TableLayout.rows_of``; MOD and
DIV_DEFAULT place different rows there, never a different number), so per host and table of
dimension D with S slots (the optimizer's, from :mod:`tpuemb_cfg.algorithms`):

- ``tables``    = rows_h x D x 4;
- ``slots``     = rows_h x D x 4 x S;
- ``snapshots`` = rows_h x D x 4 for a non-lazy table (``use_non_lazy_adam``: every row steps)
  of a configuration that updates: each host keeps a pre-step copy of its rows, taken by every
  update (the update norm reads it) and held until the next one.

The TPU devices' share (a ``"chip"`` breakdown, one unit per tensor core) is TensorFlow's own
estimate (``derived.host_sizes``, section 1.6, what rule SIZE004 checks): a host's state
variables (tables, slots, gradient accumulators), rows padded to 8 floats (or packed), spread
over its ``num_tensor_cores / num_hosts`` devices.

**SparseCore** (:func:`sparsecore_memory`): every stacked table is spread row by row over the
N = chips x S SparseCores (S per chip): id x of a table with rotation k lives on SparseCore
``(x + k) mod N``. Per SparseCore p and stack (padded width W, P padded rows, S_o slots):

- ``tables`` + ``slots`` + ``padding`` = P / N x W x 4 x (1 + S_o)
  (``summary.stack_bytes_per_sparse_core``, the bytes ``tpuemb inspect`` shows), split into the
  real elements ``sum over the stack's tables of rows_p x dim`` (rows_p: the ids x < V with
  (x + k) mod N = p) x 4 for the table and x 4 x S_o for the slots, and the rest, padding;
- ``buffers``: the COO buffer of the stack's ids, each entry an int32 embedding id, an int32
  sample id and a float32 gain (12 bytes), plus ``max(N, 8)`` int32 row pointers: the buffer
  per chip is jax-tpu-embedding's ``coo_buffer_size_per_device`` (``preprocessing.buffer_sizes``:
  roundup8(max_ids_per_partition) x S x N, or the suggested size) or TensorFlow's
  ``max_ids_per_chip_per_sample x samples per chip``, a SparseCore its 1/S share;
- ``activations`` and ``gradients``: samples per SparseCore x W x 4 each (forward and
  backward), with TensorFlow's samples per chip / S, jax-tpu-embedding's sum over the features
  of samples // N (each stacker's own count).

A chip is the sum of its S SparseCores, against its HBM (``topology.kind.hbm_bytes``,
overridable); on a chip jax sees as two devices (TPU7x) the unit is a device, its S SparseCores
against its half of the chip's HBM. With TensorFlow's ``initialize_tables_on_host`` a host
also builds every full table's initial value (4 x V x dim per table, rule SC012's count) in
host memory.

docs/plan/memory.md states each formula and what is not counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tpuemb_cfg.algorithms import ALGORITHMS
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.base.schema import Mode, ShardingStrategy
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.derived import derive, host_sizes
from tpuemb_cfg.model.layout import TableLayout
from tpuemb_cfg.rules.plan import OverMemory, plan_findings
from tpuemb_cfg.sparsecore.summary import stack_bytes_per_sparse_core, stack_optimizer

if TYPE_CHECKING:
    from tpuemb_cfg.model.derived import Derived
    from tpuemb_cfg.model.layout import TableLayout
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

__all__ = ["COO_ENTRY_BYTES", "DOMINANT", "Level", "MemoryReport", "UnitMemory",
           "legacy_memory", "memory_findings", "sparsecore_memory"]

#: What one unit of a report is.
Level = Literal["host", "chip", "device", "sparsecore"]

#: How many tables ``MemoryReport.dominant`` lists.
DOMINANT = 5
#: float32 parameters, slots, activations and gradients.
F32 = 4
#: One COO entry: int32 embedding id, int32 sample id, float32 gain.
COO_ENTRY_BYTES = 12
#: One CSR row pointer (int32).
ROW_POINTER_BYTES = 4

LEGACY_PARTS = ("tables", "slots", "snapshots")
SPARSECORE_PARTS = ("tables", "slots", "padding", "buffers", "activations", "gradients")
HOST_PARTS = ("host_tables",)


@dataclass(frozen=True)
class UnitMemory:
    """The bytes of one host, chip or SparseCore (``index``, from 0), by part.

    Parts (bytes): legacy ``tables``, ``slots`` (real elements of the tables and of their
    optimizer's slots) and ``snapshots`` (the pre-step copy the executor keeps of a non-lazy
    table's rows); SparseCore ``tables``, ``slots``, ``padding`` (padded minus real elements of
    tables and slots), ``buffers`` (COO buffers and row pointers), ``activations``,
    ``gradients``; a SparseCore host ``host_tables`` (the full tables it builds under
    ``initialize_tables_on_host``); a legacy TPU device ``state`` and ``padding`` (its share of
    TensorFlow's padded estimate, section 1.6).
    """

    index: int
    parts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "parts": dict(self.parts), "total": self.total}


@dataclass(frozen=True)
class MemoryReport:
    """Memory per unit of ``level`` against ``capacity_bytes`` (``None``: unknown, so it fits).

    ``dominant``: the tables holding the most bytes in the fullest unit, ``(name, bytes)``,
    largest first, at most :data:`DOMINANT`. ``fits``: every unit of this report and of
    ``breakdown`` is within its capacity. ``breakdown``: the same configuration at other levels
    (SparseCore: per SparseCore, and per host when the hosts hold tables). ``paths``: the
    configuration field of every table (legacy ``table_descriptor[i]``, SparseCore
    ``tables["name"]``). ``hint``: the fix an out-of-memory finding suggests.
    """

    level: Level
    units: tuple[UnitMemory, ...]
    capacity_bytes: int | None
    dominant: tuple[tuple[str, int], ...]
    fits: bool
    breakdown: tuple[MemoryReport, ...] = ()
    paths: Mapping[str, str] = field(default_factory=dict)
    hint: str = ""

    @property
    def fullest(self) -> UnitMemory | None:
        """The unit holding the most bytes (the first of equals), None without units."""
        return max(self.units, key=lambda u: u.total, default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "units": [u.to_json() for u in self.units],
            "dominant": [[name, size] for name, size in self.dominant],
            "breakdown": [r.to_json() for r in self.breakdown],
            "hint": self.hint,
        }


def _fits(units: Sequence[UnitMemory], capacity: int | None) -> bool:
    return capacity is None or all(u.total <= capacity for u in units)


def _top(sizes: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    ranked = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))
    return tuple(ranked[:DOMINANT])


# ------------------------------------------------------------------------------------- legacy


@dataclass(frozen=True)
class _Table:
    """What a host's bytes of one legacy table depend on."""

    name: str
    vocabulary: int
    dimension: int
    slots: int
    snapshot: bool  # a non-lazy table of a configuration that updates

    def arrays(self) -> int:
        return 1 + self.slots + (1 if self.snapshot else 0)


def _legacy_tables(config: TPUEmbeddingConfiguration, derived: Derived) -> list[_Table]:
    updates = int(config.mode) != Mode.INFERENCE
    tables = []
    for t, td in enumerate(config.table_descriptor):
        algorithm, slots = derived.algorithms[t], derived.slots[t]
        if algorithm is None or slots is None:
            raise UsageError(
                f"table_descriptor[{t}] ({td.name!r}): its optimizer's slots are unknown (no "
                "optimization_parameters.parameters, or a user program of unknown arity); set "
                "its optimizer (tpuemb validate names the problem)")
        if td.vocabulary_size < 1 or td.dimension < 1:
            raise UsageError(
                f"table_descriptor[{t}] ({td.name!r}): vocabulary_size {td.vocabulary_size} "
                f"and dimension {td.dimension}; both must be at least 1 (tpuemb validate)")
        entry = ALGORITHMS.get(algorithm)
        message = getattr(td.optimization_parameters, algorithm)
        lazy = entry.lazy(message) if entry is not None else True
        tables.append(_Table(td.name, int(td.vocabulary_size), int(td.dimension), len(slots),
                             updates and not lazy))
    return tables


def _mod(config: TPUEmbeddingConfiguration, strategy: str | None) -> bool:
    if strategy is None:
        return int(config.sharding_strategy) == ShardingStrategy.MOD
    key = strategy.strip().upper()
    if key not in ("MOD", "DIV_DEFAULT"):
        raise UsageError(f"{arg('strategy')} {strategy!r}: expected 'MOD' or 'DIV_DEFAULT'")
    return key == "MOD"


def _host_parts(tables: Sequence[_Table], layouts: Sequence[TableLayout], host: int
                ) -> tuple[dict[str, int], dict[str, int]]:
    """(parts, bytes per table) of ``host``."""
    parts = dict.fromkeys(LEGACY_PARTS, 0)
    per_table: dict[str, int] = {}
    for table, layout in zip(tables, layouts, strict=True):
        row_bytes = layout.rows_of(host) * table.dimension * F32
        parts["tables"] += row_bytes
        parts["slots"] += row_bytes * table.slots
        parts["snapshots"] += row_bytes if table.snapshot else 0
        per_table[table.name] = row_bytes * table.arrays()
    return parts, per_table


def _first_host_bytes(tables: Sequence[_Table], hosts: int) -> int:
    """Host 0's bytes among ``hosts``: it holds ceil(V / N) rows of every table, the most."""
    return sum(TableLayout(t.vocabulary, hosts, True).rows_of(0) * t.dimension * F32
               * t.arrays() for t in tables)


def _fewest_hosts(tables: Sequence[_Table], capacity: int, at_least: int) -> int | None:
    """The fewest hosts (>= ``at_least``) whose fullest host fits ``capacity``; None when even
    one row per host does not."""
    most = max(at_least, max((t.vocabulary for t in tables), default=1))
    if _first_host_bytes(tables, most) > capacity:
        return None
    low, high = at_least, most
    while low < high:  # host 0's bytes never grow with more hosts
        middle = (low + high) // 2
        if _first_host_bytes(tables, middle) <= capacity:
            high = middle
        else:
            low = middle + 1
    return low


def _legacy_hint(tables: Sequence[_Table], hosts: int, capacity: int | None,
                 dominant: Sequence[tuple[str, int]]) -> str:
    if capacity is None:
        return ""
    fewest = _fewest_hosts(tables, capacity, hosts + 1)
    more = (f"use {fewest} hosts (num_hosts) or more" if fewest is not None
            else "no number of hosts fits (one row of a table is too large)")
    most = max(tables, key=lambda t: t.slots, default=None)
    slots = (f", an optimizer with fewer slots ({most.name!r} has {most.slots})"
             if most is not None and most.slots else "")
    largest = f", a smaller table ({dominant[0][0]!r} is the largest)" if dominant else ""
    return f"{more}{slots}{largest}, or more host memory"


def legacy_memory(config: TPUEmbeddingConfiguration, *, hosts: int | None = None,
                  strategy: str | None = None, host_memory_bytes: int | None = None,
                  device_memory_bytes: int | None = None) -> MemoryReport:
    """Bytes per host of a legacy configuration: what each Ray host of the executor holds (the
    module docstring gives the parts). ``hosts`` overrides ``num_hosts`` (as the Ray backend's
    ``shards`` does), ``strategy`` (``"MOD"`` / ``"DIV_DEFAULT"``) ``sharding_strategy``;
    ``host_memory_bytes`` is each host's memory (None: unknown, no finding). ``breakdown``:
    the TPU devices' share of the tables (level ``"chip"``, one unit per tensor core) against
    ``device_memory_bytes`` (``derived.TPU_DEVICE_MEMORY`` has each generation's)."""
    count = max(int(config.num_hosts), 1) if hosts is None else int(hosts)
    if count < 1:
        raise UsageError(f"{arg('hosts')} {count}: a table needs at least one host")
    mod = _mod(config, strategy)
    if count != config.num_hosts:
        config = with_hosts(config, count)
    derived = derive(config)
    tables = _legacy_tables(config, derived)

    layouts = [TableLayout(t.vocabulary, count, mod) for t in tables]
    units, per_table = [], []
    for host in range(count):
        parts, sizes = _host_parts(tables, layouts, host)
        units.append(UnitMemory(host, parts))
        per_table.append(sizes)
    fullest = max(range(count), key=lambda h: units[h].total)
    dominant = _top(per_table[fullest])
    devices = _devices(config, derived, device_memory_bytes)
    return MemoryReport(
        level="host", units=tuple(units), capacity_bytes=host_memory_bytes, dominant=dominant,
        fits=_fits(units, host_memory_bytes) and all(r.fits for r in devices),
        breakdown=devices,
        paths={td.name: f"table_descriptor[{t}]" for t, td in enumerate(config.table_descriptor)},
        hint=_legacy_hint(tables, count, host_memory_bytes, dominant),
    )


def with_hosts(config: TPUEmbeddingConfiguration, hosts: int) -> TPUEmbeddingConfiguration:
    """A copy of ``config`` with ``num_hosts`` = ``hosts``."""
    copy = type(config)()
    copy.CopyFrom(config)
    copy.num_hosts = hosts
    return copy


def _devices(config: TPUEmbeddingConfiguration, derived: Derived,
             capacity: int | None) -> tuple[MemoryReport, ...]:
    """The TPU devices' share (``derived.host_sizes``, section 1.6, what SIZE004 checks): a
    host's rows spread over its ``num_tensor_cores / num_hosts`` devices, each holding
    ``ceil(bytes / devices)`` of the host's ``state`` (tables, slots and gradient accumulators,
    TensorFlow's state variables) and ``padding`` (rows padded to 8 floats, or packed). None
    when there are fewer tensor cores than hosts."""
    hosts = derived.num_hosts or 1
    per_host = int(config.num_tensor_cores) // hosts
    if per_host < 1:
        return ()
    units: list[UnitMemory] = []
    for span in host_sizes(config, derived):
        state = -(-span.logical_bytes // per_host)
        parts = {"state": state, "padding": -(-span.estimate_bytes // per_host) - state}
        units.extend(UnitMemory(host * per_host + d, parts)
                     for host in range(span.first, span.last + 1) for d in range(per_host))
    return (MemoryReport(level="chip", units=tuple(units), capacity_bytes=capacity, dominant=(),
                         fits=_fits(units, capacity),
                         hint="use more hosts or tensor cores (num_hosts, num_tensor_cores), an "
                              "optimizer with fewer slots, or smaller tables"),)


# ---------------------------------------------------------------------------------- SparseCore


def _rows_on(vocabulary: int, rotation: int, cores: int, core: int) -> int:
    """Real rows of a table on SparseCore ``core``: the ids x < V with (x + rotation) mod N =
    core, i.e. x = a, a + N, ... with a = (core - rotation) mod N."""
    first = (core - rotation) % cores
    return 0 if first >= vocabulary else (vocabulary - first + cores - 1) // cores


def _samples_per_sparse_core(config: SparseCoreConfig, stacking: Stacking, stack: Stack) -> int:
    """Samples of the stack one SparseCore looks up per step, as each stacker counts them:
    TensorFlow the samples per chip / S, jax-tpu-embedding sum of samples // N per feature."""
    if config.mode == "jax":
        n = stacking.num_sparse_cores
        return sum(f.samples // n for f in stacking.features_of(stack.name))
    return stack.total_sample_count // stacking.sparse_cores_per_partition


def _buffer_entries(config: SparseCoreConfig, stacking: Stacking, stack: Stack,
                    max_ids: int) -> int:
    """COO entries of the stack's buffer per chip: jax-tpu-embedding's
    ``coo_buffer_size_per_device`` (``preprocessing.buffer_sizes``) or TensorFlow's
    ``max_ids_per_chip = max_ids_per_chip_per_sample x samples per chip``
    (``tf_preprocess``)."""
    if config.mode == "jax":
        from tpuemb_cfg.sparsecore.preprocessing import buffer_sizes

        return buffer_sizes(stack, global_devices=stacking.num_partitions,
                            sparse_cores_per_device=stacking.sparse_cores_per_partition,
                            max_ids_per_partition=max_ids)[1]
    return config.max_ids_per_chip_per_sample * stack.total_sample_count


def _check_limits(stacking: Stacking, limits: Mapping[str, tuple[int, int]]) -> None:
    known = [s.name for s in stacking.stacks]
    for name in limits:
        if name not in known:
            raise UsageError(f"{arg('limits')} names {name!r}, which is not a stacked table; "
                             f"the stacks are {known}")


def _stack_parts(config: SparseCoreConfig, stacking: Stacking, stack: Stack,
                 limits: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """Per SparseCore, the stack's parts."""
    n, s = stacking.num_sparse_cores, stacking.sparse_cores_per_partition
    _, slots = stack_optimizer(config, stack)
    allocated = stack_bytes_per_sparse_core(stacking, stack, slots)
    max_ids = limits.get(stack.name, (stack.max_ids_per_partition, 0))[0]
    buffers = (_buffer_entries(config, stacking, stack, max_ids) // s * COO_ENTRY_BYTES
               + max(n, 8) * ROW_POINTER_BYTES)
    flow = _samples_per_sparse_core(config, stacking, stack) * stack.padded_dim * F32
    out = []
    for core in range(n):
        real = sum(_rows_on(t.vocabulary_size, t.shard_rotation, n, core) * t.dim
                   for t in stack.tables) * F32
        out.append({"tables": real, "slots": real * slots,
                    "padding": allocated - real * (1 + slots), "buffers": buffers,
                    "activations": flow, "gradients": flow})
    return out


def _table_bytes_per_chip(config: SparseCoreConfig, stacking: Stacking) -> dict[str, int]:
    """Each table's padded rows on a chip, with its slots: P_t / N x W x 4 x (1 + S_o) x S."""
    n, s = stacking.num_sparse_cores, stacking.sparse_cores_per_partition
    sizes = {}
    for stack in stacking.stacks:
        _, slots = stack_optimizer(config, stack)
        for t in stack.tables:
            sizes[t.name] = t.padded_vocabulary_size // n * t.padded_dim * F32 * (1 + slots) * s
    return sizes


def _sparsecore_hint(config: SparseCoreConfig, stacking: Stacking,
                     dominant: Sequence[tuple[str, int]]) -> str:

    most = max(((stack_optimizer(config, st), st.name) for st in stacking.stacks),
               key=lambda item: item[0][1], default=None)
    count = most[0][1] if most is not None else 0
    slots = (f", an optimizer with fewer slots (stack {most[1]!r}: {most[0][0]}, "
             f"{count} slot{'' if count == 1 else 's'})" if most is not None and count else "")
    largest = f", a smaller table ({dominant[0][0]!r} is the largest)" if dominant else ""
    return (f"use more chips (every stacked table is spread over all {stacking.num_sparse_cores} "
            f"SparseCores: its bytes per chip fall as the chips grow){slots}{largest}, or lower "
            "max_ids_per_partition (the COO buffers grow with it)")


def _host_report(config: SparseCoreConfig, capacity: int | None,
                 paths: Mapping[str, str]) -> MemoryReport:
    """TensorFlow's ``initialize_tables_on_host``: every host builds each full table's initial
    value, 4 x V x dim bytes per table (rule SC012's count)."""
    sizes = {t.name: F32 * t.vocabulary_size * t.dim for t in config.tables}
    units = tuple(UnitMemory(h, {"host_tables": sum(sizes.values())})
                  for h in range(max(1, config.topology.hosts)))
    return MemoryReport(
        level="host", units=units, capacity_bytes=capacity, dominant=_top(sizes),
        fits=_fits(units, capacity), paths=paths,
        hint="set SparseCoreEmbeddingConfig(initialize_tables_on_host=False) (the tables are "
             "then initialised on the TPU), or more host memory")


def sparsecore_memory(config: SparseCoreConfig, stacking: Stacking, *,
                      limits: Mapping[str, tuple[int, int]] | None = None,
                      hbm_bytes: int | None = None,
                      host_memory_bytes: int | None = None) -> MemoryReport:
    """Bytes per chip of a SparseCore configuration stacked as ``stacking`` (the module
    docstring gives the parts), against ``hbm_bytes`` (None: the chip kind's HBM, unknown
    without a kind). ``breakdown``: the per-SparseCore report (no capacity of its own: the
    SparseCores share their chip's HBM), and with TensorFlow's ``initialize_tables_on_host``
    the per-host report against ``host_memory_bytes``. ``limits``: ``{stack: (max_ids,
    max_unique_ids)}`` replacing a stack's limits (the buffers follow ``max_ids``)."""
    limits = dict(limits or {})
    _check_limits(stacking, limits)
    n, s = stacking.num_sparse_cores, stacking.sparse_cores_per_partition
    cores = [dict.fromkeys(SPARSECORE_PARTS, 0) for _ in range(n)]
    for stack in stacking.stacks:
        for core, parts in zip(cores, _stack_parts(config, stacking, stack, limits), strict=True):
            for key, value in parts.items():
                core[key] += value
    chips = []
    for chip in range(stacking.num_partitions):
        parts = dict.fromkeys(SPARSECORE_PARTS, 0)
        for core in cores[chip * s:(chip + 1) * s]:
            for key, value in core.items():
                parts[key] += value
        chips.append(UnitMemory(chip, parts))
    # one unit per partition: a chip, or on a chip of two devices (TPU7x) a device, with its
    # share of the chip's HBM
    topology = config.topology
    per = max(1, topology.devices_per_chip)
    capacity = (hbm_bytes // per if hbm_bytes is not None else topology.hbm_bytes_per_device)
    paths = {t.name: f"tables[{json.dumps(t.name, ensure_ascii=False)}]" for t in config.tables}
    dominant = _top(_table_bytes_per_chip(config, stacking))
    core_units = tuple(UnitMemory(i, parts) for i, parts in enumerate(cores))
    breakdown = [MemoryReport(level="sparsecore", units=core_units, capacity_bytes=None,
                              dominant=tuple((name, size // s) for name, size in dominant),
                              fits=True, paths=paths)]
    if config.mode == "tensorflow" and config.initialize_tables_on_host:
        breakdown.append(_host_report(config, host_memory_bytes, paths))
    fits = _fits(chips, capacity) and all(r.fits for r in breakdown)
    return MemoryReport(
        level="chip" if per == 1 else "device", units=tuple(chips), capacity_bytes=capacity,
        dominant=dominant, fits=fits,
        breakdown=tuple(breakdown), paths=paths,
        hint=_sparsecore_hint(config, stacking, dominant))


# ------------------------------------------------------------------------------------ findings

def _over(report: MemoryReport, parent: MemoryReport) -> OverMemory | None:
    """The fullest unit of ``report`` against its capacity (``rules.plan`` words it)."""
    worst = report.fullest
    capacity = report.capacity_bytes
    if worst is None or capacity is None:
        return None
    # A level without tables of its own (a legacy device) names its host report's.
    dominant = report.dominant or parent.dominant
    return OverMemory(
        level=report.level, index=worst.index, total=worst.total,
        parts=tuple(worst.parts.items()), capacity=capacity,
        over=sum(1 for u in report.units if u.total > capacity), units=len(report.units),
        largest=tuple(dominant[:3]), sized=bool(report.dominant),
        table_path=parent.paths.get(dominant[0][0], "") if dominant else "",
        hint=report.hint or None)


def memory_findings(report: MemoryReport) -> list[Diagnostic]:
    """Out-of-memory findings of ``report`` and its breakdown, one per level whose fullest unit
    exceeds its capacity: PLAN001 a legacy host over its memory, PLAN002 a SparseCore chip over
    its HBM, PLAN003 a SparseCore host over its memory under ``initialize_tables_on_host``,
    PLAN004 a legacy TPU device over its HBM. Each names
    the unit, its bytes by part, the capacity, how many units are over, the largest tables and
    the fix, at the field of the largest table (PLAN003: the setting)."""
    facts = [_over(r, report) for r in (report, *report.breakdown)]
    return plan_findings(f for f in facts if f is not None)
