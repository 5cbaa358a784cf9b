"""Issue 33 ("Safety, round three"), ``tpuemb plan``: each defect as the user met it.

Outputs onto files inside an --ids folder, corrupt Parquet, out-of-range options, ``--plot
.png``, empty SparseCore batches, sizes past C++ ints, unbounded samples and counts, TFRecord
lengths that look like gzip, compare variants checked before the sample is read, errors at the
user's row or record, ``PlanOptions`` checked when made, and extra sample columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli
from test_plan_cli import QUICKSTART, TIGHT_SPEC, ZIPF


def _sample(path: Path, rows: int = 256, batch: int = 64) -> dict[str, Any]:
    """A Zipf sample of the quickstart configuration's features written to ``path``."""
    columns = ZIPF.zipf_columns(ZIPF.schema_of(QUICKSTART), rows, exponent=1.3, max_bag=2)
    ZIPF.write(str(path), columns, batch)
    return dict(columns)


def _one_line_exit_2(result: Any) -> str:
    """The error of a refused run: exit 2, one line on stderr, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.output
    assert "Traceback" not in result.output
    return str(result.stderr)


# --------------------------------------------------------------------------------------------
# 1. -o naming a sample file inside the --ids folder


def test_output_onto_a_file_inside_the_ids_folder_is_refused(tmp_path: Path) -> None:
    day = tmp_path / "day"
    day.mkdir()
    part = day / "part-1.parquet"
    _sample(part)
    before = part.read_bytes()
    result = run_cli("plan", QUICKSTART, "--ids", str(day), "-o", str(part))
    error = _one_line_exit_2(result)
    assert error.startswith(f"refusing to write -o {part}: it is the same file as the input --ids")
    assert part.read_bytes() == before
    result = run_cli("plan", QUICKSTART, "--ids", str(day), "-o", str(day / "plan.txt"))
    assert result.exit_code == 0, result.output  # a new file in the folder is no sample file
    assert (day / "plan.txt").read_text().startswith("sample: 1 parquet file(s), 2 step(s)")


# --------------------------------------------------------------------------------------------
# 4. --plot .png refused before the sample is read


def test_plot_without_a_name_is_refused_before_reading(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _sample(tmp_path / "day.parquet")
    from tpuemb_cfg.planner import inputs

    def never(*args: object) -> None:
        raise AssertionError("the sample was read")

    monkeypatch.setitem(inputs._READERS, "parquet", never)
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", "day.parquet", "--plot", ".png"))
    assert "'.png' is a file name without an extension" in error


def _never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make reading any sample fail the test: what is checked must be checked before."""
    from tpuemb_cfg.planner import inputs

    def never(*args: object) -> None:
        raise AssertionError("the sample was read")

    for fmt in ("npz", "parquet", "tfrecord"):
        monkeypatch.setitem(inputs._READERS, fmt, never)


# --------------------------------------------------------------------------------------------
# 2, 10. A corrupt Parquet data page, two columns of one name: one line, at the row group


