"""Click commands of the `tpuemb` CLI, one module per family, imported lazily by tpuemb_cfg.cli."""
