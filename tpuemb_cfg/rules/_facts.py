"""Rule texts that name chips or SparseCore defaults, filled in from the platform table.

A rule's docstring (what ``tpuemb explain`` prints) writes ``$name`` where a fact of
:mod:`tpuemb_cfg.base.platform` or :mod:`tpuemb_cfg.base.sparsecore_defaults` goes, and
:func:`platform_doc` (applied below ``@rule``) fills it in, so no rule text repeats a number or a
chip list: ``$default_limit`` (256), ``$activation_limit`` (2 MiB), ``$shard_limit`` (2 GiB),
``$assumed_sparse_cores`` (4), ``$jax_sparse_core_counts`` (``2 or 4``), ``$sparsecore_chips``
(``v5p, v6e, TPU7x``), ``$sparse_cores_per_device`` (``v5p 4, v6e 2, TPU7x 2``),
``$size004_generations`` (each SIZE004 generation's device memory), and per chip key
``$hbm_v5e`` (its device memory as SIZE004 counts it) and ``$sc_v6e`` (SparseCores per chip).
A ``$name`` that is not one of these is a KeyError at import.
"""

from __future__ import annotations

from collections.abc import Callable
from string import Template
from typing import TypeVar

from tpuemb_cfg.base.platform import (
    PLATFORMS,
    chip_names,
    jax_sparse_core_counts,
    legacy_chips,
    sparsecore_chips,
)
from tpuemb_cfg.base.sparsecore_defaults import (
    ACTIVATION_MEMORY_BYTES_LIMIT,
    ASSUMED_SPARSE_CORES_PER_CHIP,
    DEFAULT_MAX_IDS_PER_PARTITION,
    VARIABLE_SHARD_BYTES_LIMIT,
)
from tpuemb_cfg.base.units import format_size

F = TypeVar("F", bound=Callable[..., object])


def _size004_generations() -> str:
    """``"v2 8 GiB and v3 16 GiB per TensorCore; v4 32 GiB, ... per chip"``."""
    def listing(items: list[str]) -> str:
        return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)
    per_core = [f"{c.name} {format_size(c.tf_hbm_bytes_per_device)}" for c in legacy_chips()
                if c.tf_devices_per_chip > 1]
    per_chip = [f"{c.name} {format_size(c.hbm_bytes)}" for c in legacy_chips()
                if c.tf_devices_per_chip == 1]
    parts = []
    if per_core:
        parts.append(listing(per_core) + " per TensorCore")
    if per_chip:
        parts.append(listing(per_chip) + " per chip")
    return "; ".join(parts)


#: The values a rule text may name, by ``$name``.
FACTS: dict[str, str] = {
    "default_limit": str(DEFAULT_MAX_IDS_PER_PARTITION),
    "activation_limit": format_size(ACTIVATION_MEMORY_BYTES_LIMIT),
    "shard_limit": format_size(VARIABLE_SHARD_BYTES_LIMIT),
    "assumed_sparse_cores": str(ASSUMED_SPARSE_CORES_PER_CHIP),
    "jax_sparse_core_counts": " or ".join(str(n) for n in jax_sparse_core_counts()),
    "sparsecore_chips": chip_names(sparsecore_chips()),
    "sparse_cores_per_device": ", ".join(
        f"{c.name} {c.sparse_cores_per_device}" for c in sparsecore_chips()),
    "size004_generations": _size004_generations(),
    **{f"hbm_{c.key}": format_size(c.tf_hbm_bytes_per_device) for c in PLATFORMS},
    **{f"sc_{c.key}": str(c.sparse_cores_per_chip) for c in PLATFORMS},
}


def platform_doc(func: F) -> F:
    """Fill the ``$name`` placeholders of ``func``'s docstring from :data:`FACTS`."""
    if func.__doc__:
        func.__doc__ = Template(func.__doc__).substitute(FACTS)
    return func
