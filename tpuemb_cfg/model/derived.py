"""Quantities derived from a configuration (``validation-rules.md`` section 1), computed once.

TensorFlow derives several numbers the file does not spell out: the batch size and the per-table
feature counts of a feature-descriptor configuration, the number K of dynamic learning-rate inputs
and which table each position feeds, the state variables of every table and the memory they take.
The validator computes them here once, for all rules; ``tpuemb inspect`` and the on-request info
rules show them.

Everything here tolerates every defect of the configuration: an out-of-range ``table_id``, a
missing ``optimization_parameters``, a negative ``num_hosts`` or an undeclared enum number leave
the affected quantity out (or ``None``) instead of raising.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, overload

from tpuemb_cfg.algorithms import ALGORITHMS
from tpuemb_cfg.base.platform import legacy_chips
from tpuemb_cfg.base.schema import AccumulationStatus, PackingStatus

if TYPE_CHECKING:
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

    FeatureDescriptor = TPUEmbeddingConfiguration.FeatureDescriptor
    TableDescriptor = TPUEmbeddingConfiguration.TableDescriptor

INT32_MAX = 2**31 - 1

#: Slot names per algorithm, in TensorFlow's order (section 1.4), from the algorithm table;
#: ``user_defined_program`` is computed from its program.
SLOTS: dict[str, tuple[str, ...]] = {
    name: algorithm.slot_names
    for name, algorithm in ALGORITHMS.items()
    if not algorithm.slots_from_program
}

#: Algorithms for which low-dimensional packing can be effective.
PACKABLE_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.packable)
PACKABLE_DIMENSIONS = frozenset({1, 2, 4})

#: High-bandwidth memory of one TPU device per generation SIZE004 knows, in bytes: a view of the
#: platform table (:mod:`tpuemb_cfg.base.platform`, HBM in GiB as Google's Cloud TPU pages give
#: it). A device is what ``num_tensor_cores`` counts (one TensorFlow replica core): on v2 and v3
#: each of a chip's two TensorCores is a device with half the chip's HBM; v4 and v5p join their
#: two TensorCores into one device (megacore) with the whole chip's; v5e and v6e chips have one.
TPU_DEVICE_MEMORY: dict[str, int] = {
    chip.key: chip.tf_hbm_bytes_per_device for chip in legacy_chips()
}

#: What a tag feeds: ``"learning_rate"``, or the message field of a per-step input of the
#: algorithm table (``"step_counter"``).
TagKind = str


@dataclass(frozen=True, slots=True)
class TagUse:
    """One use of a dynamic tag (section 1.3).

    ``present`` is false for a ``frequency_aware_adagrad`` table without ``step_counter``: the
    use still counts, as tag 0, and ``field_path`` names the absent ``step_counter.tag``.
    """

    table: int
    kind: TagKind
    tag: int
    field_path: str
    present: bool = True


@dataclass(frozen=True, slots=True)
class EffectiveFeature:
    """A feature as TensorFlow sees it after the rewrite (section 1.2).

    ``index`` is the position in ``feature_descriptor`` (``None`` for the per-table feature
    synthesised in legacy style); ``size`` is the product of ``input_shape``.
    """

    index: int | None
    name: str
    table_id: int
    input_shape: tuple[int, ...]
    size: int


@dataclass(frozen=True, slots=True)
class TableSize:
    """Memory of one table (section 1.6); all state is float32.

    ``logical_bytes`` = V * D * 4 * S; ``estimate_bytes`` pads rows to multiples of 8 floats (or
    packs them when low-dimensional packing is effective), summed over the hosts.
    """

    table: int
    state_variables: tuple[str, ...]
    logical_bytes: int
    estimate_bytes: int
    packed: bool


_T = TypeVar("_T")


class _Lazy(Sequence[_T]):
    """A read-only sequence whose items are made when read, from columns kept compactly: per
    table or feature a few bytes, not the hundreds an object with its own integers and strings
    takes (a million features would otherwise hold a million objects, names and sizes).
    Compares equal to a list of the same items."""

    __slots__ = ()

    def _item(self, i: int) -> _T:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> _T: ...

    @overload
    def __getitem__(self, i: slice) -> list[_T]: ...

    def __getitem__(self, i: int | slice) -> _T | list[_T]:
        if isinstance(i, slice):
            return [self._item(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} items")
        return self._item(i % n if i < 0 else i)

    def __iter__(self) -> Iterator[_T]:
        for i in range(len(self)):
            yield self._item(i)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


class Features(_Lazy[EffectiveFeature]):
    """The effective features (section 1.2), each :class:`EffectiveFeature` made when read.

    Feature style: the descriptor positions, table ids and shapes (equal shapes share one
    tuple) are kept; names are read from the configuration. Legacy style: one feature per
    table, from the batch size and ``num_features``.
    """

    __slots__ = ("_batch", "_counts", "_descriptors", "_positions", "_shapes", "_tables")

    def __init__(self, descriptors: Sequence[FeatureDescriptor] | None = None, *, batch: int = 0,
                 counts: Sequence[int] = ()) -> None:
        self._descriptors = descriptors
        self._positions = array("q")
        self._tables = array("q")
        self._shapes: list[tuple[int, ...]] = []
        self._batch = batch
        self._counts = counts

    def _add(self, j: int, table_id: int, shape: tuple[int, ...]) -> None:
        self._positions.append(j)
        self._tables.append(table_id)
        self._shapes.append(shape)

    def __len__(self) -> int:
        return len(self._positions) if self._descriptors is not None else len(self._counts)

    def _item(self, i: int) -> EffectiveFeature:
        if self._descriptors is None:  # legacy: table i's one feature
            size = self._batch * self._counts[i]
            return EffectiveFeature(None, "", i, (size,), size)
        j = self._positions[i]
        shape = self._shapes[i]
        return EffectiveFeature(j, self._descriptors[j].name, self._tables[i], shape,
                                math.prod(shape))


class TableSizes(_Lazy["TableSize | None"]):
    """:class:`TableSize` of every table (``None`` when its state variables are unknown),
    computed when read from the table, its algorithm and its state variables."""

    __slots__ = ("_algorithms", "_num_hosts", "_states", "_tables")

    def __init__(self, tables: Sequence[TableDescriptor], algorithms: Sequence[str | None],
                 states: Sequence[tuple[str, ...] | None], num_hosts: int | None) -> None:
        self._tables = tables
        self._algorithms = algorithms
        self._states = states
        self._num_hosts = num_hosts

    def __len__(self) -> int:
        return len(self._states)

    def _item(self, t: int) -> TableSize | None:
        states = self._states[t]
        if states is None:
            return None
        table = self._tables[t]
        vocab = max(table.vocabulary_size, 0)
        dim = max(table.dimension, 0)
        s = len(states)
        packed = packing_effective(table, self._algorithms[t])
        num_hosts = self._num_hosts
        if num_hosts is None:
            estimate = _padded_bytes(vocab, dim, s, packed)
        else:
            base_rows, extra = divmod(vocab, num_hosts)
            estimate = extra * _padded_bytes(base_rows + 1, dim, s, packed) + (
                num_hosts - extra
            ) * _padded_bytes(base_rows, dim, s, packed)
        return TableSize(t, states, vocab * dim * 4 * s, estimate, packed)


@dataclass(frozen=True, slots=True)
class HostRange:
    """Hosts ``first`` .. ``last`` (inclusive) that hold the same number of bytes each."""

    first: int
    last: int
    logical_bytes: int
    estimate_bytes: int


@dataclass
class Derived:
    """Section 1's quantities for one configuration. Lists are indexed by table (or feature)."""

    style: Literal["feature", "legacy"]
    num_tables: int
    #: Effective features: the descriptors that pass FEAT001-003 (feature style), or one synthesised
    #: feature per table (legacy style).
    features: Sequence[EffectiveFeature]
    #: ``batch_size_per_tensor_core``: as written (legacy) or the GCD of the feature sizes (feature
    #: style; 0 when there is no valid feature).
    batch_size: int
    #: ``num_features`` per table: as written (legacy) or derived (feature style; 0 without B).
    num_features: list[int]
    #: Product of ``input_shape`` per feature descriptor (``None`` for an empty shape or a
    #: non-positive entry); may exceed 32 bits (FEAT005).
    feature_sizes: list[int | None]
    #: Number of features with an in-range ``table_id`` per table (feature style).
    features_per_table: list[int]
    #: Every tag use in table order (learning rate before step counter within a table).
    tag_uses: list[TagUse]
    #: tag -> [(table index, field_path)] in table order.
    tag_map: dict[int, list[tuple[int, str]]]
    #: Number of distinct tags (length of the per-step learning-rate list).
    k: int
    #: Selected oneof member of ``optimization_parameters.parameters`` per table.
    algorithms: list[str | None]
    #: Whether gradient accumulation is effective (status UNSPECIFIED or ENABLED) per table.
    accumulation: list[bool]
    #: Slot names per table; ``None`` when unknown (no algorithm, or a user program of unknown
    #: arity).
    slots: list[tuple[str, ...] | None]
    #: State variables per table (parameters, slots, gradient_accumulators); ``None`` when unknown.
    state_variables: list[tuple[str, ...] | None]
    #: ``num_hosts`` when >= 1, else ``None`` (host sizes unknown).
    num_hosts: int | None
    #: The dimension of each table (for :attr:`activation_shapes`).
    dimensions: list[int] = field(default_factory=list, repr=False)
    #: The SPMD factor of the activations' leading dimension (1 without SPMD sharding).
    activation_scale: int = 1
    #: Size of each table, ``None`` when its state variables are unknown.
    table_sizes: Sequence[TableSize | None] = field(default_factory=list)
    #: Cache of :func:`host_sizes` (computed on first use).
    host_ranges: list[HostRange] | None = field(default=None, repr=False)

    @property
    def activation_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(label, shape) per activation: ``feature_descriptor[j]`` or ``table_descriptor[t]``.

        Computed when asked for (``tpuemb inspect``), not kept: no rule reads it, and for a
        large configuration the list is as large as the text of its features.
        """
        scale = self.activation_scale
        shapes: list[tuple[str, tuple[int, ...]]] = []
        for f in self.features:
            dim = self.dimensions[f.table_id]
            if f.index is None:
                shapes.append((f"table_descriptor[{f.table_id}]", (scale * f.size, dim)))
            else:
                shapes.append((f"feature_descriptor[{f.index}]",
                               (f.input_shape[0] * scale, *f.input_shape[1:], dim)))
        return shapes

    @property
    def K(self) -> int:  # noqa: N802 - the spec's name
        """Alias of :attr:`k`."""
        return self.k

    def rows_on_host(self, table_vocabulary: int, host: int) -> int:
        """``floor(V / N) + (1 if h < V mod N else 0)`` (0 when the host count is unknown)."""
        n = self.num_hosts
        if n is None or table_vocabulary <= 0:
            return 0
        base, extra = divmod(table_vocabulary, n)
        return base + (1 if host < extra else 0)

    def tags_sorted(self) -> list[int]:
        """The distinct tags in ascending order."""
        return sorted(self.tag_map)


def program_arity(udp: Any) -> tuple[int, int]:
    """(I, O): parameters and result tuple elements of a user program (0 when absent)."""
    try:
        if not udp.HasField("program"):
            return 0, 0
        program = udp.program
        if not program.HasField("host_program_shape"):
            return 0, 0
        shape = program.host_program_shape
        return len(shape.parameters), len(shape.result.tuple_shapes)
    except (AttributeError, ValueError):  # a program type without these fields
        return 0, 0


def _program_outputs(udp: object) -> int | None:
    """O, the number of result tuple elements of a user program; ``None`` when not declared."""
    count = program_arity(udp)[1]
    return count if count >= 1 else None


def _padded_bytes(rows: int, dimension: int, states: int, packed: bool) -> int:
    if packed:
        return -(-rows * dimension // 8) * 8 * 4 * states
    return rows * (-(-dimension // 8) * 8) * 4 * states


class _FeatureCounts(NamedTuple):
    features: Features
    batch: int
    num_features: list[int]
    feature_sizes: list[int | None]
    features_per_table: list[int]


def _feature_counts(config: TPUEmbeddingConfiguration,
                    style: Literal["feature", "legacy"]) -> _FeatureCounts:
    """Section 1.2: the features, the batch size, the feature count per table, each feature's
    size (``None``: an input shape without one) and the features per table."""
    tables = config.table_descriptor
    descriptors = config.feature_descriptor
    n_tables = len(tables)
    feature_sizes: list[int | None] = []
    features = Features(descriptors)
    features_per_table = [0] * n_tables
    # equal shapes share one tuple, and their size one integer
    shapes: dict[tuple[int, ...], tuple[tuple[int, ...], int | None]] = {}
    batch = 0
    for j, fd in enumerate(descriptors):
        shape = tuple(fd.input_shape)
        known = shapes.get(shape)
        if known is None:
            ok = bool(shape) and all(d > 0 for d in shape)
            known = shapes.setdefault(shape, (shape, math.prod(shape) if ok else None))
        shape, size = known
        feature_sizes.append(size)
        table_id = fd.table_id
        if 0 <= table_id < n_tables:
            features_per_table[table_id] += 1
            if size is not None:
                features._add(j, table_id, shape)
                batch = math.gcd(batch, size)

    if style == "feature":
        num_features = [0] * n_tables
        if batch > 0:
            for table_id, shape in zip(features._tables, features._shapes, strict=True):
                size = shapes[shape][1]
                assert size is not None
                num_features[table_id] += size // batch
    else:
        batch = config.batch_size_per_tensor_core
        num_features = [t.num_features for t in tables]
        features = Features(batch=batch, counts=num_features)

    return _FeatureCounts(features, batch, num_features, feature_sizes, features_per_table)


def derive(config: TPUEmbeddingConfiguration) -> Derived:
    """Compute section 1's quantities; linear in tables and features, never raises on odd input."""
    # The repeated fields are read an element at a time: a list of every table's message would
    # hold a Python object per table for the whole derivation.
    tables = config.table_descriptor
    descriptors = config.feature_descriptor
    n_tables = len(tables)
    style: Literal["feature", "legacy"] = "feature" if len(descriptors) else "legacy"

    # 1.2 features, batch size, feature counts
    counts = _feature_counts(config, style)
    features, batch, num_features = counts.features, counts.batch, counts.num_features

    # per-table algorithm, accumulation, slots, state variables
    algorithms: list[str | None] = []
    accumulation: list[bool] = []
    slots: list[tuple[str, ...] | None] = []
    state_variables: list[tuple[str, ...] | None] = []
    tag_uses: list[TagUse] = []
    shared: dict[tuple[tuple[str, ...], bool], tuple[str, ...]] = {}  # equal tuples, one copy
    for t, table in enumerate(tables):
        op = table.optimization_parameters
        which = (op.WhichOneof("parameters") if table.HasField("optimization_parameters")
                 else None)
        algo = sys.intern(which) if which is not None else None  # one copy per algorithm name
        algorithms.append(algo)
        status = op.gradient_accumulation_status
        acc = status in (AccumulationStatus.UNSPECIFIED, AccumulationStatus.ENABLED)
        accumulation.append(acc)
        table_slots: tuple[str, ...] | None
        if algo is None:
            table_slots = None
        elif algo not in SLOTS and algo in ALGORITHMS:  # slots from the program (spec 1.4)
            outputs = _program_outputs(getattr(op, algo))
            table_slots = (
                None if outputs is None else tuple(f"Slot_{i}" for i in range(outputs - 1))
            )
        else:
            table_slots = SLOTS.get(algo)
        slots.append(table_slots)
        state_variables.append(
            None
            if table_slots is None
            else shared.setdefault((table_slots, acc), (
                "parameters", *table_slots, *(("gradient_accumulators",) if acc else ())))
        )

        # 1.3 tag uses
        base = f"table_descriptor[{t}].optimization_parameters"
        if (
            op.HasField("learning_rate")
            and op.learning_rate.WhichOneof("learning_rate") == "dynamic"
        ):
            tag_uses.append(
                TagUse(
                    t,
                    "learning_rate",
                    op.learning_rate.dynamic.tag,
                    f"{base}.learning_rate.dynamic.tag",
                )
            )
        entry = ALGORITHMS.get(algo) if algo is not None else None
        message: Any = getattr(op, entry.name) if entry is not None else None
        for step_input in entry.step_inputs if entry is not None else ():
            tag_uses.append(
                TagUse(
                    t,
                    step_input.message_field,
                    getattr(message, step_input.message_field).tag,
                    f"{base}.{algo}.{step_input.path}",
                    message.HasField(step_input.message_field),
                )
            )
    tag_map: dict[int, list[tuple[int, str]]] = {}
    for use in tag_uses:
        tag_map.setdefault(use.tag, []).append((use.table, use.field_path))

    # 1.5 activation shapes (computed when asked for: Derived.activation_shapes)
    spmd = config.spmd_sharding
    scale = 1
    if config.HasField("spmd_sharding") and spmd.enabled and not spmd.use_manual_partitioning:
        scale = spmd.num_cores_per_replica

    num_hosts = config.num_hosts if config.num_hosts >= 1 else None
    dimensions: dict[int, int] = {}  # equal dimensions, one integer
    return Derived(
        style=style,
        num_tables=n_tables,
        features=features,
        batch_size=batch,
        num_features=num_features,
        feature_sizes=counts.feature_sizes,
        features_per_table=counts.features_per_table,
        tag_uses=tag_uses,
        tag_map=tag_map,
        k=len(tag_map),
        algorithms=algorithms,
        accumulation=accumulation,
        slots=slots,
        state_variables=state_variables,
        dimensions=[dimensions.setdefault(t.dimension, t.dimension) for t in tables],
        activation_scale=scale,
        num_hosts=num_hosts,
        # 1.6 sizes, computed when read
        table_sizes=TableSizes(tables, algorithms, state_variables, num_hosts),
    )


