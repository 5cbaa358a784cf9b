"""Facts every layer reads and nothing in the package feeds: the TPU platform table
(:mod:`tpuemb_cfg.base.platform`) and the SparseCore defaults
(:mod:`tpuemb_cfg.base.sparsecore_defaults`). Pure standard library."""
