"""tpuemb: TensorFlow TPU embedding configurations, readable, checkable and runnable on a laptop.

The message classes are tpuemb's own (proto package ``tpuemb_cfg.proto``) but wire-, text- and
JSON-compatible with TensorFlow 2.21's ``tensorflow.tpu`` messages; functions that take a
configuration also accept TensorFlow's message objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from tpuemb_cfg.proto.optimization_parameters_pb2 import (
        AdadeltaParameters,
        AdagradMomentumParameters,
        AdagradParameters,
        AdamParameters,
        AssignParameters,
        BoundedAdagradParameters,
        CenteredRmsPropParameters,
        ClippingLimits,
        DynamicLearningRate,
        FrequencyAwareAdagradParameters,
        FrequencyEstimatorParameters,
        FtrlParameters,
        GradientAccumulationStatus,
        HotIdReplicationConfiguration,
        LearningRate,
        LionParameters,
        LowDimensionalPackingStatus,
        MdlAdagradLightParameters,
        MomentumParameters,
        OnlineYogiParameters,
        OptimizationParameters,
        ProximalAdagradParameters,
        ProximalYogiParameters,
        RmsPropParameters,
        SimulatedQuantization,
        StateVariableSpecification,
        StochasticGradientDescentParameters,
        UserDefinedProgramParameters,
    )
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import (
        TPUEmbeddingConfiguration,
        TPUEmbeddingError,
    )
except ImportError as _exc:  # pragma: no cover - only in an unbuilt source tree
    raise ImportError(
        "tpuemb_cfg's generated protobuf modules are missing. They are built from protos/ at "
        "install time: run `pip install -e .` (or `pip install .`) in the project folder."
    ) from _exc

from tpuemb_cfg.errors import InputError, TpuembError, UsageError
from tpuemb_cfg.io import as_config, dump, load

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tpuemb_cfg.rules._registry import Diagnostic
    from tpuemb_cfg.validator import validate

__all__ = [
    "AdadeltaParameters",
    "AdagradMomentumParameters",
    "AdagradParameters",
    "AdamParameters",
    "AssignParameters",
    "BoundedAdagradParameters",
    "CenteredRmsPropParameters",
    "ClippingLimits",
    "Diagnostic",
    "DynamicLearningRate",
    "FrequencyAwareAdagradParameters",
    "FrequencyEstimatorParameters",
    "FtrlParameters",
    "GradientAccumulationStatus",
    "HotIdReplicationConfiguration",
    "InputError",
    "LearningRate",
    "LionParameters",
    "LowDimensionalPackingStatus",
    "MdlAdagradLightParameters",
    "MomentumParameters",
    "OnlineYogiParameters",
    "OptimizationParameters",
    "ProximalAdagradParameters",
    "ProximalYogiParameters",
    "RmsPropParameters",
    "SimulatedQuantization",
    "StateVariableSpecification",
    "StochasticGradientDescentParameters",
    "TPUEmbeddingConfiguration",
    "TPUEmbeddingError",
    "TpuembError",
    "UsageError",
    "UserDefinedProgramParameters",
    "__version__",
    "as_config",
    "dump",
    "load",
    "validate",
]

_LAZY = {
    "validate": ("tpuemb_cfg.validator", "validate"),
    "Diagnostic": ("tpuemb_cfg.rules._registry", "Diagnostic"),
}


def __getattr__(name: str) -> Any:
    # validate and Diagnostic load the rule registry; keep `import tpuemb_cfg` cheap.
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tpuemb_cfg' has no attribute {name!r}")
