#!/usr/bin/env python3
"""Run the `tpuemb` command from a checkout: `python cli.py ARGS` is `tpuemb ARGS`.

A thin shim for people who have not put the console script on their PATH; it is not installed.
All logic lives in tpuemb_cfg.cli. Before importing anything it makes Ctrl-C exit quietly (130),
and it turns a missing dependency (protobuf, click, ...) into one line that says what to install.
"""

import os
import signal
import sys


def _interrupted(signum: int, frame: object) -> None:
    os.write(2, b"tpuemb: interrupted; no output file was left half-written\n")
    os._exit(130)


def _missing(name: str) -> str:
    python = sys.executable or "python3"
    package = "protobuf>=6.31.1,<8" if name.startswith("google") else name.split(".")[0]
    return (f"tpuemb: the {package.split('>')[0]} package is not installed in this Python "
            f"({python}); run `{python} -m pip install '{package}'`, or `pip install .` in this "
            "folder to install tpuemb with every dependency")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _interrupted)
    try:
        from tpuemb_cfg.cli import main
    except ImportError as exc:
        print(_missing(exc.name or "click"), file=sys.stderr)
        sys.exit(2)
    main(prog_name="tpuemb")
