"""Issue 12, by property: random bytes, random nesting and random option values given to convert,
fmt, validate, compile, inspect, simulate and bench never produce a traceback and never change an
input.

Each example runs in a fresh folder holding one input file (random content under a random name),
a symbolic link and a hard link to it, and a sub-folder; the options are drawn from values a user
could type, typos and hostile ones included (the input itself, its links, a missing folder, an
unknown extension, ...). Only ``fmt`` and ``validate --fix`` edit their input by design: whatever
they write must parse back.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from conftest import EXAMPLES, ROOT, examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tpuemb_cfg
from tpuemb_cfg.cli import main

QUICKSTART = (EXAMPLES / "quickstart.pbtxt").read_text()
SETTINGS = settings(max_examples=examples(30), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = st.sampled_from(["c.pbtxt", "c.json", "c.binpb", "c.pb", "c.cfg", "c", "c.txt"])
OUTPUTS = st.sampled_from([
    "out.pbtxt", "out.json", "out.binpb", "out.cfg", "-", "{input}", "link", "hard",
    "missing/out.pbtxt", "sub", "sub/out.json", "{input}/x.pbtxt", ""])
BRACKETS = st.sampled_from(["{", "}", "<", ">", "[", "]", "table_descriptor {",
                            "optimization_parameters {", "result {", "tuple_shapes {", '"', "#",
                            ":", "1", "num_hosts: 2", "\n", '{"table_descriptor": [', "\x00"])


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    """Random bytes, random nesting, or a real configuration with a random change."""
    kind = draw(st.sampled_from(["bytes", "nesting", "mutated", "deep", "number"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "number":  # numbers too long or too large for every parser
        number = draw(st.sampled_from(["9" * 5000, "1e99999", "-0x" + "f" * 40, "1" * 30,
                                       "nan", "-inf", "1.5e-400"]))
        field = draw(st.sampled_from(["num_hosts", "batch_size_per_tensor_core", "mode"]))
        template = draw(st.sampled_from(['{{"{f}": {n}}}', "{f}: {n}\n", "{f} = {n}\n",
                                         'table_descriptor {{ vocabulary_size: {n} }}',
                                         '{{"table_descriptor": [{{"dimension": {n}}}]}}']))
        return template.format(f=field, n=number).encode()
    if kind == "nesting":
        return "".join(draw(st.lists(BRACKETS, max_size=200))).encode()
    if kind == "deep":
        depth = draw(st.integers(90, 400))
        opener = draw(st.sampled_from(["tuple_shapes {", "{", "[", '{"a": ']))
        return (opener * depth + draw(st.sampled_from(["", "}", "]"])) * depth).encode()
    data = bytearray(QUICKSTART.encode())
    for _ in range(draw(st.integers(1, 5))):
        at = draw(st.integers(0, len(data)))
        data[at:at + draw(st.integers(0, 20))] = draw(st.binary(max_size=20))
    return bytes(data)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def folder(name: str, content: bytes) -> Iterator[Path]:
    """A fresh folder with the input, a symlink and a hard link to it, and a sub-folder."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / name).write_bytes(content)
        (root / "link").symlink_to(name)
        os.link(root / name, root / "hard")
        (root / "sub").mkdir()
        old = os.getcwd()
        os.chdir(root)
        try:
            yield root
        finally:
            os.chdir(old)