def _parquet(path: Path, **options: Any) -> None:
    """The four quickstart features, 4096 rows of two ids each (ids below every vocabulary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.array([[i % 97, (i * 7) % 50] for i in range(4096)], pa.list_(pa.int64()))
    pq.write_table(pa.table({n: ids for n in ("f0", "f1", "f2", "f3")}), str(path), **options)


def test_corrupt_parquet_page_is_named_at_its_row_group(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "day.parquet"
    _parquet(path, compression="snappy", row_group_size=2048, use_dictionary=False)
    chunk = pq.ParquetFile(str(path)).metadata.row_group(1).column(2)
    data = bytearray(path.read_bytes())
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle:middle + 16] = b"\xff" * 16  # inside the snappy data of row group 1, column f2
    path.write_bytes(bytes(data))
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", str(path)))
    assert error.startswith(f"{path}: row group 1 (rows 2048 to 4095), column f2: error: cannot "
                            "read the data (Corrupt snappy compressed data")


def test_two_columns_of_one_name_are_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "day.parquet"
    ids = pa.array([[1, 2]] * 8, pa.list_(pa.int64()))
    pq.write_table(pa.Table.from_arrays([ids] * 5, names=["f0", "f1", "f2", "f3", "f1"]),
                   str(path))
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", str(path)))
    assert error.startswith(f"{path}: column f1: error: 2 columns are named 'f1'")


# --------------------------------------------------------------------------------------------
# 3. --quantile and --headroom in their ranges


@pytest.mark.parametrize(("option", "value"), [
    ("--quantile", "nan"), ("--quantile", "0"), ("--headroom", "nan"), ("--headroom", "inf"),
    ("--headroom", "1e308"), ("--headroom", "1e12"), ("--headroom", "0.5")])
def test_quantile_and_headroom_out_of_range_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, value: str) -> None:
    _sample(tmp_path / "day.parquet")
    _never_read(monkeypatch)
    result = run_cli("plan", QUICKSTART, "--ids", str(tmp_path / "day.parquet"), option, value)
    assert result.exit_code == 2 and result.stdout == ""
    assert f"Invalid value for '{option}': " in result.stderr
    assert ("is not in (0, 1]" if option == "--quantile" else "is not in [1, 10]") in \
        result.stderr


# --------------------------------------------------------------------------------------------
# 6. Sizes past C++ ints


def test_vocabulary_of_2_63_minus_1_rows_is_planned(tmp_path: Path) -> None:
    config = tmp_path / "max.pbtxt"
    config.write_text(Path(QUICKSTART).read_text().replace(
        "vocabulary_size: 20000", f"vocabulary_size: {2**63 - 1}"))
    columns = _sample(tmp_path / "day.parquet", rows=256)
    for hosts in ("1", "3"):
        result = run_cli("plan", str(config), "--ids", str(tmp_path / "day.parquet"),
                         "--hosts", hosts, "--format", "json")
        assert result.exit_code == 0, result.output
        import json

        load = json.loads(result.stdout)["load"]["DIV_DEFAULT"]
        # 2^63 - 1 rows over 1 or 3 hosts: every sampled id of the user table (< 20,000) is
        # in the first host's share; the other tables (50,000 and 1,000 rows) keep theirs
        total = sum(len(ids) for ids, _ in columns.values())
        assert sum(u["total_ids"] for u in load["units"]) == total
        if hosts == "1":
            assert [u["total_ids"] for u in load["units"]] == [total]


def test_simulate_refuses_a_table_past_4_eib_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "max.pbtxt"
    config.write_text(Path(QUICKSTART).read_text().replace(
        "vocabulary_size: 20000", f"vocabulary_size: {2**63 - 1}"))
    error = _one_line_exit_2(run_cli("simulate", str(config), "--steps", "1"))
    assert error.startswith("the simulation needs about ")
    assert "EiB" in error and "more than this machine has" in error


# --------------------------------------------------------------------------------------------
# 7. Counts bounded by memory, samples bounded before they are decompressed

GIB = 1 << 30


@pytest.mark.parametrize(("args", "label"), [
    (("--hosts", "999999999999"), "--hosts 999999999999: 999,999,999,999 hosts"),
    (("--hosts", "1000000"), "--hosts 1000000: 1,000,000 hosts"),
    # KIND:N is N chips (v5p: 4 chips a host): 99,999,999,999 chips on 25,000,000,000 hosts
    (("--topology", "v5p:99999999999"), "--topology v5p:99999999999: 25,000,000,000 hosts"),
    (("--compare", "hosts=100000000"), "--compare hosts=100000000: 100,000,000 hosts")])
def test_counts_beyond_memory_are_refused_naming_the_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...],
        label: str) -> None:
    from tpuemb_cfg.formats import limits

    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 8 * GIB)
    _sample(tmp_path / "day.parquet")
    _never_read(monkeypatch)
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", str(tmp_path / "day.parquet"),
                                     *args))
    assert error.startswith(label + " would need about ")
    assert "more than the 6.4 GiB a plan may use here" in error
    # the largest count it names is planned (its load counts fit), one more is not
    most = int(error.split("at most ")[1].split()[0].replace(",", ""))
    assert 1000 < most < 1000000


def test_parquet_bomb_is_refused_from_its_metadata(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tpuemb_cfg.formats import limits

    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 80 << 20)
    path = tmp_path / "bomb.parquet"
    bag = pa.array([[0] * (1 << 20)], pa.list_(pa.int64()))  # one bag of 2^20 ids per feature
    pq.write_table(pa.table({n: bag for n in ("f0", "f1", "f2", "f3")}), str(path))
    assert path.stat().st_size < 4096
    _never_read(monkeypatch)
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", str(path)))
    # 4 columns x (2^20 ids + 1 row) x 8 bytes (32 MiB), from the metadata, against a quarter
    # of 80% of 80 MiB (16 MiB)
    assert error.startswith(f"{path}: row group 0 (rows 0 to 0): error: the configured columns "
                            "of this row group take 32 MiB once decompressed")
    assert "more than the memory one read may take here (1/4 of 80% of the memory available) " \
           "of 16 MiB; nothing was decompressed" in error


def test_npz_bomb_is_refused_from_its_headers(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuemb_cfg.formats import limits

    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 80 << 20)
    arrays: dict[str, np.ndarray] = {}
    for f in range(4):
        n = (1 << 21) if f == 2 else 128  # s0/f2: 16 MiB of zeros, compressed to kilobytes
        arrays[f"s0/f{f}/ids"] = np.zeros(n, np.int64)
        arrays[f"s0/f{f}/row_splits"] = np.linspace(0, n, 129).astype(np.int64)
    path = tmp_path / "B.npz"
    np.savez_compressed(path, **arrays)
    assert path.stat().st_size < 100_000
    _never_read(monkeypatch)
    error = _one_line_exit_2(run_cli("plan", QUICKSTART, "--ids", str(path)))
    assert error.startswith(f"{path}: key s0/f2/ids: error: the arrays of the file take ")
    assert "more than the memory one read may take here (1/4 of 80% of the memory available) " \
           "of 16 MiB" in error


# --------------------------------------------------------------------------------------------
# 8. A TFRecord whose first length starts 1f 8b is no gzip file


def test_tfrecord_of_35615_bytes_first_record_is_read(tmp_path: Path) -> None:
    import gzip
    import io

    from tpuemb_cfg.planner.inputs import (
        SampleError,
        SampleFeature,
        SampleSchema,
        open_sample,
        write_tfrecord,
    )

    schema = SampleSchema((SampleFeature("f0", "a", 100, 1),))
    for n in range(35000, 35700):  # ids of one byte each: find the bag giving 35,615 bytes
        out = io.BytesIO()
        write_tfrecord(out, [{"f0": [1] * n}, {"f0": [2]}])
        data = out.getvalue()
        if int.from_bytes(data[:8], "little") == 35615:
            break
    assert data[:2] == b"\x1f\x8b"  # 35,615 = 0x8b1f, little-endian
    path = tmp_path / "day.tfrecord"
    path.write_bytes(data)
    batches = list(open_sample(str(path), schema))
    assert [b["f0"].values.tolist() for b in batches] == [[1] * n, [2]]
    path.write_bytes(gzip.compress(data))
    with pytest.raises(SampleError, match="a gzip-compressed file"):
        open_sample(str(path), schema)


# --------------------------------------------------------------------------------------------
# 9. What-if variants checked before the sample is read, naming the option

def _tight(batch: int) -> str:
    """test_plan_cli's jax-tpu-embedding spec (v5p-2) with a global batch of ``batch``."""
    return TIGHT_SPEC.replace("[64, 1]", f"[{batch}, 1]").replace("[64, 8]", f"[{batch}, 8]")


