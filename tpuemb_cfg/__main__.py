"""`python -m tpuemb_cfg` is the `tpuemb` command."""

from tpuemb_cfg.cli import main

if __name__ == "__main__":
    main(prog_name="tpuemb")