def invoke(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"tpuemb {' '.join(args)}: uncaught "
                             f"{type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    return result.exit_code, result.output


def assert_unchanged(root: Path, name: str, before: str) -> None:
    assert digest(root / name) == before, "the input changed"
    assert (root / "link").is_symlink() and os.readlink(root / "link") == name
    assert digest(root / "hard") == before


def assert_still_readable(root: Path, name: str, before: str) -> None:
    """fmt and --fix may rewrite the input in place; what they write parses back."""
    if digest(root / name) != before:
        tpuemb_cfg.load(root / name)
    assert (root / "link").is_symlink()


@SETTINGS
@given(name=NAMES, content=contents(), output=OUTPUTS,
       to=st.sampled_from([None, "text", "binary", "json", "yaml"]),
       source=st.sampled_from([None, "text", "binary", "json", "xml"]))
def test_convert(name: str, content: bytes, output: str, to: str | None,
                 source: str | None) -> None:
    with folder(name, content) as root:
        before = digest(root / name)
        args = ["convert", name, "-o", output.format(input=name)]
        args += ["--to", to] if to else []
        args += ["--from", source] if source else []
        code, _ = invoke(*args)
        assert_unchanged(root, name, before)
        written = root / output
        if code == 0 and output not in ("-", "") and "{" not in output:
            tpuemb_cfg.load(written, format=to)  # whatever convert writes, tpuemb reads back


@SETTINGS
@given(name=NAMES, content=contents(),
       flags=st.lists(st.sampled_from(["--check", "--diff"]), max_size=2, unique=True),
       via=st.sampled_from(["file", "link", "hard"]))
def test_fmt(name: str, content: bytes, flags: list[str], via: str) -> None:
    with folder(name, content) as root:
        before = digest(root / name)
        invoke("fmt", *flags, name if via == "file" else via)
        if flags:
            assert_unchanged(root, name, before)
        else:
            assert_still_readable(root, name, before)


@SETTINGS
@given(name=NAMES, content=contents(), fmt=st.sampled_from(["text", "json", "sarif", "github",
                                                             "junit", "yaml"]),
       fail_on=st.sampled_from([None, "error", "warning", "info", "fatal"]),
       select=st.sampled_from([None, "TAG", "ALL", "XYZ999", ",", "tag002"]),
       fix=st.sampled_from([None, "--fix", "--fix --diff", "--diff"]),
       more=st.sampled_from([[], ["-"], ["missing.pbtxt"], ["sub"], ["link"]]))
def test_validate(name: str, content: bytes, fmt: str, fail_on: str | None, select: str | None,
                  fix: str | None, more: list[str]) -> None:
    with folder(name, content) as root:
        before = digest(root / name)
        args = ["validate", "-f", fmt, name, *more]
        args += ["--fail-on", fail_on] if fail_on else []
        args += ["--select", select] if select else []
        args += fix.split() if fix else []
        invoke(*args, stdin=content)
        if fix == "--fix":
            assert_still_readable(root, name, before)
        else:
            assert_unchanged(root, name, before)


@SETTINGS
@given(content=contents(), suffix=st.sampled_from([".toml", ".py.txt", ".json"]),
       output=OUTPUTS, to=st.sampled_from([None, "text", "binary", "json"]),
       check=st.booleans())
def test_compile(content: bytes, suffix: str, output: str, to: str | None, check: bool) -> None:
    # Random bytes are never run as Python: only TOML (and files compile refuses by name).
    name = "spec" + suffix
    with folder(name, content) as root:
        before = digest(root / name)
        args = ["compile", name, "-o", output.format(input=name)]
        args += ["--to", to] if to else []
        args += ["--check"] if check else []
        invoke(*args)
        assert_unchanged(root, name, before)


@SETTINGS
@given(name=NAMES, content=contents(), as_json=st.booleans(),
       via=st.sampled_from(["file", "link", "-"]))
def test_inspect(name: str, content: bytes, as_json: bool, via: str) -> None:
    with folder(name, content) as root:
        before = digest(root / name)
        target = name if via == "file" else via
        invoke("inspect", target, *(["--json"] if as_json else []), stdin=content)
        assert_unchanged(root, name, before)


# --------------------------------------------------------------------------------------------
# simulate and bench: random bytes as every input file, random option values within fast bounds

TINY = (ROOT / "tests" / "data" / "multiworker" / "tiny.pbtxt").read_text()
RUN_SETTINGS = settings(max_examples=examples(25), deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


BATCHES = _npz({"s0/f0/ids": np.array([1, 3], dtype=np.int64),
                "s0/f0/grad": np.ones((2, 2), dtype=np.float32)})


@st.composite
def npz_contents(draw: st.DrawFn) -> bytes:
    """Random bytes, recorded steps (valid or with a random change), or a pickled object array."""
    kind = draw(st.sampled_from(["bytes", "valid", "mutated", "objects", "wrong"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "objects":
        return _npz({"s0/f0/ids": np.array([{"a": 1}], dtype=object)})
    if kind == "wrong":
        return _npz({"s0/f0/ids": np.array([[1.5]]), "s9/f7/grad": np.zeros(3)})
    data = bytearray(BATCHES)
    if kind == "mutated":
        at = draw(st.integers(0, len(data)))
        data[at:at + draw(st.integers(0, 20))] = draw(st.binary(max_size=20))
    return bytes(data)


@st.composite
def spec_contents(draw: st.DrawFn) -> bytes:
    fields = draw(st.lists(st.sampled_from([
        "steps: 2", "steps: 0", "seed: -1", "workers { count: 2 }", "workers { count: 0 }",
        "workers { max_staleness: -1 }", "workers { count: 100000 }", 'out_dir: "sub"',
        'max_memory: "lots"', "learning_rate_schedule { tag: 0 constant: 0.5 }",
        'workload { replay { batches: "b.npz" out: "o.npz" } }', "bogus: 1", "{"]), max_size=4))
    return draw(st.one_of(st.just(" ".join(fields).encode()), contents()))


def mostly(good: list[object], bad: list[object]) -> st.SearchStrategy[object]:
    """One of ``good`` three times in four, else one of ``bad``: most runs get far."""
    return st.one_of(*[st.sampled_from(good)] * 3, st.sampled_from(bad))


@RUN_SETTINGS
@given(config=st.one_of(*[st.just(TINY.encode())] * 2, contents()), batches=npz_contents(),
       init=npz_contents(), spec=spec_contents(),
       mode=st.sampled_from(["synthetic", "replay", "workers", "spec"]),
       steps=mostly(["1", "2", "3"], ["0", "-1", "x"]),
       seed=mostly(["0", "7"], ["-1", "18446744073709551617"]),
       workers=mostly([None, "1", "3"], ["0", "100000"]),
       staleness=mostly([None, "0", "2"], ["-1"]),
       extra=st.lists(st.sampled_from([
           ["--replicas-to-aggregate", "2"], ["--init-tokens", "-5"], ["--delay", "fixed:1"],
           ["--delay", "geometric:2"], ["--delay", "bogus"], ["--learning-rate", "nan"],
           ["--learning-rate", "-1"], ["--combiner", "sum"], ["--combiner", "5=bogus"],
           ["--max-memory", "1k"], ["--max-memory", "lots"], ["--checkpoint-every", "1"],
           ["--resume"], ["--json"], ["--init", "i.npz"], ["--init", "c.pbtxt"]]),
           max_size=3),
       out=mostly(["o.npz", "sub/o.npz"], ["b.npz", "c.pbtxt", "link", "missing/o.npz", "sub",
                                           "o.txt", "-"]),
       out_dir=mostly(["od", "sub", "new/deeper", "."], ["c.pbtxt", "c.pbtxt/x", "link"]),
       plot=mostly([None, None, "p.png", "p.svg"], ["p.jpg", "c.pbtxt", "missing/p.png",
                                                   "od/tables.npz", "-", "hard"]))
def test_simulate(config: bytes, batches: bytes, init: bytes, spec: bytes, mode: str,
                  steps: str, seed: str, workers: str | None, staleness: str | None,
                  extra: list[list[str]], out: str, out_dir: str, plot: str | None) -> None:
    with folder("c.pbtxt", config) as root:
        (root / "b.npz").write_bytes(batches)
        (root / "i.npz").write_bytes(init)
        (root / "sim.pbtxt").write_bytes(spec)
        inputs = {name: digest(root / name) for name in ("c.pbtxt", "b.npz", "i.npz",
                                                         "sim.pbtxt")}
        args = ["simulate", "c.pbtxt", "--engine", "numpy", "-q", "--seed", seed]
        if mode == "replay":
            args += ["--batches", "b.npz", "--out", out]
        else:
            args += ["--steps", steps, "--out-dir", out_dir]
            args += ["--plot", plot] if plot else []
        if mode == "workers":
            args += ["--workers", workers] if workers else []
            args += ["--max-staleness", staleness] if staleness else []
        if mode == "spec":
            args += ["--spec", "sim.pbtxt"]
        code, _ = invoke(*args, *(word for option in extra for word in option))
        event(f"{mode}: exit {code}")  # pytest --hypothesis-show-statistics
        for name, before in inputs.items():
            assert digest(root / name) == before, f"{name} changed"
        assert (root / "link").is_symlink() and digest(root / "hard") == inputs["c.pbtxt"]
        assert not list(root.rglob("*.tmp")), "a temporary file was left behind"


@RUN_SETTINGS
@given(vocab=st.sampled_from(["1", "2", "7", "1000", "0", "-3", "100000000000", "x"]),
       dim=st.sampled_from(["1", "4", "1000", "0"]),
       ids=st.sampled_from(["1", "16", "64", "0"]),
       steps=st.sampled_from(["1", "2", "0"]),
       zipf=st.sampled_from(["1.05", "0.5", "3", "0", "-1", "nan", "inf"]),
       optimizer=st.sampled_from(["adagrad", "sgd", "momentum", "adam", "ftrl", "bogus"]),
       max_memory=st.sampled_from([None, "1k", "lots", "1G", "0"]),
       flags=st.lists(st.sampled_from(["--json"]), max_size=1),
       seed=st.sampled_from(["0", "-1", "18446744073709551617"]))
def test_bench(vocab: str, dim: str, ids: str, steps: str, zipf: str, optimizer: str,
               max_memory: str | None, flags: list[str], seed: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            args = ["bench", "--engine", "numpy", "--vocab", vocab, "--dim", dim, "--ids", ids,
                    "--steps", steps, "--zipf", zipf, "--optimizer", optimizer, "--seed", seed,
                    *flags]
            invoke(*args, *(["--max-memory", max_memory] if max_memory else []))
            assert os.listdir(tmp) == [], "bench wrote a file"
        finally:
            os.chdir(old)
