"""``tpuemb plan`` end to end: the gate and its exit codes, the JSON and SARIF shapes, the what-if
table, and the example models (legacy and SparseCore) on small generated Zipf samples, with the
numbers checked against independent computations (spec section 8's host of a row, the exact
preprocessing run directly)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli, zipf_sample

from tpuemb_cfg.planner.planning import Gate, parse_compare, parse_gate

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")
JAX_EXAMPLE = str(ROOT / "examples" / "sparsecore" / "v5p_jax_ranking.py")


ZIPF = zipf_sample()


@pytest.fixture(scope="module")
def quick_sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """Six recorded steps of 64 bags (the configuration's batch is 2 x 64 = 128: merged)."""
    path = tmp_path_factory.mktemp("plan") / "B.npz"
    columns = ZIPF.zipf_columns(ZIPF.schema_of(QUICKSTART), 384, exponent=1.3, max_bag=2)
    ZIPF.write(str(path), columns, 64)
    return str(path), columns


def _json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("plan", *args, "--format", "json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def _hosts_of(ids: np.ndarray, vocabulary: int, hosts: int, mod: bool) -> np.ndarray:
    """Spec section 8 written out again: MOD i mod N; DIV_DEFAULT the first V mod N hosts hold
    ceil(V/N) contiguous rows, the others floor(V/N)."""
    if mod:
        return ids % hosts
    q, r = divmod(vocabulary, hosts)
    first = [h * (q + 1) if h <= r else r * (q + 1) + (h - r) * q for h in range(hosts)]
    return np.searchsorted(np.array(first), ids, side="right") - 1


def test_legacy_load_per_host_matches_spec_section_8(quick_sample: tuple[str, Any]) -> None:
    path, columns = quick_sample
    code, report = _json(QUICKSTART, "--ids", path, "--hosts", "3")
    assert code == 0
    assert report["sample"]["rescaled"] and report["sample"]["batches"] == 3
    assert report["configured_bags"] == {"f0": 128, "f1": 128, "f2": 128, "f3": 128}
    vocab = {"f0": 20000, "f1": 50000, "f2": 50000, "f3": 1000}  # user, item, item, category
    for strategy, mod in (("MOD", True), ("DIV_DEFAULT", False)):
        totals = np.zeros(3, np.int64)
        for name, (ids, _) in columns.items():
            totals += np.bincount(_hosts_of(ids, vocab[name], 3, mod), minlength=3)
        load = report["load"][strategy]
        assert [u["total_ids"] for u in load["units"]] == totals.tolist()
        assert load["imbalance"]["max_over_mean"] == pytest.approx(totals.max() / totals.mean())
        assert load["steps"] == 3
    assert set(report) == {"kind", "sample", "memory", "memory_at_suggested_limits", "load",
                           "primary_layout", "limits", "what_if", "findings", "gate",
                           "configured_bags", "topology"}
    assert report["primary_layout"] == "DIV_DEFAULT"  # quickstart's sharding_strategy
    assert report["limits"] is None and report["gate"] == {"fail_on": "nothing", "failed": []}


def test_what_if_table_puts_host_counts_and_strategies_side_by_side(
        quick_sample: tuple[str, Any]) -> None:
    path, _ = quick_sample
    _, report = _json(QUICKSTART, "--ids", path, "--compare", "hosts=2,4")
    names = [row["name"] for row in report["what_if"]]
    assert names == ["as configured (DIV_DEFAULT)", "MOD", "hosts=2 DIV_DEFAULT", "hosts=2 MOD",
                     "hosts=4 DIV_DEFAULT", "hosts=4 MOD"]
    _, two = _json(QUICKSTART, "--ids", path, "--hosts", "2")
    row = report["what_if"][2]
    assert row["memory_fullest_bytes"] == max(u["total"] for u in two["memory"]["units"])
    assert row["max_over_mean"] == two["load"]["DIV_DEFAULT"]["imbalance"]["max_over_mean"]
    assert row["units"] == 2
    text = run_cli("plan", QUICKSTART, "--ids", path, "--compare", "hosts=2,4").stdout
    assert "what-if:" in text and "hosts=4 MOD" in text and "max/mean" in text


def test_gate_exit_codes_and_sarif_at_the_configuration_fields(
        quick_sample: tuple[str, Any]) -> None:
    path, _ = quick_sample
    failed = run_cli("plan", QUICKSTART, "--ids", path, "--host-memory", "1M", "--fail-on", "oom")
    assert failed.exit_code == 1
    assert "gate: FAILED - oom: host 0 needs 11.6 MiB, more than 1 MiB" in failed.stdout
    assert f"{QUICKSTART}:36:1: error[PLAN001]" in failed.stdout  # table_descriptor[1] "item"
    passed = run_cli("plan", QUICKSTART, "--ids", path, "--host-memory", "1G", "--fail-on", "oom")
    assert passed.exit_code == 0 and "gate: passed" in passed.stdout
    sarif = run_cli("plan", QUICKSTART, "--ids", path, "--host-memory", "1M", "--format",
                    "sarif", "--fail-on", "oom")
    assert sarif.exit_code == 1
    log = json.loads(sarif.stdout)
    run = log["runs"][0]
    (result,) = run["results"]
    assert result["ruleId"] == "PLAN001" and result["level"] == "error"
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 36,
                                                                   "startColumn": 1}
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == \
        "table_descriptor[1]"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "PLAN001"
    for threshold, code in (("1.01", 1), ("100", 0)):
        result = run_cli("plan", QUICKSTART, "--ids", path, "--hosts", "4", "--fail-on",
                         f"imbalance>{threshold}")
        assert result.exit_code == code, result.output


def test_gate_and_compare_parsing() -> None:
    assert parse_gate(["oom,drops", "imbalance > 1.25"]) == Gate(True, True, 1.25)
    assert parse_gate([]) == Gate() and str(parse_gate(["drops"])) == "drops"
    compare = parse_compare(["hosts=2,4", "topology=v6e-8", "stacking", "strategy"])
    assert (compare.hosts, compare.topologies, compare.stacking) == ((2, 4), ("v6e-8",), True)
    from tpuemb_cfg.base.errors import UsageError

    for bad in ("ooms", "imbalance>0.5", "imbalance>x"):
        with pytest.raises(UsageError, match="--fail-on"):
            parse_gate([bad])
    with pytest.raises(UsageError, match="--compare"):
        parse_compare(["hosts=two"])


def test_bad_input_is_one_line_and_exit_2(quick_sample: tuple[str, Any], tmp_path: Path) -> None:
    path, _ = quick_sample
    result = run_cli("plan", QUICKSTART, "--ids", path, "--fail-on", "ooms")
    assert result.exit_code == 2 and "--fail-on 'ooms': expected oom" in result.output
    arrays = dict(np.load(path))
    arrays["s2/f3/ids"] = arrays["s2/f3/ids"] + 1000
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    result = run_cli("plan", QUICKSTART, "--ids", str(bad))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{bad}: key s2/f3: error: id ")
    assert "outside table 'category': ids must be in [0, 1000)" in result.stderr
    assert result.stdout == ""
    result = run_cli("plan", QUICKSTART, "--ids", path, "-o", path)
    assert result.exit_code == 2 and "same file as the input --ids" in result.output


def test_plot_and_report_are_written_atomically(quick_sample: tuple[str, Any],
                                                tmp_path: Path) -> None:
    path, _ = quick_sample
    out, plot = tmp_path / "plan.json", tmp_path / "load.svg"
    result = run_cli("plan", QUICKSTART, "--ids", path, "--hosts", "2", "--format", "json",
                     "-o", str(out), "--plot", str(plot))
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text())["kind"] == "legacy"
    assert plot.read_bytes().startswith(b"<?xml") and b"DIV_DEFAULT" in plot.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load.svg", "plan.json"]


