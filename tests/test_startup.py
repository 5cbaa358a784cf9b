"""What the `tpuemb` process loads (docs/performance.md, "Start-up"): a command's help and
`tpuemb validate` load no compute engine or sample reader, and `tpuemb plan` on a SparseCore spec
and a Parquet sample loads neither the executor, pyarrow's compute functions nor the protobuf
message. Each check runs the command as the `tpuemb` process does (``main()`` without arguments,
in a fresh interpreter) and lists the modules it left loaded; nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import zipf_sample

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")
ENGINES = ("numba", "pyarrow", "ray")

#: A keras-rs spec on the jax backend (plain namespaces stand in for keras-rs' objects, as in
#: examples/sparsecore/keras_rs_dcnv2_v6e32.py): its loader also builds a legacy message for
#: validate and simulate, which plan does not need.
KERAS_RS_SPEC = '''
from types import SimpleNamespace as FeatureConfig
from types import SimpleNamespace as TableConfig

topology = "v6e-8"
ADAGRAD = {"class_name": "Adagrad", "config": {"learning_rate": 0.01}}
feature_config = {}
for name, rows, bag in (("user", 5000, 1), ("terms", 800, 3)):
    table = TableConfig(name=name, vocabulary_size=rows, embedding_dim=16, optimizer=ADAGRAD,
                        combiner="sum", placement="sparsecore", max_ids_per_partition=256,
                        max_unique_ids_per_partition=256)
    feature_config[name] = FeatureConfig(name=name, table=table, input_shape=(64, bag),
                                         output_shape=(64, 16))
'''


def _loaded(*args: str, wanted: tuple[str, ...]) -> tuple[int, list[str], str]:
    """Run `tpuemb ARGS` as the process does; the exit status, which of ``wanted`` (modules) it
    loaded, and its standard output."""
    code = (
        "import atexit, json, sys\n"
        f"wanted = {wanted!r}\n"
        "atexit.register(lambda: sys.stderr.write('LOADED ' + json.dumps("
        "[m for m in wanted if m in sys.modules]) + '\\n'))\n"
        f"sys.argv = ['tpuemb', *{list(args)!r}]\n"
        "from tpuemb_cfg.cli import main\n"
        "main(prog_name='tpuemb')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in out.stderr.splitlines() if line.startswith("LOADED ")]
    assert len(lines) == 1, out.stderr
    return out.returncode, json.loads(lines[0][len("LOADED "):]), out.stdout


def test_help_and_validate_load_no_engine_and_no_reader() -> None:
    for args in (("--help",), ("plan", "--help"), ("validate", "--help"),
                 ("simulate", "--help")):
        status, loaded, stdout = _loaded(*args, wanted=ENGINES)
        assert status == 0 and "Usage: tpuemb" in stdout, args
        assert loaded == [], args
    status, loaded, stdout = _loaded("validate", QUICKSTART, wanted=("numpy", *ENGINES))
    assert status == 0 and loaded == [], stdout


def test_plan_on_parquet_loads_neither_the_executor_nor_protobuf(tmp_path: Path) -> None:
    zipf = zipf_sample()
    spec = tmp_path / "keras_rs_small.py"
    spec.write_text(KERAS_RS_SPEC)
    sample = tmp_path / "day.parquet"
    zipf.write(str(sample), zipf.zipf_columns(zipf.schema_of(str(spec)), 128, exponent=1.2,
                                              max_bag=3, seed=5), 64)
    heavy = ("tpuemb_cfg.executor.replay", "tpuemb_cfg.executor.core", "pyarrow.compute",
             "google.protobuf")
    status, loaded, stdout = _loaded("plan", str(spec), "--keras-backend", "jax", "--ids",
                                     str(sample), "-q", wanted=("pyarrow.parquet", *heavy))
    assert status == 0, stdout
    assert "sample: 1 parquet file(s), 2 step(s) of the configured batch" in stdout
    assert loaded == ["pyarrow.parquet"]