def test_compare_topology_is_checked_before_reading(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "tight.py"
    spec.write_text(_tight(64))
    columns = ZIPF.zipf_columns(ZIPF.schema_of(str(spec)), 256, exponent=1.3, max_bag=3)
    ZIPF.write(str(tmp_path / "day.parquet"), columns, 64)
    _never_read(monkeypatch)
    error = _one_line_exit_2(run_cli("plan", str(spec), "--ids", str(tmp_path / "day.parquet"),
                                     "--compare", "topology=v5p:3"))
    # v5p: 4 SparseCores per chip (spec/sparsecore.md), 3 chips: 12, no power of two
    assert error.startswith("--compare topology=v5p:3: the slice has 12 SparseCores (3 chips "
                            "x 4)") and "power of two" in error
    spec.write_text(_tight(12))
    error = _one_line_exit_2(run_cli("plan", str(spec), "--ids", str(tmp_path / "day.parquet")))
    # a global batch of 12 over 2 chips x 4 SparseCores, at the line building the feature
    line = next(i for i, text in enumerate(_tight(12).splitlines(), 1)
                if '"clicks": FeatureSpec(' in text)
    assert error.startswith(f"{spec}:{line}:1: error: feature 'clicks' has a global batch of 12 "
                            "bags, which does not divide by the 8 SparseCores (2 chips x 4)")
    error = _one_line_exit_2(run_cli("plan", str(spec), "--ids", str(tmp_path / "day.parquet"),
                                     "--topology", "v5p-8"))
    assert error.startswith("--topology v5p-8: feature 'clicks' has a global batch of 12 bags, "
                            "which does not divide by the 16 SparseCores (4 chips x 4)")


# --------------------------------------------------------------------------------------------
# 11. PlanOptions checked when made, naming the field


def test_plan_options_are_checked_by_field(tmp_path: Path) -> None:
    from tpuemb_cfg.planner.planning import Compare, Gate, PlanOptions, parse_gate
    from tpuemb_cfg.session import plan

    options = PlanOptions(host_memory_bytes="8G", gate="oom,drops", compare=["hosts=2,4"])
    assert options.host_memory_bytes == 8 * GIB  # 8 x 2^30 (units.py: binary units)
    assert options.gate == Gate(oom=True, drops=True)
    assert options.compare == Compare(hosts=(2, 4))
    for kwargs, error, words in (
            ({"host_memory_bytes": 1.5}, TypeError, "PlanOptions.host_memory_bytes=1.5"),
            ({"gate": 3}, TypeError, "PlanOptions.gate: expected a Gate"),
            ({"quantile": float("nan")}, ValueError, "PlanOptions.quantile: nan is not in"),
            ({"headroom": 1e12}, ValueError, "PlanOptions.headroom: 1000000000000.0 is not in"),
            ({"hosts": "4"}, TypeError, "PlanOptions.hosts: expected a whole number"),
            ({"hosts": 0}, ValueError, "PlanOptions.hosts: expected at least 1 host")):
        with pytest.raises(error, match=words.replace("(", r"\(")):
            PlanOptions(**kwargs)
    from tpuemb_cfg.base.errors import UsageError

    with pytest.raises(UsageError) as info:
        parse_gate("oom,dropz")
    assert str(info.value) == ("--fail-on 'oom,dropz': expected oom, drops or imbalance>X, "
                               "comma-separated (e.g. --fail-on oom,drops,imbalance>1.3); "
                               "'dropz' is none of them")
    assert parse_gate("oom") == Gate(oom=True)
    _sample(tmp_path / "day.parquet")
    result = plan(QUICKSTART, str(tmp_path / "day.parquet"), options={"hosts": 2, "gate": "oom"})
    assert result.gate == Gate(oom=True) and len(result.load["MOD"].units) == 2
    with pytest.raises(TypeError, match="options: unknown field"):
        plan(QUICKSTART, str(tmp_path / "day.parquet"), options={"host": 2})


# --------------------------------------------------------------------------------------------
# 5. A feature with a batch of 0 rows


def test_a_feature_with_an_empty_batch_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "zero.py"
    spec.write_text(TIGHT_SPEC.replace("output_shape=[64, 8]", "output_shape=[0, 8]"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"clicks": pa.array([[1, 2]] * 64, pa.list_(pa.int64()))}),
                   str(tmp_path / "day.parquet"))
    error = _one_line_exit_2(run_cli("plan", str(spec), "--ids", str(tmp_path / "day.parquet")))
    # the spec's front door refuses it at the line that built the feature, before any reading
    line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1)
                if "FeatureSpec(name=\"clicks\"" in text)
    assert error.startswith(f"{spec}:{line}:") and "`output_shape[0]` must be at least 1" in error


