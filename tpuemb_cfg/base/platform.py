"""The TPU platform table: one frozen :class:`Chip` record per TPU generation tpuemb knows.

This is the only home of chip facts (HBM, TensorCores, SparseCores, devices and chips per host,
names and aliases); ``derived.TPU_DEVICE_MEMORY`` (rule SIZE004), ``sparsecore.topology.CHIPS``
(stacking, ``plan``, ``inspect``, the SC rules), the messages that list chips and the chip tables
of ``docs/`` are all views of :data:`PLATFORMS`. A new chip kind is one more record here.

**HBM is in GiB (2^30 bytes) for every generation.** Google's current Cloud TPU pages give HBM
per chip in GiB: the TPU7x page's comparison table ("HBM capacity per chip (GiB)": v5p 95, v6e 32,
TPU7x 192), the v5p page ("HBM capacity per chip (GiB) 95") and the system-architecture page
(v2 16 GiB, v3 32 GiB, v4 32 GiB per chip). The v5e and v6e pages write "16 GB" / "32 GB" in a
column without units; the TPU7x page's table states v6e's 32 as GiB, and v5e's 16 is read the same
way (HBM stacks come in binary sizes). So SIZE004 (``validate``) and ``plan`` hold a chip against
the same number: 95 GiB = 102,005,473,280 bytes on v5p.

Devices: jax (and jax-tpu-embedding's ``global_device_count``) sees :attr:`Chip.devices_per_chip`
devices on a chip; TensorFlow's ``num_tensor_cores`` counts :attr:`Chip.tf_devices_per_chip`
per chip (v2 and v3: one per TensorCore; v4 and v5p join their two TensorCores into one megacore
device). Where the two differ, both are kept: a TPU7x chip is two jax devices of 2 SparseCores
each (jax-tpu-embedding's ``NUM_SC_PER_DEVICE_MAP``), but one TensorFlow device of 4
(``TPUEmbeddingV2`` reads ``num_embedding_devices_per_chip`` per chip; Google's TPU7x page notes
TensorFlow does not support TPU7x at all). jax-tpu-embedding's map said 4 for TPU7x only between
two commits of its repository (``080ed3e``, 2025-12-08, to ``fce2aef``, 2026-01-14, "Megacore is
disabled"); no published build had it (the nightly 0.1.0.dev20251208 has no TPU7x entry,
0.1.0.dev20260312, 0.1.0 and 0.2.0 have 2), so the 2 is every jax-tpu-embedding version's and
there is no version to choose (docs/sparsecore.md, "Versions").

Pure standard library; imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "GIB",
    "PLATFORMS",
    "Chip",
    "chip_names",
    "find_chip",
    "jax_sparse_core_counts",
    "legacy_chips",
    "sparsecore_chips",
]

#: One GiB: the unit of every HBM figure (see the module docstring).
GIB = 1 << 30

_ARCHITECTURE = "https://cloud.google.com/tpu/docs/system-architecture-tpu-vm"


@dataclass(frozen=True)
class Chip:
    """One TPU generation, per chip.

    ``name`` is how reports write it (``"TPU7x"``), :attr:`key` its lower-case lookup name;
    ``aliases`` are other lower-case names it answers to. ``hbm_bytes`` is the chip's HBM in bytes
    (GiB, from ``hbm_source``). ``devices_per_chip``: the devices jax sees on one chip (the
    SparseCores and HBM are split evenly between them); ``tf_devices_per_chip``: what TensorFlow's
    ``num_tensor_cores`` counts on one chip. ``sparse_cores_per_chip``: 0 when the chip has none.
    ``sparsecore_api``: ``TPUEmbeddingV2``/jax-tpu-embedding target it (``--topology``, the SC
    rules); ``legacy``: SIZE004 holds a ``TPUEmbeddingConfiguration``'s devices against it.
    ``type_counts_tensor_cores``: the N of the accelerator type ``KIND-N`` counts TensorCores
    (else chips). ``single_host_chips``: the largest slice on one host; larger slices have
    ``chips_per_host`` chips on each host. ``note``: where TensorFlow and jax disagree.
    """

    name: str
    hbm_bytes: int
    hbm_source: str
    tensor_cores_per_chip: int
    devices_per_chip: int
    tf_devices_per_chip: int
    sparse_cores_per_chip: int
    chips_per_host: int
    single_host_chips: int
    type_counts_tensor_cores: bool
    sparsecore_api: bool
    legacy: bool
    aliases: tuple[str, ...] = ()
    note: str = ""

    @property
    def key(self) -> str:
        """The lower-case name tables and options use (``"tpu7x"``)."""
        return self.name.lower()

    @property
    def hbm_bytes_per_device(self) -> int:
        """The HBM of one jax device."""
        return self.hbm_bytes // self.devices_per_chip

    @property
    def tf_hbm_bytes_per_device(self) -> int:
        """The HBM of one TensorFlow device (what ``num_tensor_cores`` counts; SIZE004)."""
        return self.hbm_bytes // self.tf_devices_per_chip

    @property
    def sparse_cores_per_device(self) -> int:
        """SparseCores of one jax device (jax-tpu-embedding's ``num_sc_per_device``)."""
        return self.sparse_cores_per_chip // self.devices_per_chip

    @property
    def tf_sparse_cores_per_device(self) -> int:
        """SparseCores of one TensorFlow device (``num_embedding_devices_per_chip``)."""
        return self.sparse_cores_per_chip // self.tf_devices_per_chip

    @property
    def source(self) -> str:
        """The Cloud TPU page these facts are from."""
        return self.hbm_source

    @property
    def type_unit(self) -> str:
        """What N of ``KIND-N`` counts."""
        return "TensorCores" if self.type_counts_tensor_cores else "chips"

    def chips_of_type(self, n: int) -> int:
        """The chips of the accelerator type ``KIND-n``; ValueError when n is not a whole
        number of chips."""
        per = self.tensor_cores_per_chip if self.type_counts_tensor_cores else 1
        if n < per or n % per:
            raise ValueError(
                f"{self.name}-{n}: Cloud TPU's {self.name} accelerator types count TensorCores "
                f"({per} per chip), so N must be a multiple of {per} (e.g. {self.name}-8 is "
                f"{8 // per} chips); write {self.name}:{n} for {n} chip{'' if n == 1 else 's'}")
        return n // per

    def hosts_for(self, chips: int) -> int:
        """Cloud TPU's hosts (VMs) of a slice of ``chips`` chips."""
        if chips <= self.single_host_chips:
            return 1
        return -(-chips // self.chips_per_host)


#: Every TPU generation tpuemb knows, oldest first.
PLATFORMS: tuple[Chip, ...] = (
    Chip("v2", 16 * GIB, _ARCHITECTURE, tensor_cores_per_chip=2, devices_per_chip=2,
         tf_devices_per_chip=2, sparse_cores_per_chip=0, chips_per_host=4, single_host_chips=4,
         type_counts_tensor_cores=True, sparsecore_api=False, legacy=True),
    Chip("v3", 32 * GIB, _ARCHITECTURE, tensor_cores_per_chip=2, devices_per_chip=2,
         tf_devices_per_chip=2, sparse_cores_per_chip=0, chips_per_host=4, single_host_chips=4,
         type_counts_tensor_cores=True, sparsecore_api=False, legacy=True),
    Chip("v4", 32 * GIB, _ARCHITECTURE, tensor_cores_per_chip=2, devices_per_chip=1,
         tf_devices_per_chip=1, sparse_cores_per_chip=4, chips_per_host=4, single_host_chips=4,
         type_counts_tensor_cores=True, sparsecore_api=False, legacy=True,
         note="v4's SparseCores run TensorFlow's TPUEmbedding (TPUEmbeddingConfiguration); "
              "TPUEmbeddingV2 and jax-tpu-embedding do not target v4"),
    Chip("v5e", 16 * GIB, "https://cloud.google.com/tpu/docs/v5e", tensor_cores_per_chip=1,
         devices_per_chip=1, tf_devices_per_chip=1, sparse_cores_per_chip=0, chips_per_host=4,
         single_host_chips=8, type_counts_tensor_cores=False, sparsecore_api=False, legacy=True,
         aliases=("v5litepod", "v5lite")),
    Chip("v5p", 95 * GIB, "https://cloud.google.com/tpu/docs/v5p", tensor_cores_per_chip=2,
         devices_per_chip=1, tf_devices_per_chip=1, sparse_cores_per_chip=4, chips_per_host=4,
         single_host_chips=4, type_counts_tensor_cores=True, sparsecore_api=True, legacy=True,
         aliases=("v5",)),
    Chip("v6e", 32 * GIB, "https://cloud.google.com/tpu/docs/v6e", tensor_cores_per_chip=1,
         devices_per_chip=1, tf_devices_per_chip=1, sparse_cores_per_chip=2, chips_per_host=4,
         single_host_chips=8, type_counts_tensor_cores=False, sparsecore_api=True, legacy=True,
         aliases=("trillium", "v6")),
    Chip("TPU7x", 192 * GIB, "https://cloud.google.com/tpu/docs/tpu7x",
         tensor_cores_per_chip=2, devices_per_chip=2, tf_devices_per_chip=1,
         sparse_cores_per_chip=4, chips_per_host=4, single_host_chips=4,
         type_counts_tensor_cores=True, sparsecore_api=True, legacy=False,
         aliases=("ironwood", "7x"),
         note="a dual-chiplet chip: jax sees two devices of 1 TensorCore, 2 SparseCores and "
              "96 GiB each (jax-tpu-embedding's NUM_SC_PER_DEVICE_MAP: 2); TensorFlow's "
              "TPUEmbeddingV2 counts SparseCores per chip (4), and Google's page says TensorFlow "
              "does not support TPU7x"),
)


def sparsecore_chips(platforms: Iterable[Chip] | None = None) -> tuple[Chip, ...]:
    """The chips ``TPUEmbeddingV2`` and jax-tpu-embedding target (``--topology`` kinds), of
    ``platforms`` (default :data:`PLATFORMS`, read when called)."""
    return tuple(c for c in (PLATFORMS if platforms is None else platforms) if c.sparsecore_api)


def jax_sparse_core_counts(platforms: Iterable[Chip] | None = None) -> tuple[int, ...]:
    """The SparseCores per device jax-tpu-embedding accepts (``num_sc_per_device``): those of
    the chips it targets, ``(2, 4)``."""
    return tuple(sorted({c.sparse_cores_per_device for c in sparsecore_chips(platforms)}))


def legacy_chips(platforms: Iterable[Chip] | None = None) -> tuple[Chip, ...]:
    """The generations SIZE004 knows (``tpuemb validate --tpu``)."""
    return tuple(c for c in (PLATFORMS if platforms is None else platforms) if c.legacy)


def chip_names(chips: Iterable[Chip], *, last: str = ", ") -> str:
    """``"v5p, v6e, TPU7x"`` (``last=" or "``: ``"v5p, v6e or TPU7x"``): messages list chips
    through this, never by hand."""
    names = [c.name for c in chips]
    if len(names) < 2:
        return "".join(names)
    return ", ".join(names[:-1]) + last + names[-1]


def find_chip(name: str, chips: Iterable[Chip] | None = None) -> Chip | None:
    """The chip of ``chips`` called ``name`` or one of its aliases (case-insensitive), else
    None."""
    key = name.strip().lower()
    for chip in PLATFORMS if chips is None else chips:
        if key == chip.key or key in chip.aliases:
            return chip
    return None
