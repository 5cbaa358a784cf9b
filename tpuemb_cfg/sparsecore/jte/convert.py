"""jax-tpu-embedding feature specs <-> tpuemb's records.

Works on this package's specs and on jax-tpu-embedding's own objects alike: only attribute names
are read (``name``, ``table_spec``, ``output_shape``, ``vocabulary_size``, ``embedding_dim``,
``optimizer``, ``combiner``, the limits, ``quantization_config``; for stacked specs
``stacked_table_spec``, ``setting_in_stack`` and ``id_transformation``).

The features' order is jax's ``tree.leaves`` order (:func:`leaves`): a ``dict`` by sorted key, an
``OrderedDict``, list or tuple in order, ``None`` empty, anything else one feature. Stacking
follows it, so a dict of features stacks in key order, not in insertion order.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tpuemb_cfg.algorithms.table import JAX_SPECS, SPARSECORE
from tpuemb_cfg.base.sparsecore_defaults import (
    DEFAULT_MAX_IDS_PER_PARTITION,
    DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION,
)
from tpuemb_cfg.base.usercode import tree_leaves
from tpuemb_cfg.sparsecore._args import found
from tpuemb_cfg.sparsecore.checks import check_config, check_quantization, flag
from tpuemb_cfg.sparsecore.config import (
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
    ids_per_bag,
)
from tpuemb_cfg.sparsecore.jte.stacking import check_devices
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.topology import (
    ChipKind,
    Topology,
    chip_kind,
    sparse_cores_per_device_text,
)

__all__ = ["describe_optimizer", "feature_specs_to_config", "leaves", "sparse_cores_per_device",
           "stacking_of"]


def _children(node: Any, path: str) -> list[tuple[str, Any]] | None:
    if node is None:
        return []
    if isinstance(node, dict):  # an OrderedDict in order, a dict by sorted key
        try:
            keys = list(node) if isinstance(node, OrderedDict) else sorted(node)
        except TypeError:
            raise TypeError(f"feature_specs{path}: dict keys must be mutually comparable (jax "
                            "visits a dict's keys in sorted order); use keys of one type, e.g. "
                            "all str") from None
        return [(f"{path}[{k!r}]", node[k]) for k in keys]
    if isinstance(node, list | tuple):
        return [(f"{path}[{i}]", v) for i, v in enumerate(node)]
    return None


def leaves(tree: Any) -> list[Any]:
    """The leaves of ``tree`` in ``jax.tree.leaves`` order (see the module docstring).
    ValueError when the tree contains itself."""
    return [leaf for _, leaf in tree_leaves(tree, _children, what="feature_specs")]


def _chip(value: str) -> ChipKind:
    """A chip kind by tpuemb's name (``v6e``) or jax's device kind (``TPU v6 lite``)."""
    text = value.strip().lower()
    if text.startswith("tpu "):
        text = text[4:]
    return chip_kind(text.replace(" lite", "e"))


def sparse_cores_per_device(value: int | str | None) -> tuple[int, ChipKind | None]:
    """``num_sc_per_device`` as a count (and the chip kind when one was named).

    ``None`` asks jax-tpu-embedding to read the first jax device; on a CPU it raises
    ``Unknown sparsecore count for device kind: cpu``. tpuemb never has a TPU to look at, so it
    says so and names the fix instead.
    """
    if value is None:
        raise ValueError(
            "num_sc_per_device=None means 'ask the TPU', and there is no TPU here "
            "(jax-tpu-embedding raises 'Unknown sparsecore count for device kind: cpu' on a "
            f"CPU): pass num_sc_per_device ({sparse_cores_per_device_text()}), or a chip "
            "kind such as 'v6e'")
    if isinstance(value, str):
        kind = _chip(value)
        return kind.sparse_cores_per_device, kind
    check_devices(1, value)
    return value, None


def _show(value: Any) -> str:
    if callable(value):
        return f"<callable {getattr(value, '__qualname__', type(value).__name__)}>"
    return repr(value)  # exact: the text is also the optimizer's grouping key


def describe_optimizer(spec: Any) -> str:
    """``AdagradOptimizerSpec(learning_rate=0.1, initial_accumulator_value=0.1)``: the class and
    its hyper-parameters, a callable by its name (never by its address: the text is the same
    on every machine)."""
    if not hasattr(spec, "__dict__"):
        raise TypeError(f"describe_optimizer(): spec must be an optimizer spec (e.g. "
                        f"AdagradOptimizerSpec(...)), got {found(spec)}")
    return f"{type(spec).__name__}(" + ", ".join(
        f"{k}={_show(v)}" for k, v in _hyper(spec, with_rate=True).items()) + ")"


def _hyper(spec: Any, *, with_rate: bool) -> dict[str, Any]:
    values = {k: v for k, v in vars(spec).items() if not k.startswith("_")}
    rate = values.pop("learning_rate", None)
    return {"learning_rate": rate, **values} if with_rate else values


def _algorithm(spec: Any) -> str:
    own = getattr(spec, "algorithm", None)
    if isinstance(own, str) and own in SPARSECORE:
        return own
    known = JAX_SPECS.get(type(spec).__name__)
    return known[1] if known is not None else "custom"


class _Groups:
    """Optimizer equality classes (the reference's ``==``: hash equality), each named by its
    first member's description; a different optimizer with the same description (two
    schedules of the same name) gets ``#k`` appended, k its rank among the distinct optimizers,
    so the keys stay distinct."""

    def __init__(self) -> None:
        self._seen: list[tuple[Any, str]] = []

    def key(self, spec: Any) -> str:
        for other, key in self._seen:
            if other is spec or other == spec:
                return key
        key = describe_optimizer(spec)
        if any(k == key for _, k in self._seen):
            key = f"{key} #{len(self._seen) + 1}"
        self._seen.append((spec, key))
        return key


def _attr(obj: Any, name: str, what: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise ValueError(f"feature_specs: {what} {obj!r} has no {name!r}: expected a "
                         "jax-tpu-embedding FeatureSpec/TableSpec (tpuemb_cfg.sparsecore.jte "
                         "has both)") from None


def _shape(value: Any, what: str) -> tuple[Any, ...]:
    """The dimensions as given (``checks.check_config`` checks each is an int)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a sequence of integers, got {value!r}")
    return tuple(value)