# --------------------------------------------------------------------------------------------
# 12. Extra columns, features and feature indexes: ignored in every format, listed once


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "npz"])
def test_extra_sample_columns_are_ignored_and_listed(tmp_path: Path, fmt: str) -> None:
    import json

    columns = ZIPF.zipf_columns(ZIPF.schema_of(QUICKSTART), 256, exponent=1.3, max_bag=2)
    plain, extra = tmp_path / f"plain.{fmt}", tmp_path / f"extra.{fmt}"
    ZIPF.write(str(plain), columns, 64)
    # a label per row (Parquet, TFRecord); a fifth feature index f4 (B.npz: the replay keys)
    ZIPF.write(str(extra), {**columns, ("f4" if fmt == "npz" else "label"): columns["f3"]}, 64)
    reports = []
    for path in (plain, extra):
        result = run_cli("plan", QUICKSTART, "--ids", str(path), "--format", "json")
        assert result.exit_code == 0, result.output
        reports.append(json.loads(result.stdout))
    assert reports[1]["sample"]["ignored"] == ["f4" if fmt == "npz" else "label"]
    assert reports[0]["sample"]["ignored"] == []
    for report in reports:
        report["sample"].pop("ignored")
        report["sample"].pop("files")
    assert reports[0] == reports[1]  # the same plan, the extra column unread
    text = run_cli("plan", QUICKSTART, "--ids", str(extra)).stdout
    what = {"parquet": "column(s) label", "tfrecord": "feature(s) label",
            "npz": "feature index(es) f4"}[fmt]
    assert f"  ignored: {what} (no configured feature)\n" in text


def test_sparsecore_hosts_beyond_memory_are_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuemb_cfg.formats import limits

    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 8 * GIB)
    spec = tmp_path / "tight.py"
    spec.write_text(_tight(64))
    columns = ZIPF.zipf_columns(ZIPF.schema_of(str(spec)), 128, exponent=1.3, max_bag=3)
    ZIPF.write(str(tmp_path / "day.parquet"), columns, 64)
    _never_read(monkeypatch)
    for args, label in ((("--hosts", "1000000"), "--hosts 1000000: 1,000,000 hosts"),
                        (("--compare", "hosts=2,100000000"),
                         "--compare hosts=100000000: 100,000,000 hosts"),
                        # v5p-N counts TensorCores: 2,097,152 chips x 4 SparseCores
                        (("--compare", "topology=v5p-4194304"),
                         "--compare topology=v5p-4194304: 8,388,608 SparseCores")):
        error = _one_line_exit_2(run_cli("plan", str(spec), "--ids",
                                         str(tmp_path / "day.parquet"), *args))
        assert error.startswith(label + " would need about "), error
