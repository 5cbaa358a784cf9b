"""Real TensorFlow checkpoints of embeddings, in the model layer: TensorFlow's SparseCore layout
arithmetic (``sharding``), the streaming reshard (``reshard``: NumPy on rows; a reader or writer
plugs in through ``RowSource`` / ``RowSink``), the embedding's variables found by TensorFlow's
names (``embedding``), checking them against a configuration (``verify``) and tpuemb's state
to and from them (``state``). Files are read and written only through ``formats.bundle``.
"""
