"""The argument checks at the entry of the public SparseCore functions.

A library caller who passes the wrong kind of object gets a ``TypeError`` (or a ``ValueError``
for a value of the right type out of range) naming the function, the argument, what was found
and what is expected, with the fix when there is one:
``preprocess(): stacking must be a Stacking (sparsecore.stack(config)), got a SparseCoreConfig:
pass sparsecore.stack(config)`` - never an ``AttributeError`` from deep inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.base.errors import described
from tpuemb_cfg.sparsecore.config import SparseCoreConfig
from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = ["check_bool", "check_config_type", "check_int", "check_limit_pairs", "check_mapping",
           "check_preprocess", "check_stacking", "check_str", "found"]

#: What a value is, for a message (``an int (64)``): the package's one value-showing helper.
found = described


def _fail(function: str, name: str, expected: str, value: Any, fix: str = "") -> TypeError:
    return TypeError(f"{function}(): {name} must be {expected}, got {found(value)}"
                     + (f": {fix}" if fix else ""))


def check_stacking(function: str, value: Any, name: str = "stacking") -> None:
    """``value`` is a :class:`~tpuemb_cfg.sparsecore.stacking.Stacking`."""
    if not isinstance(value, Stacking):
        fix = "pass sparsecore.stack(config)" if isinstance(value, SparseCoreConfig) else ""
        raise _fail(function, name, "a Stacking (sparsecore.stack(config))", value, fix)


def check_config_type(function: str, value: Any, name: str = "config") -> None:
    """``value`` is a :class:`~tpuemb_cfg.sparsecore.config.SparseCoreConfig`."""
    if not isinstance(value, SparseCoreConfig):
        fix = ("a Stacking is already stacked: pass the SparseCoreConfig it was made from"
               if isinstance(value, Stacking) else
               "build one (SparseCoreConfig(...), jte.feature_specs_to_config, or "
               "load_sparsecore_spec(path).config)")
        raise _fail(function, name, "a SparseCoreConfig", value, fix)


def check_int(function: str, name: str, value: Any, *, minimum: int | None = None,
              optional: bool = False) -> None:
    """``value`` is an integer (NumPy's too, not a bool), at least ``minimum``; ``None`` too
    when ``optional``."""
    import numbers

    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        expected = "an int" + (" or None" if optional else "")
        raise _fail(function, name, expected, value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{function}(): {name} must be at least {minimum}, got {int(value)}")


def check_bool(function: str, name: str, value: Any) -> None:
    """``value`` is a bool (NumPy's too)."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if not isinstance(value, bool) and not numpy_bool:
        raise _fail(function, name, "True or False", value)


def check_str(function: str, name: str, value: Any, choices: tuple[str, ...] = ()) -> None:
    """``value`` is a string (one of ``choices`` when given, compared as written)."""
    listed = " or ".join(map(repr, choices))
    if not isinstance(value, str):
        raise _fail(function, name, f"a str ({listed})" if choices else "a str", value)


def check_mapping(function: str, name: str, value: Any, what: str, *,
                  optional: bool = False) -> None:
    """``value`` is a mapping (``what`` says of what); ``None`` too when ``optional``."""
    if value is None and optional:
        return
    if not isinstance(value, Mapping):
        raise _fail(function, name, f"a dict of {what}" + (" or None" if optional else ""),
                    value)


def check_limit_pairs(function: str, limits: Any) -> None:
    """``limits``: None or a dict of stack name -> ``(max_ids_per_partition,
    max_unique_ids_per_partition)``, each a pair of integers (the values are checked by the
    preprocessing, against its own rules)."""
    check_mapping(function, "limits", limits,
                  "stack name -> (max_ids_per_partition, max_unique_ids_per_partition)",
                  optional=True)
    for key, pair in (limits or {}).items():
        where = f"limits[{key!r}]"
        if not isinstance(key, str):
            raise _fail(function, "every key of limits", "a stacked table's name (str)", key)
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise _fail(function, where, "a pair (max_ids_per_partition, "
                        "max_unique_ids_per_partition)", pair,
                        f"pass ({pair}, {pair}) for both" if isinstance(pair, int) else "")
        for value in pair:
            check_int(function, where, value)


def check_preprocess(function: str, stacking: Any, features: Any, weights: Any,  # noqa: PLR0913
                     *, local_devices: Any, global_devices: Any, sparse_cores_per_device: Any,
                     limits: Any, flags: Mapping[str, Any]) -> None:
    """The arguments :func:`~tpuemb_cfg.sparsecore.preprocessing.preprocess` and
    :func:`~tpuemb_cfg.sparsecore.tf_preprocess.preprocess_tensorflow` share (``flags``: the
    bool keywords by name)."""
    check_stacking(function, stacking)
    check_mapping(function, "features", features, "feature name -> ids")
    check_mapping(function, "weights", weights, "feature name -> weights", optional=True)
    check_int(function, "local_devices", local_devices, minimum=1)
    check_int(function, "global_devices", global_devices, minimum=1, optional=True)
    check_int(function, "sparse_cores_per_device", sparse_cores_per_device, minimum=1,
              optional=True)
    for name, value in flags.items():
        check_bool(function, name, value)
    check_limit_pairs(function, limits)