TIGHT_SPEC = '''
from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

topology = "v5p:2"
adagrad = AdagradOptimizerSpec(learning_rate=0.05, initial_accumulator_value=0.1)
clicks = TableSpec(name="clicks", vocabulary_size=4000, embedding_dim=8, initializer=None,
                   optimizer=adagrad, combiner="sum", max_ids_per_partition=4,
                   max_unique_ids_per_partition=4)
feature_specs = {
    "clicks": FeatureSpec(name="clicks", table_spec=clicks, input_shape=[64, 1],
                          output_shape=[64, 8]),
}
'''


def test_sparsecore_drops_equal_the_exact_preprocessing(tmp_path: Path) -> None:
    """A jax-tpu-embedding spec whose limits (4 / 4) are too small for bags of up to 6 ids:
    the drops tpuemb plan reports equal the drops of the exact preprocessing run directly on
    the same batches, the gate fails on them, and the SARIF finding sits at the table's line."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore.feed import stack
    from tpuemb_cfg.sparsecore.preprocessing import preprocess

    spec = tmp_path / "tight.py"
    spec.write_text(TIGHT_SPEC)
    columns = ZIPF.zipf_columns(ZIPF.schema_of(str(spec)), 256, exponent=1.4, max_bag=6, seed=3)
    sample = tmp_path / "day.tfrecord"
    ZIPF.write(str(sample), columns, 64)
    code, report = _json(str(spec), "--ids", str(sample), "--fail-on", "drops")
    assert code == 1 and report["gate"]["failed"][0].startswith("drops: ")
    stacking = stack(load_sparsecore_spec(str(spec)).config)
    ids, splits = columns["clicks"]
    dropped = 0
    for step in range(4):
        a, b = splits[64 * step], splits[64 * (step + 1)]
        batch = preprocess(stacking, {"clicks": (ids[a:b], splits[64 * step:64 * step + 65] - a)},
                           local_devices=2, allow_id_dropping=True)
        dropped += batch.id_drop_count
    (stack_report,) = report["limits"]["stacks"]
    assert dropped > 0 and stack_report["current"]["dropped"] == dropped
    assert stack_report["suggested"]["dropped"] == 0
    assert stack_report["suggested"]["max_ids_per_partition"] % 8 == 0
    from tpuemb_cfg.planner.planning import PlanOptions
    from tpuemb_cfg.session import open_plan

    for compare, passes in ((["hosts=2,4"], 1), (["stacking", "hosts=4"], 2)):
        options = PlanOptions(compare=parse_compare(compare))
        assert open_plan(str(spec), str(sample), options=options).passes == passes
    # a what-if slice as gcloud names it: tpu7x-8 is 4 chips (8 TensorCores), 8 jax devices
    # of 2 SparseCores, one host; v5p-16 is 8 chips on 2 hosts
    _, compared = _json(str(spec), "--ids", str(sample), "--compare", "topology=tpu7x-8,v5p-16")
    assert compared["topology"]["chips"] == 2  # the spec's v5p:2
    slices = [{k: row["slice"][k] for k in ("chips", "devices", "hosts", "sparse_cores")}
              for row in compared["what_if"]]
    assert slices == [{"chips": 2, "devices": 2, "hosts": 1, "sparse_cores": 8},
                      {"chips": 4, "devices": 8, "hosts": 1, "sparse_cores": 16},
                      {"chips": 8, "devices": 8, "hosts": 2, "sparse_cores": 32}]
    assert [row["memory_level"] for row in compared["what_if"]] == ["chip", "device", "chip"]
    sarif = json.loads(run_cli("plan", str(spec), "--ids", str(sample), "--format",
                               "sarif").stdout)
    first = sarif["runs"][0]["results"][0]
    assert first["ruleId"] == "PLAN010"
    assert first["locations"][0]["physicalLocation"]["region"]["startLine"] == 6  # clicks = ...


def test_sparsecore_example_end_to_end_with_stacking_what_if(tmp_path: Path) -> None:
    sample = tmp_path / "day.parquet"
    columns = ZIPF.zipf_columns(ZIPF.schema_of(JAX_EXAMPLE), 2 * 4096, exponent=1.2)
    ZIPF.write(str(sample), columns, 4096)
    result = run_cli("plan", JAX_EXAMPLE, "--ids", str(sample), "--compare", "stacking",
                     "--fail-on", "oom,drops")
    assert result.exit_code == 0, result.output
    text = result.stdout
    # v5p-32 is Cloud TPU's 32 TensorCores: 16 chips of 4 SparseCores, 4 per host
    assert "slice: v5p: 16 chips, 16 devices, 4 hosts, 64 SparseCores" in text
    assert "memory: 16 chip(s)" in text and "load per sparsecore (stacked)" in text
    assert "as configured  stacking off" in text and "rescaled" not in text
    assert "query_user" in text and "gate: passed (--fail-on oom,drops)" in text
    totals = np.zeros(64, np.int64)  # N = 16 chips x 4 SparseCores; rotation of each table
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore.feed import stack

    stacking = stack(load_sparsecore_spec(JAX_EXAMPLE).config)
    rotation = {t.name: t.shard_rotation for s in stacking.stacks for t in s.tables}
    for name, (ids, _) in columns.items():
        totals += np.bincount((ids + rotation[name]) % 64, minlength=64)
    _, report = _json(JAX_EXAMPLE, "--ids", str(sample))
    units = report["load"]["stacked"]["units"]
    assert [u["total_ids"] for u in units] == totals.tolist()


def test_topology_sets_the_hosts_and_progress_lines_without_a_terminal(
        quick_sample: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = quick_sample
    _, report = _json(QUICKSTART, "--ids", path, "--topology", "v5p:16")  # 16 chips / 4 per host
    assert len(report["load"]["MOD"]["units"]) == 4
    from tpuemb_cfg.commands import plan as command

    monkeypatch.setattr(command, "LINE_EVERY", 0.0)
    result = run_cli("plan", QUICKSTART, "--ids", path)
    lines = [line for line in result.stderr.splitlines() if line.startswith("plan: ")]
    assert lines[-1] == "plan: 100% of the sample read (6 of 6 steps)" and len(lines) == 6
    quiet = run_cli("plan", QUICKSTART, "--ids", path, "-q")
    assert quiet.stderr == ""
    result = run_cli("plan", QUICKSTART, "--ids", path, "--topology", "v9-8")
    assert result.exit_code == 2 and "--topology 'v9-8': unknown TPU chip kind" in result.output


def test_library_call_takes_a_prepared_configuration(quick_sample: tuple[str, Any]) -> None:
    from tpuemb_cfg.planner.planning import PlanOptions
    from tpuemb_cfg.session import plan, prepare

    path, _ = quick_sample
    prepared = prepare(QUICKSTART)
    seen: list[int] = []
    result = plan(prepared, path, options=PlanOptions(hosts=2, host_memory_bytes=1 << 20,
                                                      gate=parse_gate(["oom"])),
                  progress=seen.append)
    assert sum(seen) == 6 and result.failed and result.failed[0].startswith("oom: host 0 needs")
    rules = {d.rule: d for d in result.findings}
    assert set(rules) == {"PLAN001", "PLAN021"}  # DIV_DEFAULT on 2 hosts: above 1.5x the mean
    assert (rules["PLAN001"].path, rules["PLAN001"].line) == (QUICKSTART, 36)
