"""Host preprocessing of one batch for the SparseCores, exactly as jax-tpu-embedding 0.2.0 does it.

``preprocess`` turns each feature's ids (and weights) into, per stacked table, the CSR arrays the
SparseCores read and the statistics ``embedding.preprocess_sparse_dense_matmul_input`` returns,
bit for bit where the reference writes them (docs/sparsecore/preprocessing.md states every rule;
the 200 stored batches of ``tests/data/sparsecore`` check them). Per stacked table, with ``N``
SparseCores in the slice, ``L`` local devices and ``S`` SparseCores per device:

1. **Samples.** Each feature's batch of ``B`` rows is cut into ``L x S`` contiguous slices of
   ``b = B / (L S)`` rows; slice ``c = d S + s`` goes to SparseCore ``s`` of local device ``d``.
   The stack's features, in ``row_offset`` order, are laid end to end there: row ``j`` of a
   slice of feature ``f`` is sample ``j + sum(b_f' for f' before f)``.
2. **Ids.** Id ``x`` of table ``t`` goes to partition ``p = (x + col_shift) mod N`` as embedding
   id ``x div N + row_offset_in_shard`` (``col_offset / N``).
3. **Gains.** ``w / D`` with ``D`` = 1 (sum), the row's weight sum (mean) or the square root of its
   sum of squares (sqrtn), in float32, summed left to right over the whole row (the squares by
   fused multiply-adds) before anything is merged or dropped (a zero ``D`` gives inf/NaN gains,
   as in jax-tpu-embedding).
4. **Sort and merge.** Per SparseCore, entries are ordered by (partition, embedding id, input
   position); entries with equal (partition, embedding id, sample) merge into one, gains summed
   left to right in float32.
5. **Statistics** (after merging, before dropping): per partition the most entries and the most
   distinct embedding ids any of a device's SparseCores sends there, and per SparseCore the sum
   over partitions of its entry counts rounded up to 8.
6. **Limits.** Walking a (SparseCore, partition) run in order, entry ``i`` (1-based) whose
   embedding id is the ``u``-th distinct one is dropped when ``i > max_ids`` or
   ``u > max_unique_ids``. Without ``allow_id_dropping`` jax-tpu-embedding aborts the process
   instead; tpuemb raises :class:`SparseCoreLimitError`.
7. **Buffer.** Each SparseCore owns ``coo_buffer_size_per_device / S`` entries; its partitions
   are written in order, each starting at a multiple of 8 (the slots before it padded with
   embedding and sample id 2^31 - 1 and gain NaN, as the reference pads them), and what does
   not fit is dropped,
   silently and whatever ``allow_id_dropping`` says (jax-tpu-embedding does the same). With
   minibatching (one minibatch), a device's SparseCores write one after the other instead.
8. **Minibatches.** With minibatching, a batch above a limit is split instead of checked
   (the section "minibatches" below; the statistics stay those of steps 1-5).

Two engines compute the same bits (``engine=``, :data:`ENGINES`):

- ``numba`` (the default): steps 1-7 in compiled kernels (``preprocess_kernels``), the
  SparseCores of every stack shared out over numba's thread count of threads: per SparseCore
  one pass counting, a radix sort of packed (partition, embedding id, sample, position) keys
  built from the ids in its first pass, and one pass that merges, sums gains, counts and
  writes the CSR arrays and the drop flags. A SparseCore's work depends on no other's, so any
  thread count gives the same bytes. Without numba (or with ``NUMBA_DISABLE_JIT``) it warns
  once and runs ``numpy``.
- ``numpy``: the readable reference, vectorised NumPy: one sort of packed int64 keys per
  stacked table, the rest ``bincount`` and cumulative sums; the only Python loops run over
  positions within a row or a merged entry (the float32 left-to-right sums) and over stacks
  and features.

A split into several minibatches (step 8) runs the NumPy code on either engine's merged
entries. TensorFlow's mode has the NumPy engine only.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from tpuemb_cfg.sparsecore._args import check_preprocess, check_str
from tpuemb_cfg.sparsecore.preprocess_input import (
    COMBINERS,
    MINIBATCHES,
    Ids,
    SparseCoreBufferError,
    SparseCoreInputError,
    SparseCoreLimitError,
    SparseCoreUnsupportedError,
    _options,
    _read_features,
    buffer_sizes,
)
from tpuemb_cfg.sparsecore.preprocess_minibatch import _minibatch_of_bucket as _minibatch_of_bucket
from tpuemb_cfg.sparsecore.preprocess_minibatch import _preprocess_split, highway_hash_int32
from tpuemb_cfg.sparsecore.preprocess_minibatch import _split_nodes as _split_nodes
from tpuemb_cfg.sparsecore.preprocess_stack import (
    _check_rows,
    _check_stack,
    _count,
    _finish,
    _split_needed,
)
from tpuemb_cfg.sparsecore.preprocess_stack import _fma32 as _fma32
from tpuemb_cfg.sparsecore.preprocess_stack import _sort as _sort
from tpuemb_cfg.sparsecore.results import PreprocessedBatch
from tpuemb_cfg.sparsecore.stacking import Stacking
from tpuemb_cfg.sparsecore.tf_preprocess import preprocess_tensorflow

# The steps live in three modules: preprocess_input (errors, options, the features as flat
# arrays, buffer sizes), preprocess_stack (one stacked table, steps 2-7) and
# preprocess_minibatch (step 8); TensorFlow's rules in tf_preprocess, which reads its input
# through preprocess_input (it never imports this module).

__all__ = [
    "COMBINERS", "DEFAULT_ENGINE", "ENGINES", "MINIBATCHES", "SparseCoreBufferError",
    "SparseCoreInputError", "SparseCoreLimitError", "SparseCoreUnsupportedError",
    "buffer_sizes", "highway_hash_int32", "preprocess",
]


#: The preprocessing engines (the executor's names: ``numba`` compiled, ``numpy`` the reference).
ENGINES = ("numba", "numpy")
DEFAULT_ENGINE = "numba"

_warned: set[str] = set()  # fallback reasons already shown in this process


def _kernels(engine: str) -> Any:
    """The compiled kernels for ``engine`` (``preprocess_kernels``), or None for NumPy: the one
    place the preprocessing engine is chosen. ``numba`` without an importable numba (or with
    ``NUMBA_DISABLE_JIT``: ``base.jit_availability``) warns once per process and runs NumPy."""
    if engine == "numpy":
        return None
    try:
        from tpuemb_cfg.sparsecore import preprocess_kernels
    except ImportError as exc:
        reason = (f"SparseCore preprocessing: the numba engine cannot be imported ({exc}); "
                  "running the NumPy engine instead (same results, slower); install numba, "
                  "or pass engine='numpy' to silence this")
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(reason, RuntimeWarning, stacklevel=3)
        return None
    return preprocess_kernels


def preprocess(  # noqa: PLR0913 - the issue's signature, mirroring jax-tpu-embedding's
    stacking: Stacking,
    features: Mapping[str, Ids],
    weights: Mapping[str, Any] | None = None,
    *,
    local_devices: int,
    global_devices: int | None = None,
    sparse_cores_per_device: int | None = None,
    allow_id_dropping: bool = False,
    has_leading_dimension: bool = True,
    limits: Mapping[str, tuple[int, int]] | None = None,
    mode: Literal["jax", "tensorflow"] = "jax",
    enable_minibatching: bool = False,
    engine: str = DEFAULT_ENGINE,
    csr: bool = True,
) -> PreprocessedBatch:
    """Preprocess one host's batch for every stacked table of ``stacking``.

    ``features`` maps each feature of the stacking (``FeatureSlot.name``) to its ids: a dense
    integer array ``[batch, k]`` or a ragged pair ``(values, row_splits)``; ``weights`` the same
    shapes in float (a feature left out, or ``weights=None``, weighs 1). ``local_devices`` is
    the number of devices this host feeds; ``global_devices`` and ``sparse_cores_per_device``
    default to the stacking's and must match it. ``limits`` overrides ``(max_ids_per_partition,
    max_unique_ids_per_partition)`` by stack name. With ``has_leading_dimension`` the CSR arrays
    are ``[local_devices, size]``, else flat (jax-tpu-embedding's ``jit`` layout).

    ``mode="jax"`` is jax-tpu-embedding 0.2.0's ``preprocess_sparse_dense_matmul_input``;
    ``mode="tensorflow"`` runs TensorFlow's rules (``sparsecore.tf_preprocess``). With
    ``enable_minibatching`` a batch within its limits is laid out as jax-tpu-embedding lays out
    one minibatch, and a batch above them is split into minibatches as it splits it (one host
    only: :class:`SparseCoreUnsupportedError` when ``local_devices < global_devices``). Raises
    :class:`SparseCoreLimitError` where jax-tpu-embedding aborts on a limit,
    :class:`SparseCoreBufferError` on a buffer size it aborts on, and
    :class:`SparseCoreInputError` on input it would accept silently but wrongly (negative ids,
    ids outside the vocabulary, float ids, weights of another shape, unknown combiners).

    ``engine`` is ``"numba"`` (compiled, the default) or ``"numpy"`` (the reference); both
    give the same bytes (module docstring). With ``csr=False`` the CSR arrays are not built:
    ``row_pointers``, ``embedding_ids``, ``sample_ids``, ``gains``, ``valid_mask`` and
    ``padding_mask`` come back empty (size 0 in their last dimension, same dtypes), and the
    statistics, drop counts and per-id ``dropped`` flags are those of ``csr=True`` (what
    ``tpuemb plan``'s limits pass reads; the CSR arrays of a large slice are 100 MB or more per
    batch). TensorFlow's mode ignores both (NumPy, CSR always built).
    """
    check_preprocess("preprocess", stacking, features, weights, local_devices=local_devices,
                     global_devices=global_devices,
                     sparse_cores_per_device=sparse_cores_per_device, limits=limits,
                     flags={"allow_id_dropping": allow_id_dropping,
                            "has_leading_dimension": has_leading_dimension,
                            "enable_minibatching": enable_minibatching, "csr": csr})
    check_str("preprocess", "mode", mode, ("jax", "tensorflow"))
    check_str("preprocess", "engine", engine, ENGINES)
    if engine not in ENGINES:
        raise SparseCoreInputError(f"unknown preprocessing engine {engine!r}: expected "
                                   f"{' or '.join(map(repr, ENGINES))}", reason="engine")
    if mode == "tensorflow":
        return preprocess_tensorflow(
            stacking, features, weights, local_devices=local_devices,
            global_devices=global_devices, sparse_cores_per_device=sparse_cores_per_device,
            allow_id_dropping=allow_id_dropping, has_leading_dimension=has_leading_dimension,
            limits=limits, enable_minibatching=enable_minibatching)
    if mode != "jax":
        raise SparseCoreInputError(f"unknown preprocessing mode {mode!r}: expected 'jax' or "
                                   "'tensorflow'", reason="mode")
    opts = replace(_options(stacking, local_devices, global_devices, sparse_cores_per_device,
                            allow_id_dropping, has_leading_dimension, limits),
                   minibatching=bool(enable_minibatching))
    if opts.minibatching and opts.local_devices < opts.global_devices:
        raise SparseCoreUnsupportedError(
            "enable_minibatching=True with several hosts (local_devices "
            f"{opts.local_devices} < global_devices {opts.global_devices}): the hosts agree on "
            "the minibatches through jax-tpu-embedding's all_reduce_interface, which tpuemb "
            "does not model; preprocess one host's whole slice, or without minibatching")
    kernels = _kernels(engine)
    inputs = _read_features(stacking, features, weights, int32=kernels is not None)
    # Every stack's buffer is sized before any id is looked at, as jax-tpu-embedding does (a
    # bad suggestion is reported even when another stack's limits would fail too).
    sizes = {stack.name: _check_stack(stack, opts) for stack in stacking.stacks}
    compiled: dict[str, Any] = {}
    if kernels is not None:  # every stack's SparseCores in one pass of the threads
        for stack in stacking.stacks:
            for slot in stacking.features_of(stack.name):
                _check_rows(stack, slot, inputs[slot.name], opts)
        done = kernels.sort_merge_stacks(
            [(stack, stacking.features_of(stack.name), sizes[stack.name])
             for stack in stacking.stacks], inputs, opts, csr)
        compiled = {stack.name: out for stack, out in zip(stacking.stacks, done, strict=True)}
    counted = {stack.name: _count(stack, stacking.features_of(stack.name), inputs, opts,
                                  sizes[stack.name], kernels, csr, compiled.get(stack.name))
               for stack in stacking.stacks}
    if opts.minibatching and _split_needed(stacking, counted, sizes):
        return _preprocess_split(stacking, inputs, opts, sizes, counted, csr)
    stacks = {stack.name: _finish(stack, stacking.features_of(stack.name), inputs, opts,
                                  sizes[stack.name], *counted.pop(stack.name), csr=csr)
              for stack in stacking.stacks}
    return PreprocessedBatch(stacks=stacks, num_minibatches=1)
