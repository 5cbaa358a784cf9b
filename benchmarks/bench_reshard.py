"""Reshard a large synthetic stacked variable through files on disk under a memory cap.

    nice -n 10 python benchmarks/bench_reshard.py --gib 4 --cap-mib 512
    nice -n 10 python benchmarks/bench_reshard.py --gib 16 --cap-mib 4096 --old 8 --new 16
    nice -n 10 python benchmarks/bench_reshard.py --gib 4 --new 8 --new-per-chip 2  # v5p:2 -> v6e:4

One stack of ``--tables`` tables of ``--width`` float32 columns (vocabularies a little off the
padding, rotations spread) makes an OLD stacked variable of about ``--gib`` GiB on ``--old``
SparseCores; :func:`tpuemb_cfg.checkpoints.reshard.execute_reshard` writes it for ``--new``
SparseCores. The files are ``.npy`` (a NumPy header, then the rows) read with ``os.preadv`` into
fresh buffers and written with ``os.write``: until tpuemb's checkpoint format lands this stands
in for its reader and writer. Not ``np.memmap``: the pages of a mapping a process touched count
in its resident memory, which would measure the page cache, not the engine.

Each measurement runs in a child process of its own, which reports its peak resident memory
(``VmHWM``) before the work (interpreter and NumPy) and after it, and its time: the reshard, and
as the baseline in the same run a plain streaming copy of the OLD file with the same cap (the
ratio reshard / copy is the number to compare across machines). A sample of NEW's rows is checked
against OLD's (the row map of ``checkpoints.sharding``, itself tested against TensorFlow). Prints
the load (``/proc/loadavg``) beside the times. Files go to ``--dir`` (default a temporary folder
next to this script's results) and are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tpuemb_cfg.checkpoints.reshard import execute_reshard, plan_reshard  # noqa: E402
from tpuemb_cfg.checkpoints.sharding import shard_rows, table_rows  # noqa: E402
from tpuemb_cfg.model.checkpoint import LayoutRecord  # noqa: E402

NAME = "stack"


def layouts(rows_total: int, tables: int, width: int, cores: int, per_chip: int = 4
            ) -> list[LayoutRecord]:
    """A stack of ``tables`` tables of about ``rows_total`` rows together on ``cores``
    SparseCores, ``per_chip`` a chip (a partition): vocabularies 8N-padded, offsets in order,
    table k's rotation ``per_chip x k mod N``."""
    out, offset = [], 0
    vocab = [rows_total // tables - 3 * k - 1 for k in range(tables)]
    for k, v in enumerate(vocab):
        padded = -(-v // (8 * cores)) * 8 * cores
        out.append((f"t{k}", v, padded, offset, (per_chip * k) % cores))
        offset += padded // cores
    return [LayoutRecord(table_name=name, stacked_table_name=NAME, num_sparse_cores=cores,
                         num_partitions=max(1, cores // per_chip),
                         total_rows_per_sparse_core_shard=offset,
                         unsharded_shape=(v, width), unsharded_padded_shape=(p, width),
                         sparse_core_shard_row_offset=o, sparse_core_shard_rotation=r)
            for name, v, p, o, r in out]


class NpyFile:
    """A 2-D ``.npy`` file read a range of rows at a time (a ``RowSource``)."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            np.lib.format.read_magic(f)
            self._shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            self.offset = f.tell()
        self._dtype = np.dtype(dtype)
        self.fd = os.open(path, os.O_RDONLY)
        self.row = self._shape[1] * self._dtype.itemsize

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._shape)

    def dtype(self, name: str) -> np.dtype[Any]:
        return self._dtype

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self._shape[1]), dtype=self._dtype)
        got = os.preadv(self.fd, [memoryview(out).cast("B")], self.offset + start * self.row)
        if got != out.nbytes:
            raise OSError(f"short read: {got} of {out.nbytes} bytes")
        return out


class NpySink:
    """Writes each variable as ``DIR/NAME.npy``, chunk by chunk (a ``RowSink``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def add_rows(self, name: str, shape: tuple[int, int], dtype: Any, chunks: Any) -> None:
        with open(self.folder / f"{name}.npy", "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                    "fortran_order": False, "shape": shape})
            for chunk in chunks:
                f.write(memoryview(np.ascontiguousarray(chunk)).cast("B"))


def hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def make_old(path: Path, shape: tuple[int, int]) -> None:
    """Row g holds g's bits in column 0 and 7s elsewhere (uint32 bits of float32)."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                 "shape": shape})
        step = max(1, (64 << 20) // (shape[1] * 4))
        for start in range(0, shape[0], step):
            stop = min(start + step, shape[0])
            block = np.full((stop - start, shape[1]), 7, dtype=np.uint32)
            block[:, 0] = np.arange(start, stop, dtype=np.uint32)
            f.write(memoryview(block.view(np.float32)).cast("B"))


def child(args: argparse.Namespace) -> None:
    before = hwm()
    old_l = layouts(args.rows, args.tables, args.width, args.old, args.old_per_chip)
    new_l = layouts(args.rows, args.tables, args.width, args.new, args.new_per_chip)
    folder = Path(args.dir)
    source = NpyFile(folder / "old.npy")
    started = time.perf_counter()
    if args.task == "copy":
        sink_path = folder / "copy.npy"
        rows = max(1, args.cap // (3 * source.row))
        with open(sink_path, "wb") as f:
            for start in range(0, source.shape(NAME)[0], rows):
                f.write(memoryview(source.read_rows(NAME, start,
                                                    min(start + rows, source.shape(NAME)[0])))
                        .cast("B"))
        stats: dict[str, Any] = {}
        sink_path.unlink()
    else:
        plan = plan_reshard(old_l, new_l)
        result = execute_reshard(plan, source, NpySink(folder), memory_cap=args.cap)
        stats = {"blocks": result.blocks, "block_rows": result.block_rows,
                 "read_calls": result.read_calls, "bytes_read": result.bytes_read,
                 "bytes_written": result.bytes_written, "amplification": plan.amplification}
    seconds = time.perf_counter() - started
    if args.task == "reshard":
        new = NpyFile(folder / f"{NAME}.npy")
        rng = np.random.default_rng(0)
        sample = np.sort(rng.choice(new.shape(NAME)[0], 2000, replace=False)).astype(np.int64)
        order = tuple(sorted(new_l, key=lambda r: r.sparse_core_shard_row_offset))
        which, j = table_rows(order, sample)
        bad = 0
        for g, w, row in zip(sample, which, j, strict=True):
            value = new.read_rows(NAME, int(g), int(g) + 1).view(np.uint32)[0]
            if row < order[w].unsharded_shape[0]:
                src = old_l[[r.table_name for r in old_l].index(order[w].table_name)]
                expected = int(shard_rows(src, np.array([row]))[0])
                bad += int(value[0] != expected or (value[1:] != 7).any())
            else:
                bad += int(value.any())
        stats["sample_mismatches"] = bad
        (folder / f"{NAME}.npy").unlink()
    print(json.dumps({"task": args.task, "seconds": seconds, "hwm_before": before,
                      "hwm_after": hwm(), **stats}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--cap-mib", type=int, default=512)
    ap.add_argument("--old", type=int, default=8, help="OLD's SparseCores (v5p:2: 8)")
    ap.add_argument("--new", type=int, default=16, help="NEW's SparseCores (v5p:4: 16)")
    ap.add_argument("--old-per-chip", type=int, default=4, help="OLD's SparseCores a chip")
    ap.add_argument("--new-per-chip", type=int, default=4, help="NEW's (v6e: 2)")
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--task", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cap", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task:
        child(args)
        return
    rows = int(args.gib * (1 << 30) / (args.width * 4))
    cap = args.cap_mib << 20
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        old_l = layouts(rows, args.tables, args.width, args.old, args.old_per_chip)
        shape = (old_l[0].num_sparse_cores * old_l[0].total_rows_per_sparse_core_shard,
                 args.width)
        make_old(Path(folder) / "old.npy", shape)
        size = shape[0] * shape[1] * 4
        print(f"OLD {shape[0]:,} x {shape[1]} float32 = {size / 2**30:.2f} GiB on {args.old} "
              f"SparseCores ({args.old_per_chip} a chip) -> {args.new} ({args.new_per_chip} a "
              f"chip); cap {args.cap_mib} MiB")
        for repeat in range(args.repeats):
            for task in ("copy", "reshard"):
                load = Path("/proc/loadavg").read_text().split()[:3]
                out = subprocess.run(
                    [sys.executable, __file__, "--task", task, "--rows", str(rows),
                     "--cap", str(cap), "--dir", folder, "--old", str(args.old), "--new",
                     str(args.new), "--tables", str(args.tables), "--width", str(args.width),
                     "--old-per-chip", str(args.old_per_chip), "--new-per-chip",
                     str(args.new_per_chip)],
                    check=True, capture_output=True, text=True).stdout
                r = json.loads(out)
                extra = "" if task == "copy" else (
                    f" blocks {r['blocks']} of {r['block_rows']:,} rows, reads "
                    f"{r['read_calls']:,} ({r['bytes_read'] / size:.2f}x OLD), amplification "
                    f"{r['amplification']}, sample mismatches {r['sample_mismatches']}")
                rate = size / 2**20 / r["seconds"]
                print(f"[{repeat}] {task:8s} {r['seconds']:7.2f} s {rate:7.1f} MiB/s  "
                      f"VmHWM {r['hwm_after'] / 2**20:.0f} MiB "
                      f"(before {r['hwm_before'] / 2**20:.0f} MiB; +"
                      f"{(r['hwm_after'] - r['hwm_before']) / 2**20:.0f} vs cap {args.cap_mib})"
                      f"  load {' '.join(load)}{extra}", flush=True)


if __name__ == "__main__":
    main()
