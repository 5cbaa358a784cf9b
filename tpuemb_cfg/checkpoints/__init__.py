"""Real TensorFlow checkpoints of embeddings: their variables (``embedding``), resharding from
one layout to another (``reshard``), and checking one against a configuration (``verify``).

A folder of the model layer: it reads files only through ``formats.bundle`` and configurations
only as ``model.checkpoint`` views and ``sparsecore`` layouts.
"""
