"""Peak memory and time of OrbaxStepWriter streaming a large table into an Orbax step.

    nice -n 10 python benchmarks/bench_orbax_write.py --mib 128 512

For each size, in a child process of its own: the stored jax-tpu-embedding step
(tests/data/checkpoints/orbax/jte_adagrad/7) copied to a new step with ``user_item/table``
replaced by a table of that many MiB (rows of 256 float32, random: zstd barely shrinks them),
fed in blocks of 8 MiB; the child reports its peak resident memory (``VmHWM``) before the
write (interpreter, NumPy, tensorstore, one block) and after it, and the time. As the baseline
in the same run, the same rows written with plain ``file.write`` of each block (the ratio
Orbax / plain is the figure to compare across machines). A memory bounded by the writer's chunk
(``chunk_bytes``) and transaction (``buffer_bytes``) shows as a peak that does not grow with the
table. Prints the load (``/proc/loadavg``) beside the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "tests" / "data" / "checkpoints" / "orbax" / "jte_adagrad" / "7"
KEY = "model/embedding_layer/embedding_table/value/user_item/table"
COLUMNS = 256
BLOCK_ROWS = (8 << 20) // (COLUMNS * 4)


def _peak_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def child(mib: int, folder: str, plain: bool, buffer_mib: int) -> None:
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from tpuemb_cfg.formats.orbax_write import OrbaxStepWriter

    rows = (mib << 20) // (COLUMNS * 4)
    rows -= rows % 16
    rng = np.random.default_rng(0)
    block = rng.standard_normal((BLOCK_ROWS, COLUMNS)).astype(np.float32)

    def blocks():  # fresh blocks, as a reshard makes them
        for start in range(0, rows, BLOCK_ROWS):
            yield (block[:min(BLOCK_ROWS, rows - start)] + np.float32(start))

    import tensorstore  # noqa: F401  (loaded before the baseline peak in both modes)

    before = _peak_kib()
    start = time.perf_counter()
    if plain:
        with open(Path(folder) / "plain.bin", "wb") as handle:
            for part in blocks():
                handle.write(part.tobytes())
    else:
        with OrbaxStepWriter(STEP, Path(folder) / "7", buffer_bytes=buffer_mib << 20) as writer:
            writer.add_rows(KEY, (rows, COLUMNS), np.float32, blocks())
    seconds = time.perf_counter() - start
    print(json.dumps({"before_mib": before / 1024, "peak_mib": _peak_kib() / 1024,
                      "seconds": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--buffer-mib", type=int, default=128,
                        help="the writer's buffer_bytes (its transactions), in MiB")
    parser.add_argument("--child", nargs=3)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], args.child[2] == "plain", args.buffer_mib)
        return
    for mib in args.mib:
        results = {}
        for mode in ("orbax", "plain"):
            with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks") as folder:
                out = subprocess.run([sys.executable, __file__, "--child", str(mib), folder, mode,
                                      "--buffer-mib", str(args.buffer_mib)],
                                     check=True, capture_output=True, text=True).stdout
                results[mode] = json.loads(out.strip().splitlines()[-1])
        with open("/proc/loadavg", encoding="ascii") as handle:
            load = handle.read().split()[:3]
        orbax, plain = results["orbax"], results["plain"]
        above = orbax["peak_mib"] - orbax["before_mib"]
        print(f"{mib:6d} MiB table, buffer {args.buffer_mib} MiB: peak above start {above:7.1f}"
              f" MiB (plain write {plain['peak_mib'] - plain['before_mib']:6.1f} MiB); "
              f"{orbax['seconds']:6.2f} s vs plain {plain['seconds']:5.2f} s "
              f"(x{orbax['seconds'] / plain['seconds']:.1f}); load {' '.join(load)}")


if __name__ == "__main__":
    main()
