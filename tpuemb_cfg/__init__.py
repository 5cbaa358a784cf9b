"""tpuemb: TensorFlow TPU embedding configurations, readable, checkable and runnable on a laptop.

The message classes are tpuemb's own (proto package ``tpuemb_cfg.proto``) but wire-, text- and
JSON-compatible with TensorFlow 2.21's ``tensorflow.tpu`` messages; functions that take a
configuration also accept TensorFlow's message objects.

Every public name is loaded on first use (PEP 562): ``import tpuemb_cfg`` itself imports neither
protobuf nor the generated modules. That keeps the ``tpuemb`` command's start-up (and the window
in which Ctrl-C could interrupt an import) short, and lets an environment without protobuf get a
message that says so instead of an error about generated files.
"""

from __future__ import annotations


def _guard_start() -> None:
    """When this process is the `tpuemb` command, make Ctrl-C exit quietly (130) at once.

    The first statement of the package, before any import of it, even of
    :mod:`tpuemb_cfg.base.interrupt` (an import is a window in which a ``KeyboardInterrupt``
    prints a traceback: the test of Ctrl-C at every instant of start-up found one). Uses only
    modules Python has loaded already (``_signal`` is the C module). A library import changes
    nothing; :mod:`tpuemb_cfg.base.interrupt` takes over once the command runs (its ``message``
    is the same line).
    """
    import _signal
    import os
    import sys

    argv = list(getattr(sys, "orig_argv", ()))
    by_module = any(a == "-m" and b == "tpuemb_cfg" for a, b in zip(argv, argv[1:], strict=False))
    script = os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    if not (by_module or "-mtpuemb_cfg" in argv or script in ("tpuemb", "tpuemb.exe")):
        return

    def exit_now(signum: int, frame: object) -> None:
        os.write(2, b"tpuemb: interrupted; no output file was left half-written\n")
        os._exit(130)

    try:
        _signal.signal(_signal.SIGINT, exit_now)
    except ValueError:  # not the main thread
        pass


_guard_start()

import importlib  # noqa: E402 - after the Ctrl-C guard
from typing import TYPE_CHECKING, Any  # noqa: E402

from tpuemb_cfg._moved import install as _install_moved  # noqa: E402
from tpuemb_cfg.base.errors import InputError, TpuembError, UsageError  # noqa: E402
from tpuemb_cfg.base.version import __version__  # noqa: E402

_install_moved()  # the old module paths (one release)

if TYPE_CHECKING:
    from tpuemb_cfg.formats.io import as_config, dump, load
    from tpuemb_cfg.model import Diagnostic
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
    from tpuemb_cfg.review.diffing import ConfigDiff, DiffOptions, diff
    from tpuemb_cfg.review.sides import SideOptions
    from tpuemb_cfg.run import RunRequest, open_run
    from tpuemb_cfg.session import validate

_OPTIMIZATION = "tpuemb_cfg.proto.optimization_parameters_pb2"
_CONFIGURATION = "tpuemb_cfg.proto.tpu_embedding_configuration_pb2"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    **{name: _OPTIMIZATION for name in (
        "AdadeltaParameters", "AdagradMomentumParameters", "AdagradParameters", "AdamParameters",
        "AssignParameters", "BoundedAdagradParameters", "CenteredRmsPropParameters",
        "ClippingLimits", "DynamicLearningRate", "FrequencyAwareAdagradParameters",
        "FrequencyEstimatorParameters", "FtrlParameters", "GradientAccumulationStatus",
        "HotIdReplicationConfiguration", "LearningRate", "LionParameters",
        "LowDimensionalPackingStatus", "MdlAdagradLightParameters", "MomentumParameters",
        "OnlineYogiParameters", "OptimizationParameters", "ProximalAdagradParameters",
        "ProximalYogiParameters", "RmsPropParameters", "SimulatedQuantization",
        "StateVariableSpecification", "StochasticGradientDescentParameters",
        "UserDefinedProgramParameters",
    )},
    "TPUEmbeddingConfiguration": _CONFIGURATION,
    "TPUEmbeddingError": _CONFIGURATION,
    "as_config": "tpuemb_cfg.formats.io",
    "dump": "tpuemb_cfg.formats.io",
    "load": "tpuemb_cfg.formats.io",
    "validate": "tpuemb_cfg.session",
    "Diagnostic": "tpuemb_cfg.model",
    "open_run": "tpuemb_cfg.run",
    "RunRequest": "tpuemb_cfg.run",
    "diff": "tpuemb_cfg.review.diffing",
    "ConfigDiff": "tpuemb_cfg.review.diffing",
    "DiffOptions": "tpuemb_cfg.review.diffing",
    "SideOptions": "tpuemb_cfg.review.sides",
}

__all__ = [
    "AdadeltaParameters",
    "AdagradMomentumParameters",
    "AdagradParameters",
    "AdamParameters",
    "AssignParameters",
    "BoundedAdagradParameters",
    "CenteredRmsPropParameters",
    "ClippingLimits",
    "ConfigDiff",
    "Diagnostic",
    "DiffOptions",
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
    "RunRequest",
    "SideOptions",
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
    "diff",
    "dump",
    "load",
    "open_run",
    "validate",
]


def missing_dependency(exc: ImportError) -> str | None:
    """What to tell the user when ``exc`` comes from a missing dependency or unbuilt tree.

    None when ``exc`` is about something else. Shared by the library's lazy names and the CLI.
    """
    import sys

    name = exc.name or ""
    python = sys.executable or "python3"
    if name == "google" or name.startswith("google.protobuf"):
        return (
            f"the protobuf package is not installed in this Python ({python}); tpuemb needs "
            f"protobuf>=6.31.1,<8: run `{python} -m pip install 'protobuf>=6.31.1,<8'`, or "
            "`pip install .` in the tpuemb folder to install every dependency"
        )
    if name.startswith("tpuemb_cfg.proto"):
        return (
            "tpuemb_cfg's generated protobuf modules (tpuemb_cfg/proto/*_pb2.py) are missing; "
            "they are built from protos/ at install time: run `pip install -e .` (or "
            "`pip install .`) in the tpuemb folder"
        )
    top = name.split(".")[0]
    if top in ("numpy", "click", "numba"):
        return (
            f"the {top} package is not installed in this Python ({python}); run "
            f"`{python} -m pip install {top}`, or `pip install .` in the tpuemb folder"
        )
    return None


def __getattr__(name: str) -> Any:
    # Everything public is loaded on first use; see the module docstring.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpuemb_cfg' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        message = missing_dependency(exc)
        if message is None:
            raise
        raise ImportError(message, name=exc.name) from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
