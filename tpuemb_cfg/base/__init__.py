"""The base layer: the errors users see, the units they type, float32 numerics, the TPU platform
table (:mod:`tpuemb_cfg.base.platform`) and the SparseCore defaults
(:mod:`tpuemb_cfg.base.sparsecore_defaults`), the TensorFlow versions whose SparseCore stacking
is modelled (:mod:`tpuemb_cfg.base.tf_versions`), the enum numbers, interrupts and standard
streams.
Nothing here imports a module above it.
"""
