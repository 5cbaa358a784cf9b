"""Which setting of a SparseCore spec's API sets a stack's limits and its COO buffer: the one
home of that fact, so that ``tpuemb plan``'s findings (PLAN010, PLAN011) and ``tpuemb
simulate``'s step failures never tell a user to set a field the API ignores (the rules SC003
and SC004 say which it ignores)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig

__all__ = ["LimitAdvice", "limit_advice"]


@dataclass(frozen=True)
class LimitAdvice:
    """Where a stack's limit findings sit and how the spec's API sets a limit pair or a buffer:
    ``path`` the field of the finding, ``limits(ids, unique)`` and ``buffer(needed)`` the hints.
    One home for "which setting does this API read", so PLAN010/PLAN011 never point at a field
    the rules (SC003, SC004) call ignored."""

    path: str
    limits: Callable[[int, int], str]
    buffer: Callable[[int], str]


def limit_advice(config: SparseCoreConfig, name: str, tables: tuple[str, ...],
                 current: tuple[int, int]) -> LimitAdvice:
    """The setting each API reads for the limits of stack ``name`` (its ``tables``, its
    ``current`` (max ids, max unique ids)):

    - TensorFlow: ``SparseCoreEmbeddingConfig.max_ids_per_table`` / ``max_unique_ids_per_table``
      keyed by the stacked name; the buffer ``max_ids_per_chip_per_sample``;
    - keras-rs on TensorFlow: nothing (its conversion passes no limits and TensorFlow's default
      ``SparseCoreEmbeddingConfig``: SC004), so the hint says so and gives the workarounds;
    - jax-tpu-embedding, a stack of several tables: ``auto_stack_tables``'
      ``stack_to_max_ids_per_partition`` / ``stack_to_max_unique_ids_per_partition`` (its
      tables' own limits are ignored: SC003); a one-table stack: its ``TableSpec``'s fields;
      the buffer: ``suggested_coo_buffer_size_per_device`` (on the stacked spec when
      ``auto_stack_tables`` made the stack: it drops the table's, SC003);
    - keras-rs on JAX: its ``TableConfig``'s limits, which keras-rs hands to the stack.
    """
    first = tables[0]
    if config.api == "tensorflow" or (config.api == "keras_rs" and config.mode == "tensorflow"):
        chip = config.max_ids_per_chip_per_sample
        if config.api == "keras_rs":
            def keras_limits(ids: int, unique: int) -> str:
                return (f"not settable through keras-rs on TensorFlow: its conversion passes no "
                        f"limits to TPUEmbeddingV2, so {name!r} keeps "
                        f"{current[0]} / {current[1]} "
                        f"whatever its TableConfigs say (SC004); to give it {ids} / {unique}, "
                        "build the layer with TensorFlow's TPUEmbeddingV2 and SparseCoreEmbedding"
                        f"Config(max_ids_per_table={{{name!r}: {ids}}}, max_unique_ids_per_table"
                        f"={{{name!r}: {unique}}}), or send fewer ids to a SparseCore per step "
                        "(a smaller per-replica batch, more chips)")

            def keras_buffer(needed: int) -> str:
                return (f"not settable through keras-rs on TensorFlow: max_ids_per_chip_per_sample "
                        f"stays {chip}; a device needs {needed} buffer entries: use TensorFlow's "
                        "TPUEmbeddingV2 with SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample"
                        "=...) or a smaller per-replica batch")

            return LimitAdvice(f'tables["{first}"]', keras_limits, keras_buffer)
        ids_path = f'sparse_core_config.max_ids_per_table["{name}"]'
        unique_path = f'sparse_core_config.max_unique_ids_per_table["{name}"]'
        return LimitAdvice(
            ids_path,
            lambda ids, unique: f"set {ids_path} = {ids} and {unique_path} = {unique}",
            lambda needed: (f"raise sparse_core_config.max_ids_per_chip_per_sample (now {chip}) "
                            f"until it x the stack's samples per chip reaches {needed}"))
    if config.api == "keras_rs":
        names = ", ".join(repr(t) for t in tables)
        return LimitAdvice(
            f'tables["{first}"].max_ids_per_partition',
            lambda ids, unique: (f"set max_ids_per_partition={ids} and max_unique_ids_per_"
                                 f"partition={unique} on the keras_rs.layers.TableConfig of "
                                 f"{names} (keras-rs on JAX gives the stack its tables' limits)"),
            lambda needed: (f"the stack needs a COO buffer of {needed} ids per device; keras-rs "
                            "sizes it for the limits: lower the ids per SparseCore per step"))
    if len(tables) > 1:
        return LimitAdvice(
            "stack_to_max_ids_per_partition",
            lambda ids, unique: (f"return {ids} for {name!r} from stack_to_max_ids_per_partition "
                                 f"and {unique} from stack_to_max_unique_ids_per_partition "
                                 "(auto_stack_tables' arguments: a stack of several tables takes "
                                 "its limits from them, not from its TableSpecs: SC003)"),
            lambda needed: (f"set suggested_coo_buffer_size_per_device >= {needed} on the stacked "
                            f"spec of {name!r} after stacking (update_preprocessing_parameters: "
                            "auto_stack_tables drops the TableSpecs', SC003)"))
    stacked = not config.disable_table_stacking
    return LimitAdvice(
        f'tables["{first}"].max_ids_per_partition',
        lambda ids, unique: (f"set max_ids_per_partition={ids} and max_unique_ids_per_partition="
                             f"{unique} on TableSpec {first!r} (a one-table stack keeps its "
                             "table's limits)"),
        lambda needed: (f"set suggested_coo_buffer_size_per_device >= {needed} "
                        + (f"on the stacked spec of {name!r} after stacking (update_"
                           "preprocessing_parameters: auto_stack_tables drops the TableSpec's, "
                           "SC003)" if stacked else f"on TableSpec {first!r}")))
