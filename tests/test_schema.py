"""``tpuemb_cfg.base.schema`` states each enum's numbers once; here they meet the descriptors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tpuemb_cfg.base import schema
from tpuemb_cfg.proto import optimization_parameters_pb2 as opt
from tpuemb_cfg.proto import tpu_embedding_configuration_pb2 as tec

CONFIG = tec.TPUEmbeddingConfiguration.DESCRIPTOR
ACCUMULATION = opt.GradientAccumulationStatus.DESCRIPTOR

ENUMS = [
    (schema.Mode, CONFIG.enum_types_by_name["Mode"]),
    (schema.ShardingStrategy, CONFIG.enum_types_by_name["ShardingStrategy"]),
    (schema.AccumulationStatus, ACCUMULATION.enum_types_by_name["Status"]),
    (schema.PackingStatus, opt.LowDimensionalPackingStatus.DESCRIPTOR.enum_types_by_name["Status"]),
    (schema.HotIdStatus, opt.HotIdReplicationConfiguration.DESCRIPTOR.enum_types_by_name["Status"]),
]


@pytest.mark.parametrize(("enum", "descriptor"), ENUMS, ids=lambda e: getattr(e, "__name__", ""))
def test_numbers_match_the_descriptor(enum: type, descriptor: object) -> None:
    declared = {v.number: v.name for v in descriptor.values}  # type: ignore[attr-defined]
    assert schema.value_names(enum) == declared


def test_name_maps() -> None:
    assert schema.MODE_NAMES == schema.value_names(schema.Mode)
    assert schema.SHARDING_NAMES == {0: "DIV_DEFAULT", 1: "MOD"}
    assert schema.ACCUMULATION_NAMES == {0: "UNSPECIFIED", 1: "ENABLED", 2: "DISABLED"}


def test_importing_schema_loads_no_generated_module() -> None:
    code = (
        "import sys, tpuemb_cfg.base.schema; "
        "print(sorted(m for m in sys.modules if m.endswith('_pb2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
