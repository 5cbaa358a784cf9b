"""A keras-rs SparseCore spec with stand-ins of keras-rs 0.4.0's TableConfig/FeatureConfig."""
from dataclasses import dataclass
from typing import Any


@dataclass
class TableConfig:
    name: str
    vocabulary_size: int
    embedding_dim: int
    initializer: Any = None
    optimizer: Any = "adam"
    combiner: str = "mean"
    placement: str = "auto"
    max_ids_per_partition: int = 256
    max_unique_ids_per_partition: int = 256


@dataclass
class FeatureConfig:
    name: str
    table: TableConfig
    input_shape: tuple[Any, ...]
    output_shape: tuple[Any, ...]


a = TableConfig("a", 100, 8, optimizer="sgd", placement="sparsecore", max_ids_per_partition=32,
                max_unique_ids_per_partition=16)
b = TableConfig("b", 100, 8, optimizer="sgd", placement="sparsecore")
c = TableConfig("c", 100, 8, placement="default_device")
feature_config = {
    "fa": FeatureConfig("fa", a, (64, 1), (64, 8)),
    "fb": FeatureConfig("fb", b, (64, 1), (64, 8)),
    "fc": FeatureConfig("fc", c, (64, 1), (64, 8)),
}
topology = "v5p:2"