def _table(spec: Any, groups: _Groups) -> SparseCoreTable:
    opt = _attr(spec, "optimizer", "table spec")
    quant = getattr(spec, "quantization_config", None)
    check_quantization(f"table {getattr(spec, 'name', spec)!r}", quant)
    optimizer = SparseCoreOptimizer(
        algorithm=_algorithm(opt), hyper=_hyper(opt, with_rate=False), group=groups.key(opt),
        learning_rate=getattr(opt, "learning_rate", None), source=opt)
    return SparseCoreTable(
        name=_attr(spec, "name", "table spec"),
        vocabulary_size=_attr(spec, "vocabulary_size", "table spec"),
        dim=_attr(spec, "embedding_dim", "table spec"), optimizer=optimizer,
        combiner=_attr(spec, "combiner", "table spec"),
        quantization=None if quant is None else repr(quant),
        initializer=getattr(spec, "initializer", None),
        max_ids_per_partition=getattr(spec, "max_ids_per_partition",
                                      DEFAULT_MAX_IDS_PER_PARTITION),
        max_unique_ids_per_partition=getattr(spec, "max_unique_ids_per_partition",
                                             DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION),
        suggested_coo_buffer_size_per_device=getattr(
            spec, "suggested_coo_buffer_size_per_device", None))


def _feature(spec: Any) -> SparseCoreFeature:
    name = _attr(spec, "name", "feature spec")
    table = _attr(spec, "table_spec", "feature spec")
    input_shape = _shape(_attr(spec, "input_shape", "feature spec"),
                         f"input_shape of feature {name!r}")
    output_shape = _shape(_attr(spec, "output_shape", "feature spec"),
                          f"output_shape of feature {name!r}")
    return SparseCoreFeature(
        name=name, table=_attr(table, "name", "table spec"), input_shape=input_shape,
        output_shape=output_shape, ids_per_bag=ids_per_bag(input_shape, output_shape))


