"""Embedding checkpoints on arrays: TensorFlow's SparseCore layout arithmetic
(:mod:`~tpuemb_cfg.checkpoints.sharding`) and the streaming reshard
(:mod:`~tpuemb_cfg.checkpoints.reshard`). The model layer: NumPy, no file formats (a reader or
writer plugs in through ``RowSource`` / ``RowSink``)."""
