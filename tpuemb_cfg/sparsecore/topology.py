"""TPU chips with SparseCores and slices of them: the device counts stacking and preprocessing take.

``CHIPS`` is the one home of what tpuemb knows about a chip kind: SparseCores per chip (as
jax-tpu-embedding's ``NUM_SC_PER_DEVICE_MAP`` and TensorFlow's ``num_embedding_devices_per_chip``
report them) and HBM per chip (public product pages; used by ``tpuemb plan``). A
:class:`Topology` is a slice: a chip kind, the number of chips (TensorFlow's ``num_partitions`` =
``strategy.num_replicas_in_sync``, jax-tpu-embedding's ``global_device_count``) and hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CHIPS", "DEFAULT_SPARSE_CORES", "ChipKind", "Topology", "parse_topology"]


@dataclass(frozen=True)
class ChipKind:
    """One TPU generation with SparseCores."""

    name: str
    sparse_cores_per_chip: int
    hbm_bytes: int
    chips_per_host: int


_GIB = 1 << 30

#: Known chip kinds by their lower-case name and aliases.
CHIPS: dict[str, ChipKind] = {
    "v5p": ChipKind("v5p", 4, 95 * _GIB, 4),
    "v6e": ChipKind("v6e", 2, 32 * _GIB, 4),
    "tpu7x": ChipKind("TPU7x", 2, 192 * _GIB, 4),
}
_ALIASES = {"v5": "v5p", "trillium": "v6e", "v6": "v6e", "ironwood": "tpu7x", "7x": "tpu7x"}

#: What TensorFlow's ``TPUEmbeddingV2`` uses when the chip reports no SparseCore count
#: (``num_embedding_devices_per_chip`` 0: a warning, then 4; tpu_embedding_v3.py 2.21).
DEFAULT_SPARSE_CORES = 4


@dataclass(frozen=True)
class Topology:
    """A slice of chips: ``chips`` partitions of ``sparse_cores_per_chip`` SparseCores each.

    ``kind`` is ``None`` for a topology given by counts alone (no HBM figure then).
    ``sparse_cores_defaulted`` records that the count was not known and 4 was assumed, as
    TensorFlow does (rule SC-family: wrong on v6e and TPU7x, which have 2).
    """

    chips: int
    sparse_cores_per_chip: int
    hosts: int = 1
    kind: ChipKind | None = None
    sparse_cores_defaulted: bool = False

    @property
    def num_partitions(self) -> int:
        """TensorFlow's name for the number of chips."""
        return self.chips

    @property
    def num_sparse_cores(self) -> int:
        """N: every SparseCore of the slice; rows are spread over all of them."""
        return self.chips * self.sparse_cores_per_chip

    @property
    def chips_per_host(self) -> int:
        return max(1, self.chips // max(1, self.hosts))


def chip_kind(name: str) -> ChipKind:
    """The chip kind called ``name`` (``v5p``, ``v6e``, ``TPU7x``, case-insensitive); ValueError
    naming the known kinds otherwise."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in CHIPS:
        known = ", ".join(k.name for k in CHIPS.values())
        raise ValueError(f"unknown TPU chip kind {name!r}: expected one of {known}")
    return CHIPS[key]


_SLICE = re.compile(r"^\s*([A-Za-z0-9]+?)[-:](\d+)\s*$")


def parse_topology(text: str, *, hosts: int | None = None) -> Topology:
    """``"v6e-64"`` / ``"v5p:16"``: a chip kind and a chip count (hosts default to one per
    ``chips_per_host`` chips). ValueError with the expected form otherwise."""
    m = _SLICE.match(text)
    if not m:
        raise ValueError(f"cannot read topology {text!r}: expected KIND-CHIPS such as 'v6e-64'")
    kind = chip_kind(m.group(1))
    chips = int(m.group(2))
    if chips < 1:
        raise ValueError(f"topology {text!r}: the chip count must be at least 1")
    if hosts is None:
        hosts = max(1, -(-chips // kind.chips_per_host))
    return Topology(chips=chips, sparse_cores_per_chip=kind.sparse_cores_per_chip, hosts=hosts,
                    kind=kind)
