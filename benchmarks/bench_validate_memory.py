"""Benchmark: the peak memory of `tpuemb validate` as a multiple of the file's size.

Generates text configurations in several layouts, then runs ``tpuemb validate -f FORMAT FILE``
in a child process that reports its own high-water mark (``VmHWM`` of ``/proc/self/status``,
Linux only: ``ru_maxrss`` would carry the parent's peak across fork and exec), minus the same
for an empty file (the interpreter and the imports), and prints it with the wall time:

* ``clean``: TensorFlow's layout (a field per line), no finding;
* ``errors``: TensorFlow's layout, an error in every table (TBL006, dimension 0);
* ``infos``: TensorFlow's layout, an info in every table (ACC002, no accumulation status);
* ``tensorflow``: TensorFlow's layout, ACC002 in every table and TBL006 in every other one, two
  features per table (the layout of tests/test_robustness_round_two.py);
* ``one-line``: the same findings, a table or a feature per line;
* ``dense``: the same findings, a table or a feature per short line (the most findings per
  byte);
* ``dynamic``: one line per table, every table with a dynamic learning rate;
* ``legacy``: legacy style (``num_features`` per table), TensorFlow's layout.

The target is less than 10 times the file. Run
``python benchmarks/bench_validate_memory.py --tables 100000 --layout tensorflow``; ``--tables``
scales every layout (``--tables 1000000 --layout one-line`` is a 312 MB file: minutes of
work). This is not a test; it prints figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MEASURED = """\
import sys
from tpuemb_cfg.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
with open("/proc/self/status") as status:
    print(int(status.read().split("VmHWM:")[1].split()[0]) * 1024, file=sys.stderr)
"""

TAIL = "mode: TRAINING\nnum_hosts: 16\nnum_tensor_cores: 64\n"


def tensorflow(tables: int, dimension: Callable[[int], int] = lambda t: 8 * (t % 2 == 0),
               status: str = "") -> str:
    out = []
    for t in range(tables):
        out.append(
            f'table_descriptor {{\n  name: "table_{t}"\n  vocabulary_size: {1000 + t}\n'
            f"  dimension: {dimension(t)}\n  optimization_parameters {{\n"
            f"    learning_rate {{ constant: 0.01 }}\n    adagrad {{ }}\n{status}  }}\n}}\n")
    for j in range(2 * tables):
        out.append(f'feature_descriptor {{\n  name: "feature_{j}"\n  table_id: {j % tables}\n'
                   "  input_shape: 128\n}\n")
    return "".join(out) + TAIL


ENABLED = "    gradient_accumulation_status: ENABLED\n"


def one_line(tables: int, learning_rate: str = "constant: 0.01") -> str:
    out = [f'table_descriptor {{ name: "table_{t}" vocabulary_size: {1000 + t} '
           f"dimension: {0 if t % 2 else 8} optimization_parameters {{ learning_rate "
           f"{{ {learning_rate} }} adagrad {{ }} }} }}\n" for t in range(tables)]
    out += [f'feature_descriptor {{ name: "feature_{j}" table_id: {j % tables} '
            "input_shape: 128 }\n" for j in range(2 * tables)]
    return "".join(out) + TAIL


def dense(tables: int) -> str:
    out = [f'table_descriptor{{name:"t{t}" vocabulary_size:1000 dimension:{t % 2} '
           "optimization_parameters{adagrad{}learning_rate{constant:0.1}}}\n"
           for t in range(tables)]
    out += [f"feature_descriptor{{table_id:{t} input_shape:128}}\n" for t in range(tables)]
    return "".join(out) + TAIL


def legacy(tables: int) -> str:
    out = ["batch_size_per_tensor_core: 128\n"]
    out += [f'table_descriptor {{\n  name: "table_{t}"\n  vocabulary_size: {1000 + t}\n'
            f"  dimension: {0 if t % 2 else 8}\n  num_features: 2\n  optimization_parameters {{\n"
            "    learning_rate { constant: 0.01 }\n    adagrad { }\n  }\n}\n"
            for t in range(tables)]
    return "".join(out) + TAIL


#: layout -> its text for ``--tables`` (halved where a table takes more text, so that the
#: layouts come out at comparable sizes).
LAYOUTS: dict[str, Callable[[int], str]] = {
    "clean": lambda n: tensorflow(n // 2, lambda t: 8, ENABLED),
    "errors": lambda n: tensorflow(n // 2, lambda t: 0, ENABLED),
    "infos": lambda n: tensorflow(n // 2, lambda t: 8),
    "tensorflow": tensorflow,
    "one-line": one_line,
    "dense": dense,
    "dynamic": lambda n: one_line(n // 2, "dynamic { tag: 0 }"),
    "legacy": lambda n: legacy(n // 2),
}


def peak(args: list[str], env: dict[str, str]) -> tuple[int, float]:
    """(high-water mark in bytes, seconds) of ``tpuemb ARGS`` in a child process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURED, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env, check=False)
    return int(done.stderr.strip().splitlines()[-1]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100_000)
    parser.add_argument("--layout", action="append", choices=sorted(LAYOUTS))
    parser.add_argument("--format", action="append", dest="formats",
                        choices=["text", "json", "sarif", "github", "junit"])
    args = parser.parse_args()
    if not Path("/proc/self/status").exists():
        sys.exit("needs /proc/self/status (Linux) to read the peak memory")
    env = dict(os.environ, TPUEMB_MAX_INPUT="64G")
    print(f"{'layout':<11} {'format':<6} {'file':>10} {'peak - empty':>13} {'x file':>7} "
          f"{'time':>8}")
    with tempfile.TemporaryDirectory() as folder:
        empty = Path(folder) / "empty.pbtxt"
        empty.write_text("")
        for layout in args.layout or list(LAYOUTS):
            path = Path(folder) / f"{layout}.pbtxt"
            path.write_text(LAYOUTS[layout](args.tables))
            size = path.stat().st_size
            for fmt in args.formats or ["text", "sarif"]:
                base, _ = peak(["validate", "-f", fmt, str(empty)], env)
                used, seconds = peak(["validate", "-f", fmt, str(path)], env)
                print(f"{layout:<11} {fmt:<6} {size / 1e6:8.1f} MB {(used - base) / 1e6:10.0f} MB "
                      f"{(used - base) / size:6.2f}x {seconds:7.1f} s", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
