"""TPU chips with SparseCores and slices of them: the device counts stacking and preprocessing take.

``CHIPS`` is the view of the platform table (:mod:`tpuemb_cfg.base.platform`, the one home of
chip facts, each record naming its Cloud TPU page) for the chip kinds with SparseCores:
TensorCores, SparseCores and HBM per chip, the devices jax sees on a chip, chips per host, and
what the number in a Cloud TPU accelerator type counts.

A :class:`Topology` is a slice: a chip kind, its chips, the devices they show (TensorFlow's
``num_partitions`` = ``strategy.num_replicas_in_sync``, jax-tpu-embedding's
``global_device_count``; one per chip but on TPU7x, two) and its hosts.

A slice is written as Cloud TPU names it, ``KIND-N`` (``gcloud --accelerator-type``): on v5p and
TPU7x N counts TensorCores (v5p-8 is 4 chips on one host), on v6e chips. ``KIND:N`` is N chips.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuemb_cfg.base.platform import Chip, chip_names, find_chip, sparsecore_chips
from tpuemb_cfg.base.sparsecore_defaults import ASSUMED_SPARSE_CORES_PER_CHIP

__all__ = ["CHIPS", "DEFAULT_SPARSE_CORES", "ChipKind", "Topology", "parse_topology",
           "sparse_cores_per_device_text"]


#: A chip kind with SparseCores: a record of the platform table (:mod:`tpuemb_cfg.base.platform`).
ChipKind = Chip

#: Known chip kinds with SparseCores by their lower-case name: a view of ``PLATFORMS`` (the
#: records ``TPUEmbeddingV2`` and jax-tpu-embedding target). SparseCores per device agree with
#: jax-tpu-embedding's ``NUM_SC_PER_DEVICE_MAP``.
CHIPS: dict[str, ChipKind] = {chip.key: chip for chip in sparsecore_chips()}

#: What TensorFlow's ``TPUEmbeddingV2`` uses when the chip reports no SparseCore count
#: (``num_embedding_devices_per_chip`` 0: a warning, then 4; tpu_embedding_v3.py 2.21).
DEFAULT_SPARSE_CORES = ASSUMED_SPARSE_CORES_PER_CHIP


@dataclass(frozen=True)
class Topology:
    """A slice of ``chips`` chips of ``sparse_cores_per_chip`` SparseCores each, seen as
    ``devices_per_chip`` devices per chip (the partitions stacking spreads rows over).

    ``kind`` is ``None`` for a topology given by counts alone (no HBM figure then; a chip is
    then one device). ``sparse_cores_defaulted`` records that the count was not known and 4
    was assumed, as TensorFlow does (rule SC-family: wrong on v6e, which has 2).
    """

    chips: int
    sparse_cores_per_chip: int
    hosts: int = 1
    kind: ChipKind | None = None
    sparse_cores_defaulted: bool = False
    devices_per_chip: int = 1

    @classmethod
    def from_devices(cls, devices: int, sparse_cores_per_device: int,
                     kind: ChipKind | None = None) -> Topology:
        """jax's view: ``devices`` global devices of ``sparse_cores_per_device`` SparseCores
        (on a chip kind of two devices per chip, half as many chips); hosts as Cloud TPU."""
        per = kind.devices_per_chip if kind is not None else 1
        if devices % per:
            raise ValueError(f"{devices} devices of {kind.name if kind else ''}: a chip shows "
                             f"{per} devices, so the count must be a multiple of {per}")
        chips = devices // per
        return cls(chips=chips, sparse_cores_per_chip=sparse_cores_per_device * per,
                   hosts=kind.hosts_for(chips) if kind is not None else 1, kind=kind,
                   devices_per_chip=per)

    @property
    def devices(self) -> int:
        """The devices of the slice (jax's ``global_device_count``)."""
        return self.chips * self.devices_per_chip

    @property
    def num_partitions(self) -> int:
        """The partitions stacking spreads over: TensorFlow's replicas, jax's devices."""
        return self.devices

    @property
    def sparse_cores_per_device(self) -> int:
        """jax-tpu-embedding's ``num_sc_per_device``."""
        return self.sparse_cores_per_chip // self.devices_per_chip

    @property
    def num_sparse_cores(self) -> int:
        """N: every SparseCore of the slice; rows are spread over all of them."""
        return self.chips * self.sparse_cores_per_chip

    @property
    def chips_per_host(self) -> int:
        return max(1, self.chips // max(1, self.hosts))

    @property
    def hbm_bytes_per_device(self) -> int | None:
        """The HBM of one device (partition), or None for an unknown chip kind."""
        return self.kind.hbm_bytes_per_device if self.kind is not None else None

    def describe(self) -> str:
        """``"v5p: 4 chips, 4 devices, 1 host, 16 SparseCores"``: what every report names."""
        kind = f"{self.kind.name}: " if self.kind is not None else ""
        hosts = f"{self.hosts} host{'' if self.hosts == 1 else 's'}"
        assumed = f" ({DEFAULT_SPARSE_CORES} per chip assumed, as TensorFlow does)" \
            if self.sparse_cores_defaulted \
            else ""
        return (f"{kind}{self.chips} chip{'' if self.chips == 1 else 's'}, {self.devices} "
                f"device{'' if self.devices == 1 else 's'}, {hosts}, {self.num_sparse_cores} "
                f"SparseCores{assumed}")

    def as_json(self) -> dict[str, object]:
        """The slice's counts for JSON reports."""
        return {"kind": self.kind.name if self.kind is not None else None,
                "chips": self.chips, "devices": self.devices, "hosts": self.hosts,
                "sparse_cores": self.num_sparse_cores,
                "sparse_cores_per_chip": self.sparse_cores_per_chip,
                "sparse_cores_per_device": self.sparse_cores_per_device,
                "sparse_cores_defaulted": self.sparse_cores_defaulted}


def sparse_cores_per_device_text() -> str:
    """``"SparseCores per device: v5p 4, v6e 2, TPU7x 2"``, from ``CHIPS``."""
    return "SparseCores per device: " + ", ".join(
        f"{k.name} {k.sparse_cores_per_device}" for k in CHIPS.values())


def chip_kind(name: str) -> ChipKind:
    """The chip kind called ``name`` (``v5p``, ``v6e``, ``TPU7x``, case-insensitive); ValueError
    naming the known kinds otherwise."""
    chip = find_chip(name, CHIPS.values())
    if chip is None:
        raise ValueError(f"unknown TPU chip kind {name!r}: expected one of "
                         f"{chip_names(CHIPS.values())}")
    return chip


_SLICE = re.compile(r"^\s*([A-Za-z0-9]+?)([-:])(\d+)\s*$")


def parse_topology(text: str, *, hosts: int | None = None) -> Topology:
    """``"v5p-64"``: a Cloud TPU accelerator type (v5p and TPU7x count TensorCores: 32 chips;
    v6e counts chips); ``"v5p:16"``: 16 chips. Hosts default to Cloud TPU's for the slice.
    ValueError with the expected form otherwise."""
    m = _SLICE.match(text)
    if not m:
        raise ValueError(f"cannot read topology {text!r}: expected an accelerator type KIND-N "
                         f"such as 'v5p-64' (as gcloud names it) or KIND:CHIPS such as 'v5p:32'")
    kind = chip_kind(m.group(1))
    n = int(m.group(3))
    if n < 1:
        raise ValueError(f"topology {text!r}: the count must be at least 1")
    chips = kind.chips_of_type(n) if m.group(2) == "-" else n
    if hosts is None:
        hosts = kind.hosts_for(chips)
    return Topology(chips=chips, sparse_cores_per_chip=kind.sparse_cores_per_chip, hosts=hosts,
                    kind=kind, devices_per_chip=kind.devices_per_chip)
