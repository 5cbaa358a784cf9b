"""`tpuemb checkpoint reshard` end to end on a large TensorFlow-format checkpoint, under a cap.

    nice -n 10 python benchmarks/bench_checkpoint_reshard.py --gib 16 --cap 4G
    nice -n 10 python benchmarks/bench_checkpoint_reshard.py --gib 1 --cap 256M --interrupt 3

Writes a SparseCore spec of one SGD table of ``--gib`` GiB (128 float32 columns) on a v5p:2
slice (8 SparseCores), exports it as the checkpoint TensorFlow's TPUEmbeddingV2 saves (streamed
by ``formats.bundle``: the table is generated chunk by chunk, never whole in memory), then runs
the command as a child process to reshard it for v5p:4 (16 SparseCores: every row moves) with
``--max-memory CAP``, and reports its time, its peak resident memory (``ru_maxrss`` of the
child) against the cap, and a plain copy of the same files as the baseline in the same run.
A sample of rows is checked against the table's generator. ``--interrupt S`` instead sends
SIGINT S seconds into the reshard and checks the exit status (130) and that no output file
is left. Files go to ``--dir`` (default: a temporary folder) and are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEC = '''
from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig
topology = "{topology}"
optimizer = SGD(learning_rate=0.1)
big = TableConfig(vocabulary_size={rows}, dim=128, name="big", combiner="sum")
feature_config = {{"big": FeatureConfig(big, output_shape=[16])}}
'''
CHUNK_ROWS = 1 << 16


def rows_of(table_rows: np.ndarray) -> np.ndarray:
    """The generator of the big table: row j holds j + 0.5 * column (exact in float32 below
    2^24 rows; the test only needs distinct, checkable rows)."""
    return (table_rows[:, None].astype(np.float32)
            + np.arange(128, dtype=np.float32)[None, :] * np.float32(0.5))


def export(folder: Path, rows: int) -> Path:
    """The v5p:2 checkpoint of the big table, streamed."""
    from tpuemb_cfg.checkpoints.sharding import shard_rows
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.formats.bundle import write_object_checkpoint
    from tpuemb_cfg.model.checkpoint import LAYOUTS_KEY, layouts_from_proto, saved_layouts
    from tpuemb_cfg.sparsecore.summary import layouts_of

    spec = folder / "old.py"
    spec.write_text(SPEC.format(topology="v5p:2", rows=rows))
    layouts, _ = layouts_of(load_sparsecore_spec(str(spec), legacy=False).config)
    [layout] = layouts_from_proto(layouts)
    total = layout.num_sparse_cores * layout.total_rows_per_sparse_core_shard
    # stacked row g holds table row j where shard_rows(j) = g: invert per chunk of g
    table_of = np.empty(total, dtype=np.int64)
    table_of.fill(-1)
    j = np.arange(layout.unsharded_padded_shape[0], dtype=np.int64)
    table_of[shard_rows(layout, j)] = j

    def chunks():  # noqa: ANN202
        for start in range(0, total, CHUNK_ROWS):
            which = table_of[start:start + CHUNK_ROWS]
            block = rows_of(np.maximum(which, 0))
            block[(which < 0) | (which >= rows)] = 0  # padding
            yield block

    prefix = folder / "old"
    write_object_checkpoint(prefix, {"big": chunks()},
                            strings={LAYOUTS_KEY: saved_layouts(layouts).SerializeToString()},
                            shapes={"big": ((total, 128), np.float32)})
    return prefix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=16.0)
    parser.add_argument("--cap", default="4G")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--interrupt", type=float, default=None)
    args = parser.parse_args()
    rows = int(args.gib * (1 << 30) / (128 * 4))
    folder = Path(tempfile.mkdtemp(prefix="tpuemb-reshard-", dir=args.dir))
    try:
        start = time.perf_counter()
        old = export(folder, rows)
        print(f"exported {rows:,} x 128 ({args.gib} GiB) in {time.perf_counter() - start:.1f} s",
              flush=True)
        new = folder / "new.py"
        new.write_text(SPEC.format(topology="v5p:4", rows=rows))
        command = [sys.executable, "-m", "tpuemb_cfg", "checkpoint", "reshard", str(old),
                   str(new), "-o", str(folder / "resharded"), "--max-memory", args.cap, "-q"]
        load = open("/proc/loadavg").read().split()[0]
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=ROOT)
        if args.interrupt is not None:
            time.sleep(args.interrupt)
            child.send_signal(signal.SIGINT)
        status = child.wait()
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        left = sorted(p.name for p in folder.iterdir() if p.name.startswith("resharded"))
        if args.interrupt is not None:
            print(f"interrupted after {args.interrupt} s: exit {status}, output files left: "
                  f"{left or 'none'}")
            return
        assert status == 0, status
        size = sum(p.stat().st_size for p in folder.glob("old.*"))
        start = time.perf_counter()
        for p in folder.glob("old.*"):
            shutil.copyfile(p, folder / ("copy" + p.suffix))
            os.sync()
        copy = time.perf_counter() - start
        from tpuemb_cfg.checkpoints.embedding import find_embedding
        from tpuemb_cfg.checkpoints.sharding import shard_rows
        from tpuemb_cfg.formats.bundle import BundleReader

        with BundleReader(folder / "resharded") as reader:
            found = find_embedding(reader)
            [layout] = found.layouts
            sample = np.random.default_rng(0).integers(0, rows, 2000)
            wrong = 0
            for j in sample:
                g = int(shard_rows(layout, np.array([j]))[0])
                got = reader.read_rows(found.variables[0].key, g, g + 1)[0]
                wrong += int(got.tobytes() != rows_of(np.array([j]))[0].tobytes())
        print(f"reshard {size / 2**30:.1f} GiB, v5p:2 -> v5p:4 (8 -> 16 SparseCores): "
              f"{seconds:.1f} s ({size / seconds / 2**20:.0f} MiB/s); copy of the same files "
              f"{copy:.1f} s (ratio {seconds / copy:.2f}); peak resident memory of the command "
              f"{peak / 2**30:.2f} GiB under --max-memory {args.cap}; {wrong} of 2000 sampled "
              f"rows wrong; load {load} before")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