# The reference's auto_stack_tables arguments, one keyword each.
def feature_specs_to_config(  # noqa: PLR0913
    feature_specs: Any, *, global_device_count: int, num_sc_per_device: int | str | None,
    stack_to_max_ids_per_partition: Callable[[str, int], int] | None = None,
    stack_to_max_unique_ids_per_partition: Callable[[str, int], int] | None = None,
    use_short_stack_names: bool = True, activation_mem_bytes_limit: int | None = None,
    auto_stack: bool = True, check: bool = True,
) -> SparseCoreConfig:
    """A :class:`SparseCoreConfig` (``api="jax"``) of feature specs, any nesting.

    Tables come in the order the features first use them; a later table spec of the same name
    replaces an earlier one, as in the reference's dict by name. ``auto_stack=False`` is
    ``prepare_feature_specs_for_training`` alone (``disable_table_stacking``). The specs'
    stacking state, if any, is not read (see :func:`stacking_of`). Every value is checked
    (:func:`tpuemb_cfg.sparsecore.checks.check_config`: ValueError or TypeError naming the
    object and the argument); ``check=False`` leaves that to the caller (the spec loader checks
    once it knows each object's line).
    """
    nsc, kind = sparse_cores_per_device(num_sc_per_device)
    check_devices(global_device_count, nsc)
    groups = _Groups()
    features: list[SparseCoreFeature] = []
    tables: dict[str, SparseCoreTable] = {}
    for spec in leaves(feature_specs):
        features.append(_feature(spec))
        table = _table(spec.table_spec, groups)
        tables.pop(table.name, None)
        tables[table.name] = table
    order = list(dict.fromkeys(f.table for f in features))
    config = SparseCoreConfig(
        api="jax", mode="jax", tables=tuple(tables[t] for t in order), features=tuple(features),
        topology=Topology.from_devices(global_device_count, nsc, kind),
        disable_table_stacking=not flag("feature_specs_to_config", "auto_stack", auto_stack),
        activation_mem_bytes_limit=activation_mem_bytes_limit,
        use_short_stack_names=use_short_stack_names,
        stack_to_max_ids_per_partition=stack_to_max_ids_per_partition,
        stack_to_max_unique_ids_per_partition=stack_to_max_unique_ids_per_partition)
    return check_config(config) if check else config


def _stacked(table: Any) -> Any:
    stacked = getattr(table, "_stacked_table_spec", None)
    if stacked is None and not hasattr(table, "_stacked_table_spec"):
        stacked = getattr(table, "stacked_table_spec", None)
    if stacked is None:
        raise ValueError(f"table {getattr(table, 'name', table)!r} is not stacked: call "
                         "prepare_feature_specs_for_training (or auto_stack_tables) first")
    return stacked


def stacking_of(feature_specs: Any, *, global_device_count: int,
                num_sc_per_device: int | str | None) -> Stacking:
    """The :class:`Stacking` feature specs already carry (after ``auto_stack_tables`` and/or
    ``prepare_feature_specs_for_training``, by jax-tpu-embedding or by this package), read
    from each table's ``stacked_table_spec`` and ``setting_in_stack`` and each feature's
    ``id_transformation``. Stacks in the order the features first reach them; a stack's tables
    by row offset. ValueError when a table is not stacked yet."""
    nsc, _ = sparse_cores_per_device(num_sc_per_device)
    check_devices(global_device_count, nsc)
    specs = leaves(feature_specs)
    stacks: dict[str, Any] = {}
    members: dict[str, dict[str, Any]] = {}
    slots: list[FeatureSlot] = []
    for spec in specs:
        feature = _feature(spec)
        stacked = _stacked(spec.table_spec)
        stacks.setdefault(stacked.stack_name, stacked)
        members.setdefault(stacked.stack_name, {})[feature.table] = spec.table_spec
        move = _attr(spec, "id_transformation", "feature spec")
        slots.append(FeatureSlot(
            name=feature.name, table=feature.table, stack=stacked.stack_name,
            row_offset=int(move.row_offset), col_offset=int(move.col_offset),
            col_shift=int(move.col_shift), samples=feature.samples))
    result = []
    for name, stacked in stacks.items():
        tables = sorted(members[name].values(), key=lambda t: int(t.setting_in_stack
                                                                   .row_offset_in_shard))
        quant = stacked.quantization_config
        result.append(Stack(
            name=name, tables=tuple(_stacked_table(t, slots) for t in tables),
            group=(f"dim {int(stacked.stack_embedding_dim)}, "
                   f"{describe_optimizer(stacked.optimizer)}, {stacked.combiner}, "
                   f"{'no quantization' if quant is None else repr(quant)}"),
            combiner=stacked.combiner, total_sample_count=int(stacked.total_sample_count),
            max_ids_per_partition=int(stacked.max_ids_per_partition),
            max_unique_ids_per_partition=int(stacked.max_unique_ids_per_partition),
            suggested_coo_buffer_size_per_device=stacked.suggested_coo_buffer_size_per_device))
    return Stacking(mode="jax", num_partitions=global_device_count,
                    sparse_cores_per_partition=nsc, stacks=tuple(result), features=tuple(slots))


def _stacked_table(table: Any, slots: list[FeatureSlot]) -> StackedTable:
    setting = table.setting_in_stack
    mine = [s for s in slots if s.table == table.name]
    return StackedTable(
        name=table.name, vocabulary_size=int(table.vocabulary_size), dim=int(table.embedding_dim),
        padded_vocabulary_size=int(setting.padded_vocab_size),
        padded_dim=int(setting.padded_embedding_dim),
        row_offset_in_shard=int(setting.row_offset_in_shard),
        shard_rotation=int(setting.shard_rotation),
        output_samples=sum(s.samples for s in mine), num_features=len(mine))
