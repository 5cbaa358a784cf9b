"""Write a synthetic sample of ids for ``tpuemb plan``: Zipf-distributed ids (a few hot ids and a
long tail, as real id traffic), one bag per row and feature, as Parquet, TFRecord or a replay
``B.npz``.

    python examples/plan/zipf_sample.py examples/quickstart.pbtxt --rows 4096 -o day.parquet
    tpuemb plan examples/quickstart.pbtxt --ids day.parquet --compare hosts=2,4

    python examples/plan/zipf_sample.py examples/sparsecore/v5p_jax_ranking.py \\
        --rows 12288 -o day.tfrecord

    python examples/plan/zipf_sample.py examples/sparsecore/keras_rs_dcnv2_v6e32.py \\
        --keras-backend jax --fixed-bags --rows 65536 -o mlperf.parquet
    tpuemb plan examples/sparsecore/keras_rs_dcnv2_v6e32.py --keras-backend jax --ids mlperf.parquet

The columns are named as ``tpuemb plan`` reads them (``planner.inputs``' sample schema): for a
keras-rs spec that depends on the Keras backend (TensorFlow: the ``feature_config`` keys; JAX:
each ``FeatureConfig.name``), so give the same ``--keras-backend`` to both commands.

Each bag holds 1 to ``--max-bag`` ids (uniform), or with ``--fixed-bags`` exactly the ids per
bag the configuration gives (a spec's input shapes: MLPerf's multi-hot ``feature_list_length``;
features without one keep the uniform draw); id ``k`` of a table of V rows is drawn with
probability proportional to ``1 / (k + 1)^s`` (``--exponent`` s > 1, NumPy's Zipf sampler),
folded into ``[0, V)`` by ``mod V``. The same arguments and ``--seed`` give the same file.

The rows are drawn and written ``--row-group`` rows at a time (a Parquet row group, a run of
TFRecord records, whole ``B.npz`` steps), so a sample of 10^8 ids or more never is in memory;
a sample of at most ``--row-group`` rows is drawn exactly as :func:`zipf_columns` draws it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

Columns = dict[str, tuple[np.ndarray, np.ndarray]]


def schema_of(config: str, keras_backend: str | None = None) -> Any:
    """The features a sample of ``config`` gives (a SparseCore spec or any configuration),
    named as ``tpuemb plan`` reads them; ``keras_backend``: a keras-rs spec's backend
    (``"jax"`` or ``"tensorflow"``; None: as ``tpuemb plan`` chooses without the option)."""
    from tpuemb_cfg.planner.inputs import legacy_schema, sparsecore_schema
    from tpuemb_cfg.session import prepare
    from tpuemb_cfg.spec_check import is_sparsecore_spec

    if config.endswith(".py") and is_sparsecore_spec(config):
        from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

        return sparsecore_schema(load_sparsecore_spec(config, keras_backend=keras_backend).config)
    return legacy_schema(prepare(config).plan)


def zipf_columns(schema: Any, rows: int, *, exponent: float = 1.2, max_bag: int = 1,
                 seed: int = 0, fixed_bags: bool = False) -> Columns:
    """Per feature, ``rows`` bags: (ids int64, row_splits int64). ``fixed_bags``: a feature
    whose ``ids_per_bag`` the configuration gives holds exactly that many ids per bag."""
    return next(zipf_chunks(schema, rows, rows, exponent=exponent, max_bag=max_bag, seed=seed,
                            fixed_bags=fixed_bags))


def zipf_chunks(schema: Any, rows: int, chunk: int, *, exponent: float = 1.2, max_bag: int = 1,
                seed: int = 0, fixed_bags: bool = False) -> Iterator[Columns]:
    """:func:`zipf_columns` of ``rows`` rows drawn ``chunk`` rows at a time (one generator: the
    chunks differ from each other, and one chunk of all rows is ``zipf_columns``)."""
    rng = np.random.default_rng(seed)
    for start in range(0, rows, max(chunk, 1)) or [0]:
        n = min(chunk, rows - start)
        out = {}
        for feature in schema.features:
            fixed = feature.ids_per_bag if fixed_bags else None
            if fixed is not None:
                splits = np.arange(0, n * fixed + 1, fixed, dtype=np.int64)
            else:
                lengths = rng.integers(1, max_bag + 1, size=n)
                splits = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(lengths, out=splits[1:])
            ids = (rng.zipf(exponent, size=int(splits[-1])) - 1) % feature.vocabulary
            out[feature.name] = (ids.astype(np.int64), splits)
        yield out


def _rows(columns: dict[str, tuple[np.ndarray, np.ndarray]]) -> Iterator[dict[str, Any]]:
    rows = len(next(iter(columns.values()))[1]) - 1
    for r in range(rows):
        yield {name: ids[splits[r]:splits[r + 1]].tolist()
               for name, (ids, splits) in columns.items()}


def write(path: str, columns: Columns, batch: int) -> None:
    """``columns`` as ``path`` (by extension); an ``.npz`` holds steps of ``batch`` rows."""
    write_chunks(path, [columns], batch)


PARQUET, TFRECORD, NPZ = (".parquet", ".pq"), (".tfrecord", ".tfrecords", ".tfr"), (".npz",)


def write_chunks(path: str, chunks: Iterable[Columns], batch: int) -> None:
    """The rows of ``chunks`` one after the other as ``path``, one chunk in memory at a time: a
    Parquet row group per chunk, or the chunk's records; an ``.npz`` holds steps of ``batch``
    rows (a chunk's rows past its last whole step are dropped). Written atomically (a temporary
    file beside ``path``, renamed when complete): an interrupted run leaves no partial sample."""
    from tpuemb_cfg.formats.atomic import atomic_output

    if not path.endswith(PARQUET + TFRECORD + NPZ):
        raise ValueError(f"{path!r}: the output must end in .parquet, .tfrecord or .npz")
    with atomic_output(path) as handle:
        if path.endswith(PARQUET):
            import pyarrow as pa
            import pyarrow.parquet as pq

            writer = None
            try:
                for columns in chunks:
                    table = pa.table({name: pa.ListArray.from_arrays(splits, ids)
                                      for name, (ids, splits) in columns.items()})
                    if writer is None:
                        writer = pq.ParquetWriter(handle, table.schema)
                    writer.write_table(table, row_group_size=max(table.num_rows, 1))
            finally:
                if writer is not None:
                    writer.close()
        elif path.endswith(TFRECORD):
            from tpuemb_cfg.planner.inputs import write_tfrecord

            for columns in chunks:
                write_tfrecord(handle, _rows(columns))
        else:
            _write_npz(handle, chunks, batch)


def _write_npz(handle: Any, chunks: Iterable[Columns], batch: int) -> None:
    """np.savez's layout (one ``.npy`` member per array, stored), written member by member."""
    import zipfile

    step = 0
    with zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for columns in chunks:
            rows = len(next(iter(columns.values()))[1]) - 1
            for s in range(rows // batch):
                a, b = s * batch, (s + 1) * batch
                for f, (ids, splits) in enumerate(columns.values()):
                    for key, array in ((f"s{step}/f{f}/ids", ids[splits[a]:splits[b]]),
                                       (f"s{step}/f{f}/row_splits", splits[a:b + 1] - splits[a])):
                        with archive.open(key + ".npy", "w", force_zip64=True) as member:
                            np.lib.format.write_array(member, np.ascontiguousarray(array))
                step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("-o", "--output", required=True,
                        help="FILE.parquet, FILE.tfrecord or FILE.npz")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--exponent", type=float, default=1.2)
    parser.add_argument("--max-bag", type=int, default=1)
    parser.add_argument("--fixed-bags", action="store_true",
                        help="every bag holds the ids per bag the configuration gives (a spec's "
                             "input shapes, MLPerf's multi-hot); others: 1 to --max-bag")
    parser.add_argument("--keras-backend", choices=("jax", "tensorflow"),
                        help="a keras-rs spec's backend: name the columns as tpuemb plan "
                             "--keras-backend does")
    parser.add_argument("--batch", type=int, default=1024, help="rows per step of an .npz")
    parser.add_argument("--row-group", type=int, default=65536,
                        help="rows drawn and written at a time (a Parquet row group)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from tpuemb_cfg.base.errors import TpuembError, printable

    for name in ("rows", "max_bag", "batch", "row_group"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, name)}")
    if not math.isfinite(args.exponent) or args.exponent <= 0:
        parser.error(f"--exponent must be a finite number above 0, got {args.exponent}")
    if os.path.exists(args.output) and os.path.exists(args.config) and \
            os.path.samefile(args.output, args.config):
        parser.error(f"--output {args.output!r} is the configuration itself: choose another file")
    try:
        chunk = args.row_group
        if args.output.endswith(".npz"):  # whole steps per chunk
            chunk = max(args.batch, chunk // args.batch * args.batch)
        schema = schema_of(args.config, args.keras_backend)
        write_chunks(args.output, zipf_chunks(schema, args.rows, chunk, exponent=args.exponent,
                                              max_bag=args.max_bag, seed=args.seed,
                                              fixed_bags=args.fixed_bags), args.batch)
    except (TpuembError, OSError, ValueError) as e:
        print(f"zipf_sample.py: {printable(str(e))}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
