"""``tpuemb plan``: memory, load and limits from a sample of real ids, before any TPU time.

- ``inputs``: samples of ids (replay ``B.npz``, Parquet, TFRecord ``tf.train.Example``) as a
  stream of batches keyed by feature name;
- ``memory``: bytes per host, chip and SparseCore against HBM and host memory;
- ``load``: ids and unique ids per host (MOD vs DIV_DEFAULT) and per SparseCore, imbalance;
- ``limits``: observed maxima, suggested ``max_ids_per_partition`` and
  ``max_unique_ids_per_partition``, and the ids dropped at the current and suggested limits
  (exact preprocessing);
- ``planning``: the whole plan, what-if comparisons and the gate.
"""
