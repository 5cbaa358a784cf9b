"""The lowest layer: modules that import nothing from the rest of the package (standard library
only), such as the TPU platform table (:mod:`tpuemb_cfg.base.platform`) and the SparseCore defaults
(:mod:`tpuemb_cfg.base.sparsecore_defaults`)."""
