#!/usr/bin/env python3
"""Run the `tpuemb` command from a checkout: `python cli.py ARGS` is `tpuemb ARGS`.

A thin shim for people who have not put the console script on their PATH; it is not installed.
All logic lives in tpuemb_cfg.cli.
"""

from tpuemb_cfg.cli import main

if __name__ == "__main__":
    main(prog_name="tpuemb")
