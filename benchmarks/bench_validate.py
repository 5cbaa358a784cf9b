"""Benchmark: `tpuemb validate` versus protobuf's own text parsing on a large configuration.

Generates a 10,000-table, 20,000-feature text configuration (mixed optimizers, dynamic tags,
clipping), then times, best of ``--repeat`` runs each:

* protobuf's text parser alone (``text_format.Parse``), the floor any text validator pays;
* the whole ``tpuemb validate`` pipeline in-process: read + parse, derive, run every default
  rule, locate the fields of the findings, sort, format as text; once on the clean file and once
  on a copy with 10 errors spread over it (only the elements with findings are scanned for
  positions) and on a copy with an error in every table (every table is scanned);
* the same pipeline on the binary encoding (no text positions);
* ``tpuemb validate`` of a small file as a subprocess (start-up time, what a pre-commit hook pays),
  and whether it imported NumPy.

The target is ``validate / parse < 2``. Run: ``python benchmarks/bench_validate.py``.
This is not a test; it prints figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ALGORITHMS = [
    "adagrad { }",
    "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }",
    "ftrl { l1: 0.001 l2: 0.01 lr_power: -0.5 multiply_linear_by_lr: true }",
    "stochastic_gradient_descent { }",
    "momentum { momentum: 0.9 }",
]


def generate(tables: int, features: int, broken: int = 0) -> str:
    """A feature-descriptor configuration in protobuf text format.

    Clean (no error or warning) unless ``broken`` > 0: then that many tables get dimension 0
    (TBL006), spread over the file, so positions must be found.
    """
    out: list[str] = []
    step = max(tables // broken, 1) if broken else 0
    for t in range(tables):
        algorithm = ALGORITHMS[t % len(ALGORITHMS)]
        dynamic = t % 2 or algorithm.startswith("adam")
        # One tag per algorithm: tables with equal optimizers share a tag (no TAG006 advice).
        lr = f"dynamic {{ tag: {t % len(ALGORITHMS)} }}" if dynamic else "constant: 0.01"
        dimension = 0 if broken and t % step == 0 and t // step < broken else 8 * (1 + t % 8)
        out.append(
            "table_descriptor {\n"
            f'  name: "table_{t}"\n'
            f"  vocabulary_size: {1000 + t}\n"
            f"  dimension: {dimension}\n"
            "  optimization_parameters {\n"
            f"    learning_rate {{ {lr} }}\n"
            f"    {algorithm}\n"
            "    gradient_clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }\n"
            "    gradient_accumulation_status: ENABLED\n"
            "  }\n"
            "}\n"
        )
    for j in range(features):
        out.append(
            "feature_descriptor {\n"
            f'  name: "feature_{j}"\n'
            f"  table_id: {j % tables}\n"
            "  input_shape: 128\n"
            "}\n"
        )
    out.append("mode: TRAINING\nnum_hosts: 16\nnum_tensor_cores: 64\n")
    return "".join(out)


def best_of(repeat: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from google.protobuf import text_format

    from tpuemb_cfg import TPUEmbeddingConfiguration
    from tpuemb_cfg.formats.io import read_source
    from tpuemb_cfg.validation.report import FileReport, render
    from tpuemb_cfg.validation.validator import selected_rules, validate_source

    text = generate(args.tables, args.features)
    rules = selected_rules()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.pbtxt"
        path.write_text(text)
        broken = Path(folder) / "broken.pbtxt"
        broken.write_text(generate(args.tables, args.features, broken=10))
        everywhere = Path(folder) / "everywhere.pbtxt"
        everywhere.write_text(generate(args.tables, args.features, broken=args.tables))
        binary = Path(folder) / "big.binpb"
        config = TPUEmbeddingConfiguration()
        text_format.Parse(text, config)
        binary.write_bytes(config.SerializeToString())
        small = Path(folder) / "small.pbtxt"
        small.write_text(generate(5, 6))

        def parse() -> None:
            text_format.Parse(path.read_text(), TPUEmbeddingConfiguration())

        def pipeline(file: Path) -> Callable[[], None]:
            def run() -> None:
                source = read_source(str(file))
                found = validate_source(source, rules)
                render("text", [FileReport(str(file), found)])

            return run

        found = validate_source(read_source(str(path)), rules)
        found_broken = validate_source(read_source(str(broken)), rules)
        t_parse = best_of(args.repeat, parse)
        t_validate = best_of(args.repeat, pipeline(path))
        t_broken = best_of(args.repeat, pipeline(broken))
        t_everywhere = best_of(args.repeat, pipeline(everywhere))
        t_binary = best_of(args.repeat, pipeline(binary))

        probe = (
            "import sys, runpy; sys.argv = ['tpuemb', 'validate', sys.argv[1]]\n"
            "try:\n    runpy.run_module('tpuemb_cfg', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "sys.stderr.write('numpy imported: %s\\n' % ('numpy' in sys.modules))\n"
        )
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", probe, str(small)], capture_output=True, text=True, check=False
        )
        t_small = time.perf_counter() - start

    size_mb = len(text.encode()) / 1e6
    print(f"config: {args.tables} tables, {args.features} features, {size_mb:.1f} MB of text")
    print(f"diagnostics: clean file {len(found)}, broken file {len(found_broken)}")
    print(f"protobuf text_format.Parse:           {t_parse:8.3f} s")
    print(f"tpuemb validate (text, clean file):   {t_validate:8.3f} s")
    print(f"  ratio validate / parse:             {t_validate / t_parse:8.2f}  (goal < 2)")
    print(f"tpuemb validate (text, 10 errors):    {t_broken:8.3f} s")
    print(f"  ratio validate / parse:             {t_broken / t_parse:8.2f}  (goal < 2)")
    print(f"tpuemb validate (an error per table): {t_everywhere:8.3f} s")
    print(f"  ratio validate / parse:             {t_everywhere / t_parse:8.2f}  (goal < 2)")
    print(f"tpuemb validate (binary, in-process): {t_binary:8.3f} s")
    print(f"tpuemb validate small file (process): {t_small:8.3f} s  ({proc.stderr.strip()})")


if __name__ == "__main__":
    main()
