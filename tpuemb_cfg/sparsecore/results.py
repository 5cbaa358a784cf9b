"""What host preprocessing of one batch gives, per stacked table (both modes).

The arrays are jax-tpu-embedding 0.2.0's (``SparseDenseMatmulInputStats`` and the CSR arrays of
``PreprocessedInput``) with the shapes the issue asks for; ``dropped`` maps each input id back to
whether it reached a SparseCore, which the simulation and ``tpuemb plan`` need and neither
reference returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["PreprocessedBatch", "PreprocessedStack"]


@dataclass
class PreprocessedStack:
    """One stacked table's preprocessing of one batch."""

    stack: str
    #: ``[local_devices, N]``: per destination partition, the most ids one of the device's
    #: SparseCores sends there (after merging repeats, before dropping)
    max_ids_per_partition: npt.NDArray[np.int32]
    #: ``[local_devices, N]``: the same, counting distinct embedding ids
    max_unique_ids_per_partition: npt.NDArray[np.int32]
    #: ``[local_devices, sparse_cores_per_device]``: per source SparseCore, the sum over
    #: partitions of its id count rounded up to 8
    required_buffer_size_per_sc: npt.NDArray[np.int32]
    #: ids dropped (limits with ``allow_id_dropping``, and the silent buffer overflow)
    id_drop_count: int
    coo_buffer_size_per_device: int
    #: CSR arrays ``[local_devices, size]`` as jax-tpu-embedding returns them with
    #: ``has_leading_dimension=True``. ``valid_mask`` marks the entries (ids sent to a
    #: SparseCore); ``padding_mask`` the slots jax-tpu-embedding pads after each partition's
    #: run, up to a multiple of 8 (embedding id and sample id 2^31 - 1, gain NaN, as it writes
    #: them). Slots in neither it never writes (uninitialised memory there; tpuemb writes 0)
    row_pointers: npt.NDArray[np.int32]
    embedding_ids: npt.NDArray[np.int32]
    sample_ids: npt.NDArray[np.int32]
    gains: npt.NDArray[np.float32]
    valid_mask: npt.NDArray[np.bool_]
    #: per feature of the stack: one bool per input id in the order given (ragged: the values
    #: array; dense: row-major), True where that id was dropped
    dropped: dict[str, npt.NDArray[np.bool_]] = field(default_factory=dict)
    #: roundup8(max_ids_per_partition) x sparse_cores_per_device x N: the buffer every
    #: SparseCore sending a full run to every partition needs (0 when not computed)
    theoretical_max_coo_buffer_size: int = 0
    #: the padding slots (see the CSR arrays); None where the mode writes no padding
    #: (TensorFlow's preprocessing)
    padding_mask: npt.NDArray[np.bool_] | None = None


@dataclass
class PreprocessedBatch:
    """Every stacked table of one batch, in the stacking's order."""

    stacks: dict[str, PreprocessedStack]
    num_minibatches: int = 1

    @property
    def id_drop_count(self) -> int:
        return sum(s.id_drop_count for s in self.stacks.values())
