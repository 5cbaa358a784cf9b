"""``tpuemb plan`` and the SparseCore specs under random configurations, samples and options.

The companion of ``tests/test_cli_properties.py`` (whose fork server, environment and folder
snapshot it uses) for the surfaces added since: each example builds a fresh folder with a
configuration (a legacy message, a TensorFlow, jax-tpu-embedding or keras-rs SparseCore spec,
or one of them made odd: a byte-order mark, an escape sequence in a name, sizes past C++'s
integers, a raising limit callable, both spec kinds at once), a sample of ids in one format
(replay ``B.npz``, Parquet, TFRecord; valid, with extra columns or keys, damaged, truncated,
compressed, a decompression bomb, a folder of parts) and a draw of plan's options (quantile,
headroom, hosts, topology, ``--compare``, ``--fail-on``, the report's format, an output file
new, onto the sample, inside the sample's folder or in a read-only folder, a plot path), plus a
SparseCore command (``validate``, ``inspect``, ``compile --sparsecore``) on the same
configuration. Properties, whatever happened:

- no traceback, and the exit status is one the documentation gives (0, 1, 2);
- no raw control byte from a name or an option reaches the output (ESC, BEL, C1 controls);
- no input changed (the configuration, every sample file), whatever the output path;
- a failed command (exit 2) leaves no file behind; any other creates only its outputs.

Profiles as in ``test_cli_properties.py`` (docs/testing.md): 50 examples in the default
profile (what ``pytest`` and CI run), 10,000 in the long one, run before a release:

    TPUEMB_TEST_PROFILE=long .venv/bin/python -m pytest -q tests/test_cli_properties_plan.py
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import derandomized, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_properties import ForkServer, _snapshot

EXAMPLES_COUNT = examples(50, long=10_000)
MEMORY_CAP = 6 << 30
DOCUMENTED_EXITS = {0, 1, 2}
ESC = "\x1b]0;pwned\x07\x1b[31m\u009b2J\u009d0;x\u009c"

LEGACY = """table_descriptor {
  name: "t"
  vocabulary_size: VOCAB
  dimension: 4
  optimization_parameters {
    adagrad { }
    learning_rate { constant: 0.1 }  # tpuemb: disable=OPT010
  }
}
feature_descriptor { name: "f0" table_id: 0 input_shape: 8 }
mode: TRAINING
num_hosts: 1
num_tensor_cores: 1
"""
TF_SPEC = """from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig
t = TableConfig(vocabulary_size=VOCAB, dim=8, optimizer=SGD(learning_rate=0.1), name=NAME)
feature_config = {"f0": FeatureConfig(t, output_shape=[SHAPE])}
topology = "v6e-4"
"""
JAX_SPEC = """from tpuemb_cfg.sparsecore.jte import FeatureSpec, SGDOptimizerSpec, TableSpec
t = TableSpec(name=NAME, vocabulary_size=VOCAB, embedding_dim=8, initializer=None,
              optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = {"f0": FeatureSpec(name="f0", table_spec=t, input_shape=[SHAPE, 1],
                                   output_shape=[SHAPE, 8])}
topology = "v6e-4"
STACK_LIMITS
"""
#: keras-rs 0.4.0's TableConfig/FeatureConfig as the API tests' spec file stands them in (its
#: first 25 lines), then one table of the names and sizes drawn.
KERAS_SPEC = "".join(
    (Path(__file__).parent / "data" / "sparsecore" / "api_keras_rs_spec.py").read_text()
    .splitlines(keepends=True)[:25]) + """
t = TableConfig(NAME, VOCAB, 8, optimizer="sgd", combiner="sum", placement="sparsecore")
feature_config = {"f0": FeatureConfig("f0", t, (SHAPE, 1), (SHAPE, 8))}
topology = "v6e-4"
"""


def _spec(template: str, *, name: str = '"t"', vocab: str = "100", shape: str = "32",
          limits: str = "") -> str:
    return (template.replace("NAME", name).replace("VOCAB", vocab).replace("SHAPE", shape)
            .replace("STACK_LIMITS", limits))


RAISING = ("def stack_to_max_ids_per_partition(name, samples):\n"
           "    raise RuntimeError('no limit')\n")
NOT_CALLABLE = "stack_to_max_ids_per_partition = 7\n"
RETURNS_NONE = "def stack_to_max_unique_ids_per_partition(name, samples):\n    return None\n"

#: name -> (text, extension)
CONFIGS: dict[str, tuple[bytes, str]] = {
    "legacy": (LEGACY.replace("VOCAB", "100").encode(), ".pbtxt"),
    "legacy-huge-vocab": (LEGACY.replace("VOCAB", str(2**63 - 1)).encode(), ".pbtxt"),
    "legacy-escaped": (LEGACY.replace("VOCAB", "100").replace(
        'name: "t"', 'name: "t\\033]0;pwned\\007\\302\\233"').encode(), ".pbtxt"),
    "tf": (_spec(TF_SPEC).encode(), ".py"),
    "tf-bom": (b"\xef\xbb\xbf" + _spec(TF_SPEC).encode(), ".py"),
    "tf-escaped-name": (_spec(TF_SPEC, name=repr("t" + ESC)).encode(), ".py"),
    "tf-huge-vocab": (_spec(TF_SPEC, vocab="2**70").encode(), ".py"),
    "tf-empty-shape": (_spec(TF_SPEC, shape="0").encode(), ".py"),
    "tf-odd-batch": (_spec(TF_SPEC, shape="31").encode(), ".py"),
    "jax": (_spec(JAX_SPEC).encode(), ".py"),
    "jax-negative-vocab": (_spec(JAX_SPEC, vocab="-5").encode(), ".py"),
    "jax-string-vocab": (_spec(JAX_SPEC, vocab='"1000"').encode(), ".py"),
    "jax-name-int": (_spec(JAX_SPEC, name="5").encode(), ".py"),
    "jax-raising-limit": (_spec(JAX_SPEC, limits=RAISING).encode(), ".py"),
    "jax-limit-not-callable": (_spec(JAX_SPEC, limits=NOT_CALLABLE).encode(), ".py"),
    "jax-limit-none": (_spec(JAX_SPEC, limits=RETURNS_NONE).encode(), ".py"),
    "both-kinds": ((_spec(TF_SPEC) + "\n" + _spec(JAX_SPEC).replace(
        "from tpuemb_cfg.sparsecore.jte import", "from tpuemb_cfg.sparsecore.jte import")
        .replace("t = TableSpec", "u = TableSpec").replace("table_spec=t", "table_spec=u"))
        .encode(), ".py"),
    "self-containing": ((_spec(TF_SPEC) + 'feature_config["again"] = feature_config\n')
                        .encode(), ".py"),
    "keras-rs": (_spec(KERAS_SPEC).encode(), ".py"),
    "keras-rs-bad-vocab": (_spec(KERAS_SPEC, vocab="2**40 * 2**40").encode(), ".py"),
    "garbage": (b"\x00\xff not a configuration {", ".pbtxt"),
}


def _bags(rng: np.random.Generator, rows: int, vocab: int = 100) -> list[list[int]]:
    return [rng.integers(0, vocab, int(rng.integers(0, 4))).tolist() for _ in range(rows)]


def _npz_bytes(bags: list[list[int]], *, extra: bool = False, drop_splits: bool = False) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    for s in range(len(bags) // 32):
        part = bags[32 * s:32 * s + 32]
        arrays[f"s{s}/f0/ids"] = np.array(sum(part, []), dtype=np.int64)
        if not drop_splits:
            arrays[f"s{s}/f0/row_splits"] = np.cumsum([0] + [len(b) for b in part])
    if extra:
        arrays["labels"] = np.zeros(3)
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def _npz_bomb() -> bytes:
    """A member whose header declares 2^31 int64 ids (16 GiB) and holds a few bytes."""
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2147483648,), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    body = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(64)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("s0/f0/ids.npy", body)
        archive.writestr("s0/f0/row_splits.npy", body)
    return out.getvalue()


def _parquet_bytes(columns: dict[str, object], compression: str = "snappy") -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n.split("#")[0] for n in columns]
    table = pa.Table.from_arrays(list(columns.values()), names=names)  # type: ignore[arg-type]
    out = io.BytesIO()
    pq.write_table(table, out, compression=compression)
    return out.getvalue()


def _parquet(kind: str, bags: list[list[int]]) -> bytes:
    import pyarrow as pa

    ids = pa.array(bags, pa.list_(pa.int64()))
    if kind == "extra":
        return _parquet_bytes({"f0": ids, "label": pa.array([0.5] * len(bags))})
    if kind == "duplicate":
        return _parquet_bytes({"f0": ids, "f0#2": ids})
    if kind == "strings":
        return _parquet_bytes({"f0": pa.array([str(b) for b in bags])})
    if kind == "escaped-column":
        return _parquet_bytes({"f0": ids, "x" + ESC: ids})
    if kind == "bomb":  # one bag of 2^22 zeros: 32 MiB of ids in a few KiB
        return _parquet_bytes({"f0": pa.array([[0] * (1 << 22)], pa.list_(pa.int64()))})
    data = bytearray(_parquet_bytes({"f0": ids}))
    if kind == "corrupt":  # bytes inside the first data page flipped
        for i in range(8, min(len(data) - 8, 60)):
            data[i] ^= 0x5A
    elif kind == "truncated":
        del data[len(data) // 2:]
    return bytes(data)


def _tfrecord(kind: str, bags: list[list[int]]) -> bytes:
    from tpuemb_cfg.planner.inputs import write_tfrecord

    out = io.BytesIO()
    write_tfrecord(out, [{"f0": b} for b in bags])
    data = bytearray(out.getvalue())
    if kind == "bad-crc":
        data[20] ^= 0xFF
    elif kind == "truncated":
        del data[len(data) - 7:]
    elif kind == "gzip":
        return gzip.compress(bytes(data))
    elif kind == "huge-length":
        data[:8] = struct.pack("<Q", 2**63 - 5)
    return bytes(data)


SAMPLES = ("npz", "npz-extra", "npz-no-splits", "npz-bomb", "npz-garbage", "parquet",
           "parquet-extra", "parquet-duplicate", "parquet-strings", "parquet-escaped-column",
           "parquet-bomb", "parquet-corrupt", "parquet-truncated", "tfrecord",
           "tfrecord-bad-crc", "tfrecord-truncated", "tfrecord-gzip", "tfrecord-huge-length",
           "empty-parquet")
EXTENSION = {"npz": ".npz", "parquet": ".parquet", "tfrecord": ".tfrecord", "empty": ".parquet"}


def _sample(kind: str, seed: int) -> tuple[bytes, str]:
    bags = _bags(np.random.default_rng(seed), 128)
    family, _, variant = kind.partition("-")
    ext = EXTENSION[family]
    if family == "npz":
        if variant == "bomb":
            return _npz_bomb(), ext
        if variant == "garbage":
            return bytes(range(256)) * 4, ext
        return _npz_bytes(bags, extra=variant == "extra", drop_splits=variant == "no-splits"), ext
    if family == "parquet":
        return _parquet(variant, bags), ext
    if family == "tfrecord":
        return _tfrecord(variant, bags), ext
    return b"", ext


HOSTS = (None, "1", "3", "1000000", "999999999999", "-1", "x")
TOPOLOGIES = (None, "v6e-4", "v5p-8", "v6e:8", "v5p-3", "v5p-99999999999", "tpu7x-4", "v6e-0",
              "z9-4", "v6e-4" + ESC)
COMPARES = (None, "hosts=2", "hosts=1,2", "hosts=100000000", "topology=v5p-3",
            "topology=v6e-8", "stacking", "hosts=", "bogus" + ESC)
FAIL_ONS = (None, "drops", "oom", "imbalance>1.5", "imbalance>nan", "drops,oom", "oom" + ESC)
QUANTILES = (None, "0.5", "1", "nan", "0", "2", "1e-300", "inf")
HEADROOMS = (None, "1.2", "nan", "inf", "1e308", "0.5", "1e12")
OUTPUTS = ("none", "new", "onto-sample", "inside-ids-folder", "readonly-dir", "directory")
PLOTS = (None, "load.png", ".png", "load.txt", "load.svg")
SC_COMMANDS = (("validate",), ("validate", "--format", "json"), ("inspect",),
               ("compile", "--sparsecore", "-o", "layouts.pbtxt"))


@dataclass
class Case:
    config: str
    sample: str
    seed: int
    as_folder: bool
    hosts: str | None
    topology: str | None
    compare: str | None
    fail_on: str | None
    quantile: str | None
    headroom: str | None
    report_format: str
    output: str
    plot: str | None
    max_input: str | None
    spec_command: tuple[str, ...] | None
    folder: Path = field(default_factory=Path)


def _build(case: Case) -> tuple[list[str], set[str]]:
    """The folder's files; returns (argv, the outputs a successful run may create)."""
    folder = case.folder
    text, ext = CONFIGS[case.config]
    (folder / f"config{ext}").write_bytes(text)
    data, sext = _sample(case.sample, case.seed)
    if case.as_folder:
        (folder / "day").mkdir()
        sample = folder / "day" / f"part-0{sext}"
        (folder / "day" / f"part-1{sext}").write_bytes(data)
        ids = "day"
    else:
        sample = folder / f"sample{sext}"
        ids = sample.name
    sample.write_bytes(data)
    if case.spec_command is not None:
        argv = [case.spec_command[0], f"config{ext}", *case.spec_command[1:]]
        return argv, {"layouts.pbtxt"} if case.spec_command[0] == "compile" else set()
    argv = ["plan", f"config{ext}", "--ids", ids, "-q", "--format", case.report_format]
    for option, value in (("--hosts", case.hosts), ("--topology", case.topology),
                          ("--compare", case.compare), ("--fail-on", case.fail_on),
                          ("--quantile", case.quantile), ("--headroom", case.headroom)):
        if value is not None:
            argv += [option, value]
    outputs: set[str] = set()
    if case.output == "new":
        argv += ["-o", "report.out"]
        outputs.add("report.out")
    elif case.output == "onto-sample":
        argv += ["-o", str(sample.relative_to(folder))]
    elif case.output == "inside-ids-folder":
        target = "day/part-1" + sext if case.as_folder else "sample" + sext
        argv += ["-o", target]
    elif case.output == "readonly-dir":
        (folder / "locked").mkdir()
        (folder / "locked").chmod(0o555)
        argv += ["-o", "locked/report.out"]
        outputs.add("locked/report.out")  # refused, or written where root may write anyway
    elif case.output == "directory":
        (folder / "adir").mkdir()
        argv += ["-o", "adir"]
    if case.plot is not None:
        argv += ["--plot", case.plot]
        outputs.add(case.plot)
    return argv, outputs


_servers: dict[str, ForkServer] = {}
PLAN_MODULES = ("tpuemb_cfg.session", "tpuemb_cfg.planner.planning", "tpuemb_cfg.planner.inputs",
                "tpuemb_cfg.embedding", "tpuemb_cfg.sparsecore", "numpy", "pyarrow.parquet")


@pytest.fixture(scope="module", autouse=True)
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _servers["plan"] = ForkServer(tmp_path_factory.mktemp("forkserver-plan"), PLAN_MODULES)
    yield
    _servers.pop("plan").close()


def _run(case: Case, argv: list[str]) -> tuple[int, bytes]:
    stdout_path = case.folder.parent / "stdout"
    stderr_path = case.folder.parent / "stderr"
    request: dict[str, object] = {
        "argv": argv, "cwd": str(case.folder), "stdin": "", "stdout": str(stdout_path),
        "stderr": str(stderr_path), "memory_cap": MEMORY_CAP, "timeout": 120}
    if case.max_input is not None:
        request["env"] = {"TPUEMB_MAX_INPUT": case.max_input}
    code = _servers["plan"].run(request)
    out = (stdout_path.read_bytes() if stdout_path.exists() else b"") + (
        stderr_path.read_bytes() if stderr_path.exists() else b"")
    return code, out


_CONTROLS = {chr(c) for c in range(0x80, 0xA0)} | {"\x1b", "\x07", "\x9b"}


def check(case: Case) -> None:
    argv, outputs = _build(case)
    before = _snapshot(case.folder)
    code, printed = _run(case, argv)
    after = _snapshot(case.folder)
    what = f"{case} -> exit {code}\n{printed[-2500:]!r}"
    assert b"Traceback (most recent call last)" not in printed, what
    assert code in DOCUMENTED_EXITS, what
    text = printed.decode("utf-8", errors="replace")
    assert not (_CONTROLS & set(text)), f"a raw control character was printed: {what}"
    for name, (_, mode, data) in before.items():
        assert name in after, f"{name} was removed: {what}"
        assert after[name][2] == data and after[name][1] == mode, f"{name} changed: {what}"
    new = set(after) - set(before)
    if code == 2:
        assert not new, f"a failed command left {sorted(new)}: {what}"
    else:
        assert new <= outputs, f"unexpected files {sorted(new - outputs)}: {what}"


def _maybe(values: tuple[str | None, ...]) -> st.SearchStrategy[str | None]:
    return st.sampled_from(values)


cases = st.builds(
    Case,
    config=st.sampled_from(sorted(CONFIGS)),
    sample=st.sampled_from(SAMPLES),
    seed=st.integers(0, 3),
    as_folder=st.booleans(),
    hosts=_maybe(HOSTS),
    topology=_maybe(TOPOLOGIES),
    compare=_maybe(COMPARES),
    fail_on=_maybe(FAIL_ONS),
    quantile=_maybe(QUANTILES),
    headroom=_maybe(HEADROOMS),
    report_format=st.sampled_from(["text", "json", "sarif"]),
    output=st.sampled_from(OUTPUTS),
    plot=_maybe(PLOTS),
    max_input=st.sampled_from([None, None, None, "64K", "1M"]),
    spec_command=st.one_of(st.none(), st.none(), st.none(), st.sampled_from(SC_COMMANDS)),
)


@settings(max_examples=EXAMPLES_COUNT, deadline=None,
          derandomize=derandomized(EXAMPLES_COUNT),
          suppress_health_check=[HealthCheck.too_slow])
@given(case=cases)
def test_plan_and_sparsecore_specs_under_every_input_are_safe(case: Case) -> None:
    with tempfile.TemporaryDirectory() as top:
        case.folder = Path(top) / "work"
        case.folder.mkdir()
        try:
            check(case)
        finally:
            for dirpath, dirnames, _ in os.walk(top):
                for name in dirnames:
                    os.chmod(Path(dirpath) / name, 0o755)