def packing_effective(
    table: TPUEmbeddingConfiguration.TableDescriptor, algorithm: str | None
) -> bool:
    """Whether the runtime packs the table (section 1.6): packing ENABLED, dimension 1, 2 or 4
    and an algorithm to which a zero gradient is a no-op (SGD, Adagrad, FTRL)."""
    return (
        table.optimization_parameters.low_dimensional_packing_status == PackingStatus.ENABLED
        and table.dimension in PACKABLE_DIMENSIONS
        and algorithm in PACKABLE_ALGORITHMS
    )


def host_sizes(config: TPUEmbeddingConfiguration, derived: Derived) -> list[HostRange]:
    """Bytes per host as ranges of hosts holding equal amounts (section 1.6).

    Host h of table t holds ``floor(V/N) + 1`` rows when ``h < V mod N``, else ``floor(V/N)``, so
    the per-host total only changes at the hosts ``V_t mod N``. The result has one range per
    distinct breakpoint (at most tables + 1 ranges, whatever N is), in host order; empty when the
    host count is unknown. Tables whose state variables are unknown are left out.
    """
    if derived.host_ranges is not None:
        return derived.host_ranges
    derived.host_ranges = _host_sizes(config, derived)
    return derived.host_ranges


def _host_sizes(config: TPUEmbeddingConfiguration, derived: Derived) -> list[HostRange]:
    n = derived.num_hosts
    if n is None:
        return []
    tables = config.table_descriptor
    # bytes(h) = sum_t b_t(base_t) + sum over {t: h < extra_t} of (b_t(base_t + 1) - b_t(base_t))
    logical_base = 0
    estimate_base = 0
    steps: dict[int, list[int]] = {}
    for t, size in enumerate(derived.table_sizes):
        if size is None:
            continue
        table = tables[t]
        vocab = max(table.vocabulary_size, 0)
        dim = max(table.dimension, 0)
        s = len(size.state_variables)
        base_rows, extra = divmod(vocab, n)
        lb = base_rows * dim * 4 * s
        eb = _padded_bytes(base_rows, dim, s, size.packed)
        logical_base += lb
        estimate_base += eb
        if extra:
            delta = steps.setdefault(extra, [0, 0])
            delta[0] += (base_rows + 1) * dim * 4 * s - lb
            delta[1] += _padded_bytes(base_rows + 1, dim, s, size.packed) - eb
    # Hosts below every breakpoint get every extra row: start from the full sum and drop the
    # extra rows of a table once the host index reaches its V mod N.
    logical = logical_base + sum(d[0] for d in steps.values())
    estimate = estimate_base + sum(d[1] for d in steps.values())
    ranges: list[HostRange] = []
    first = 0
    for brk in sorted(steps):
        if brk > first:
            ranges.append(HostRange(first, brk - 1, logical, estimate))
        logical -= steps[brk][0]
        estimate -= steps[brk][1]
        first = brk
    if first < n:
        ranges.append(HostRange(first, n - 1, logical, estimate))
    return ranges


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """The tables' share of one TPU device: the fullest host's estimate split over its devices.

    ``devices_per_host`` = ``num_tensor_cores // num_hosts``; the runtime spreads a host's rows
    over the devices attached to it, so each holds about ``bytes`` (the estimate of section 1.6
    divided by ``devices_per_host``, rounded up). Tables only: the dense model, activations and
    the runtime's own buffers come on top.
    """

    devices_per_host: int
    bytes: int


def device_share(config: TPUEmbeddingConfiguration, derived: Derived) -> DeviceShare | None:
    """:class:`DeviceShare` of the configuration, ``None`` when hosts or cores are unknown (< 1)
    or there are fewer tensor cores than hosts."""
    ranges = host_sizes(config, derived)
    hosts = derived.num_hosts
    if not ranges or hosts is None or config.num_tensor_cores < hosts:
        return None
    per_host = config.num_tensor_cores // hosts
    fullest = max(r.estimate_bytes for r in ranges)
    return DeviceShare(per_host, -(-fullest // per_host))

