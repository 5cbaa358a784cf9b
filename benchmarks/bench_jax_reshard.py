"""`tpuemb checkpoint reshard` end to end on a large jax-tpu-embedding (Orbax) checkpoint.

    nice -n 10 python benchmarks/bench_jax_reshard.py --gib 4 --cap 1G
    nice -n 10 python benchmarks/bench_jax_reshard.py --gib 1 --cap 256M --interrupt 3

Builds an Orbax step of one Adagrad table of 128 float32 columns on 2 devices x 4 SparseCores
(the table and its accumulator: ``--gib`` GiB together), from the stored jax-tpu-embedding
checkpoint (tests/data/checkpoints/orbax/jte_adagrad/7: its dense kernel and metadata), written
by ``formats.orbax_write`` a block of rows at a time with the spec jax-tpu-embedding would store
beside it. Then runs the command as a child process to reshard it for 4 devices x 4 SparseCores
(every row moves) with ``--max-memory CAP``, and reports its time, its peak resident memory
(``ru_maxrss`` of the child) against the cap, and a plain copy of the same folder as the
baseline in the same run. A sample of rows of the output is checked against the generator.
``--interrupt S`` instead sends SIGINT S seconds into the reshard and checks the exit status
(130) and that nothing is left. Needs the extra ``orbax`` (tensorstore).
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

SOURCE = ROOT / "tests" / "data" / "checkpoints" / "orbax" / "jte_adagrad" / "7"
STACKS = "model/embedding_layer/embedding_table/value"
SPEC = '''
from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec
big = TableSpec(name="big", vocabulary_size={rows}, embedding_dim=128, initializer=None,
                optimizer=AdagradOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = {{"big": FeatureSpec(name="big", table_spec=big, input_shape=[64, 1],
                                     output_shape=[64, 128])}}
global_device_count = {devices}
num_sc_per_device = 4
'''
BLOCK_ROWS = 1 << 15


def rows_of(table_rows: np.ndarray, slot: int) -> np.ndarray:
    """Row j of the table (slot 0) or its accumulator (slot 1): j + 0.5 * column + slot, exact
    in float32 below 2^23 rows."""
    return (table_rows[:, None].astype(np.float32) + np.float32(slot)
            + np.arange(128, dtype=np.float32)[None, :] * np.float32(0.5))


def stacked_blocks(layout: object, total: int, slot: int):  # noqa: ANN201
    """The stacked array of the big table, a block of rows at a time (padding zero)."""
    from tpuemb_cfg.checkpoints.sharding import table_rows

    for start in range(0, total, BLOCK_ROWS):
        stop = min(total, start + BLOCK_ROWS)
        _, rows = table_rows([layout], np.arange(start, stop, dtype=np.int64))
        block = rows_of(rows, slot)
        block[rows >= layout.unsharded_shape[0]] = 0  # type: ignore[attr-defined]
        yield block


def build(folder: Path, rows: int) -> tuple[Path, Path]:
    """The 2 x 4 checkpoint (a manager folder with step 7) and the 4 x 4 spec file."""
    from google.protobuf import text_format

    from tpuemb_cfg.formats.orbax_write import OrbaxStepWriter
    from tpuemb_cfg.model.jax_checkpoint import JAX_SPEC_FILE, restacked_spec
    from tpuemb_cfg.proto.embedding_spec_pb2 import EmbeddingSpecProto
    from tpuemb_cfg.review.sides import SideOptions, load_side

    for devices in (2, 4):
        (folder / f"big_{devices}x4.py").write_text(SPEC.format(rows=rows, devices=devices))
    side = load_side(str(folder / "big_2x4.py"), SideOptions())
    assert side.stacking is not None
    [stack] = side.stacking.stacks
    [table] = stack.tables
    seed = EmbeddingSpecProto()
    spec_table = seed.stacked_table_specs.add(stack_name="big").table_specs.add(
        table_name="big", vocab_size=rows, embedding_dim=128, combiner="sum")
    spec_table.optimizer.type = spec_table.optimizer.ADAGRAD
    spec_table.optimizer.learning_rate = 0.1
    spec_table.optimizer.float_params["initial_accumulator_value"] = 0.1
    spec_table.feature_specs.add(feature_name="big", input_shape=[64, 1], output_shape=[64, 128])
    spec = restacked_spec(seed, side.stacking)
    from tpuemb_cfg.checkpoints.sharding import as_records
    from tpuemb_cfg.model.jax_checkpoint import layouts_from_embedding_spec

    [layout] = as_records(layouts_from_embedding_spec(spec))
    total = stack.padded_vocabulary_size
    manager = folder / "old"
    with OrbaxStepWriter(SOURCE, manager / "7", make_dirs=True) as writer:
        for part in ("user_item/table", "user_item/slot/accumulator", "country/table",
                     "country/slot/accumulator"):
            writer.drop(f"{STACKS}/{part}")
        for slot, part in enumerate(("big/table", "big/slot/accumulator")):
            writer.add_rows(f"{STACKS}/{part}", (total, table.padded_dim), np.float32,
                            stacked_blocks(layout, total, slot))
        writer.replace_file(JAX_SPEC_FILE, text_format.MessageToString(spec).encode())
        writer.finish()
    return manager, folder / "big_4x4.py"


def check(out: Path, rows: int, samples: int = 2000) -> int:
    """Rows of the output at the places its own spec gives, against the generator: wrong ones."""
    from tpuemb_cfg.checkpoints.embedding import find_jax_embedding
    from tpuemb_cfg.checkpoints.sharding import shard_rows
    from tpuemb_cfg.formats.orbax import OrbaxReader

    rng = np.random.default_rng(0)
    wrong = 0
    with OrbaxReader(out) as reader:
        found = find_jax_embedding(reader)
        [layout] = found.layouts
        for slot, name in enumerate(("big", "big/accumulators")):
            key = found.variable(name).key  # type: ignore[union-attr]
            for j in rng.integers(0, rows, samples // 2):
                [at] = shard_rows(layout, np.array([j]))
                got = reader.read_rows(key, int(at), int(at) + 1)
                wrong += int(not np.array_equal(got, rows_of(np.array([j]), slot)))
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=4.0, help="table + accumulator, GiB")
    parser.add_argument("--cap", default="1G", help="--max-memory of the reshard")
    parser.add_argument("--interrupt", type=float, help="SIGINT this many seconds in")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    rows = int(args.gib * 2**30 / (2 * 128 * 4))
    work = Path(tempfile.mkdtemp(prefix="bench_jax_reshard_", dir=args.dir))
    try:
        started = time.perf_counter()
        old, config = build(work, rows)
        print(f"built {old} ({rows:,} rows x 128, table and accumulator): "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        started = time.perf_counter()
        shutil.copytree(old, work / "copy")
        copy_sec = time.perf_counter() - started
        shutil.rmtree(work / "copy")
        out = work / "new"
        argv = [sys.executable, "-m", "tpuemb_cfg", "checkpoint", "reshard", str(old),
                str(config), "-o", str(out), "--max-memory", args.cap, "-q"]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        if args.interrupt is not None:
            time.sleep(args.interrupt)
            child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate()
        wall = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        print(f"exit {child.returncode} in {wall:.1f} s (a copy of the folder: {copy_sec:.1f} s)"
              f"; child's peak resident memory {peak:.2f} GiB under --max-memory {args.cap}; "
              f"load {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        print((stdout + stderr).strip())
        if args.interrupt is not None:
            left = sorted(p.name for p in work.iterdir())
            print(f"left in the work folder: {left}")
            assert child.returncode == 130 and "new" not in left, (child.returncode, left)
        else:
            assert child.returncode == 0
            print(f"rows checked against the generator: {check(out, rows)} wrong of 2,000")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
