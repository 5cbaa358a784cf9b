"""Write a synthetic sample of ids for ``tpuemb plan``: Zipf-distributed ids (a few hot ids and a
long tail, as real id traffic), one bag per row and feature, as Parquet, TFRecord or a replay
``B.npz``.

    python examples/plan/zipf_sample.py examples/quickstart.pbtxt --rows 4096 -o day.parquet
    tpuemb plan examples/quickstart.pbtxt --ids day.parquet --compare hosts=2,4

    python examples/plan/zipf_sample.py examples/sparsecore/v5p_jax_ranking.py \\
        --rows 12288 -o day.tfrecord

Each bag holds 1 to ``--max-bag`` ids (uniform); id ``k`` of a table of V rows is drawn with
probability proportional to ``1 / (k + 1)^s`` (``--exponent`` s > 1, NumPy's Zipf sampler),
folded into ``[0, V)`` by ``mod V``. The same arguments and ``--seed`` give the same file.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import numpy as np


def schema_of(config: str) -> Any:
    """The features a sample of ``config`` gives (a SparseCore spec or any configuration)."""
    from tpuemb_cfg.planner.inputs import legacy_schema, sparsecore_schema
    from tpuemb_cfg.session import prepare
    from tpuemb_cfg.spec_check import is_sparsecore_spec

    if config.endswith(".py") and is_sparsecore_spec(config):
        from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

        return sparsecore_schema(load_sparsecore_spec(config).config)
    return legacy_schema(prepare(config).plan)


def zipf_columns(schema: Any, rows: int, *, exponent: float = 1.2, max_bag: int = 1,
                 seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per feature, ``rows`` bags: (ids int64, row_splits int64)."""
    rng = np.random.default_rng(seed)
    out = {}
    for feature in schema.features:
        lengths = rng.integers(1, max_bag + 1, size=rows)
        splits = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=splits[1:])
        ids = (rng.zipf(exponent, size=int(splits[-1])) - 1) % feature.vocabulary
        out[feature.name] = (ids.astype(np.int64), splits)
    return out


def _rows(columns: dict[str, tuple[np.ndarray, np.ndarray]]) -> Iterator[dict[str, Any]]:
    rows = len(next(iter(columns.values()))[1]) - 1
    for r in range(rows):
        yield {name: ids[splits[r]:splits[r + 1]].tolist()
               for name, (ids, splits) in columns.items()}


def write(path: str, columns: dict[str, tuple[np.ndarray, np.ndarray]], batch: int) -> None:
    """``columns`` as ``path`` (by extension); an ``.npz`` holds steps of ``batch`` rows."""
    if path.endswith((".parquet", ".pq")):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({name: pa.ListArray.from_arrays(splits, ids)
                          for name, (ids, splits) in columns.items()})
        pq.write_table(table, path)
    elif path.endswith((".tfrecord", ".tfrecords", ".tfr")):
        from tpuemb_cfg.planner.inputs import write_tfrecord

        with open(path, "wb") as handle:
            write_tfrecord(handle, _rows(columns))
    else:
        arrays = {}
        rows = len(next(iter(columns.values()))[1]) - 1
        for step in range(rows // batch):
            a, b = step * batch, (step + 1) * batch
            for f, (ids, splits) in enumerate(columns.values()):
                arrays[f"s{step}/f{f}/ids"] = ids[splits[a]:splits[b]]
                arrays[f"s{step}/f{f}/row_splits"] = splits[a:b + 1] - splits[a]
        np.savez(path, **arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("-o", "--output", required=True,
                        help="FILE.parquet, FILE.tfrecord or FILE.npz")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--exponent", type=float, default=1.2)
    parser.add_argument("--max-bag", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1024, help="rows per step of an .npz")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from tpuemb_cfg.base.errors import TpuembError

    try:
        columns = zipf_columns(schema_of(args.config), args.rows, exponent=args.exponent,
                               max_bag=args.max_bag, seed=args.seed)
        write(args.output, columns, args.batch)
    except (TpuembError, OSError, ValueError) as e:
        raise SystemExit(f"zipf_sample.py: {e}") from None


if __name__ == "__main__":
    main()
