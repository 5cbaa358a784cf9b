"""The numbers and names of the configuration's enums (schema.md section 3), stated once.

proto3 enums are open: a field holds a plain ``int``, and binary, JSON or text input can carry a
number the enum does not declare. The code compares fields with the ints below (never with the
generated classes' attributes), so importing this module costs nothing: it needs no generated
module, and ``tests/test_schema.py`` checks every value against the descriptors.

Also here: the combiners a feature can name (``TableConfig.combiner``, the simulator's
``--combiner``), which have no proto field.
"""

from __future__ import annotations

from typing import Final, Literal


class Mode:
    """``TPUEmbeddingConfiguration.Mode``: what a step computes (spec section 2)."""

    UNSPECIFIED: Final = 0
    INFERENCE: Final = 1
    TRAINING: Final = 2
    BACKWARD_PASS_ONLY: Final = 3


class ShardingStrategy:
    """``TPUEmbeddingConfiguration.ShardingStrategy``: how ids map to hosts (spec section 8)."""

    DIV_DEFAULT: Final = 0
    MOD: Final = 1


class AccumulationStatus:
    """``GradientAccumulationStatus.Status``; TensorFlow reads UNSPECIFIED as ENABLED."""

    UNSPECIFIED: Final = 0
    ENABLED: Final = 1
    DISABLED: Final = 2


class PackingStatus:
    """``LowDimensionalPackingStatus.Status``; UNSPECIFIED means DISABLED."""

    UNSPECIFIED: Final = 0
    ENABLED: Final = 1
    DISABLED: Final = 2


class HotIdStatus:
    """``HotIdReplicationConfiguration.Status``; UNSPECIFIED means DISABLED."""

    UNSPECIFIED: Final = 0
    ENABLED: Final = 1
    DISABLED: Final = 2
    MIGRATION_ONLY: Final = 3


def value_names(enum: type) -> dict[int, str]:
    """``{number: name}`` of one of the classes above, in declaration order."""
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


MODE_NAMES: Final = value_names(Mode)
SHARDING_NAMES: Final = value_names(ShardingStrategy)
ACCUMULATION_NAMES: Final = value_names(AccumulationStatus)

#: A built-in combiner: how a feature's bag of rows becomes one vector (spec
#: section 3.1).
Combiner = Literal["sum", "mean", "sqrtn"]
#: The built-in combiners, in the order messages list them.
COMBINERS: Final[tuple[Combiner, ...]] = ("sum", "mean", "sqrtn")
