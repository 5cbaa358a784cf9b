"""Issue 12: ordinary typos and hostile input never cost data, never print a traceback.

One test (at least) per kind of mistake, each asserting the exact behaviour: the exit status,
exactly one line on stderr, no traceback, the inputs' bytes unchanged and nothing written.
The `simulate` and `bench` commands and the library's Executor are covered in
test_robustness_simulate.py; this module covers convert, fmt, validate (and --fix), compile,
inspect, the top-level command, `python cli.py`, the library's load/dump and the shared output
mechanisms in tpuemb_cfg.formats.atomic.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from conftest import EXAMPLES, ROOT

import tpuemb_cfg
from tpuemb_cfg import InputError, UsageError
from tpuemb_cfg.base.errors import OutputError
from tpuemb_cfg.cli import main
from tpuemb_cfg.formats import atomic
from tpuemb_cfg.formats.limits import MAX_DEPTH
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

QUICKSTART = (EXAMPLES / "quickstart.pbtxt").read_text()
SPEC = """\
from tpuemb_cfg.embedding import FeatureConfig, SGD, TableConfig

table = TableConfig(vocabulary_size=100, dim=4, name="t")
feature_config = {"f": FeatureConfig(table)}
optimizer = SGD(learning_rate=0.1)
per_replica_batch_size = 8
"""


# --------------------------------------------------------------------------------------------
# Helpers


def run(*args: str, stdin: bytes | str | None = None) -> Result:
    """``tpuemb ARGS`` in-process; an exception escaping the command fails the test."""
    result = CliRunner().invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {type(result.exception).__name__}: {result.exception}")
    return result


def one_line(result: Result, code: int = 2, *words: str) -> str:
    """Assert the exit status and exactly one line on stderr (holding ``words``); return it."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    return result.stderr.rstrip("\n")


def refused(work: Path, *args: str, code: int = 2, words: tuple[str, ...] = ()) -> str:
    """Run ``tpuemb ARGS`` in-process; assert one line on stderr, exit ``code`` and no file of
    ``work`` changed; return the line."""
    before = snapshot(work)
    line = one_line(run(*args), code, *words)
    assert snapshot(work) == before
    return line


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry of ``folder``: symbolic links by target, files by content hash."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            entries[key] = "-> " + os.readlink(path)
        elif path.is_file():
            entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[key] = "folder"
    return entries


def deep_text(depth: int) -> str:
    """A configuration whose messages nest ``depth`` levels below the top level."""
    fixed = ["table_descriptor", "optimization_parameters", "user_defined_program", "program",
             "host_program_shape", "result"]
    inner = depth - len(fixed)
    return ('table_descriptor {\n  name: "t"\n  vocabulary_size: 10\n  dimension: 4\n'
            "  optimization_parameters { user_defined_program { program { host_program_shape { "
            "result { " + "tuple_shapes { " * inner + "}" * inner + " } } } } }\n}\n")


def deep_message(depth: int) -> TPUEmbeddingConfiguration:
    config = TPUEmbeddingConfiguration()
    table = config.table_descriptor.add(name="t", vocabulary_size=10, dimension=4)
    shape = table.optimization_parameters.user_defined_program.program.host_program_shape.result
    for _ in range(depth - 6):
        shape = shape.tuple_shapes.add()
    return config


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding a configuration ``a.pbtxt``, the current directory of the test."""
    (tmp_path / "a.pbtxt").write_text(QUICKSTART)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------------------------
# 1. Outputs never replace inputs


@pytest.mark.parametrize("kind", ["same", "symlink", "hardlink"])
def test_convert_never_overwrites_its_input(work: Path, kind: str) -> None:
    target = {"same": "a.pbtxt", "symlink": "link.pbtxt", "hardlink": "hard.pbtxt"}[kind]
    if kind == "symlink":
        (work / "link.pbtxt").symlink_to("a.pbtxt")
    elif kind == "hardlink":
        os.link(work / "a.pbtxt", work / "hard.pbtxt")
    before = snapshot(work)
    line = one_line(run("convert", "a.pbtxt", "-o", target, "--to", "binary"), 2,
                    f"-o {target}", "the same file as the input IN a.pbtxt")
    assert {"same": "destroy the input", "symlink": "(through a symbolic link)",
            "hardlink": "(a hard link to it)"}[kind] in line
    assert snapshot(work) == before


def test_compile_never_overwrites_its_spec(work: Path) -> None:
    (work / "spec.py").write_text(SPEC)
    (work / "spec.pbtxt").symlink_to("spec.py")
    before = snapshot(work)
    one_line(run("compile", "spec.py", "-o", "spec.py", "--to", "text"), 2,
             "refusing to write -o spec.py", "the input SPEC spec.py")
    one_line(run("compile", "spec.py", "-o", "spec.pbtxt"), 2, "(through a symbolic link)")
    assert snapshot(work) == before


def test_check_outputs_api(work: Path) -> None:
    (work / "plot.png").symlink_to("a.pbtxt")
    with pytest.raises(UsageError, match=r"refusing to write --plot plot.png: it is the same "
                       r"file as the input CONFIG a.pbtxt \(through a symbolic link\)"):
        atomic.check_outputs([("--plot", "plot.png")], [("CONFIG", "a.pbtxt")])
    with pytest.raises(UsageError, match="--out o.npz and --plot o.npz are the same file"):
        atomic.check_outputs([("--out", "o.npz"), ("--plot", "o.npz")])
    with pytest.raises(UsageError, match=r"--plot run.svgz: cannot write .svgz files; use one "
                       r"of the extensions .png, .svg, .pdf"):
        atomic.check_outputs([("--plot", "run.svgz")],
                             suffixes={"run.svgz": (".png", ".svg", ".pdf")})
    with pytest.raises(OutputError, match="folder nowhere does not exist"):
        atomic.check_outputs(["nowhere/x.npz"])
    atomic.check_outputs(["nowhere/deeper/x.npz"], make_dirs=True)  # the folders will be made
    atomic.check_outputs(["-", "fresh.pbtxt"], ["-", "a.pbtxt"])  # fine
    assert snapshot(work) == {"a.pbtxt": snapshot(work)["a.pbtxt"], "plot.png": "-> a.pbtxt"}


# --------------------------------------------------------------------------------------------
# 2. Every output is checked before work starts, and written atomically


@pytest.mark.parametrize("command", ["convert", "compile"])
def test_output_in_a_missing_folder(work: Path, command: str) -> None:
    (work / "spec.py").write_text(SPEC)
    source = "a.pbtxt" if command == "convert" else "spec.py"
    before = snapshot(work)
    line = one_line(run(command, source, "-o", "missing/out.binpb"), 2)
    assert line == ("missing/out.binpb: error: cannot write here: folder missing does not exist; "
                    "create it first (mkdir -p missing) or choose another -o path")
    assert snapshot(work) == before


def test_output_that_is_a_folder_or_under_a_file(work: Path) -> None:
    (work / "d").mkdir()
    before = snapshot(work)
    one_line(run("convert", "a.pbtxt", "-o", "d", "--to", "json"), 2,
             "d: error: is a folder; give the -o path of a file to write")
    one_line(run("convert", "a.pbtxt", "-o", "a.pbtxt/x.json"), 2,
             "cannot write here: a.pbtxt is a file, not a folder")
    assert snapshot(work) == before


def test_output_in_a_read_only_folder(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # os.access, so that the test also means something when run as root
    real_access = os.access

    def access(path: str, mode: int) -> bool:
        return False if os.fspath(path) == str(work) else real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    before = snapshot(work)
    one_line(run("convert", "a.pbtxt", "-o", "out.json"), 2,
             "folder . is not writable (permission denied)")
    assert snapshot(work) == before


def test_unknown_output_extension(work: Path) -> None:
    (work / "spec.py").write_text(SPEC)
    before = snapshot(work)
    one_line(run("convert", "a.pbtxt", "-o", "out.cfg"), 2,
             "cannot tell the format to write from the file name (.cfg)", "pass --to")
    line = one_line(run("compile", "spec.py", "-o", "spec.out"), 2, "pass --to")
    assert "--from" not in line
    assert snapshot(work) == before


def test_os_error_while_writing_is_one_line(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)
    before = snapshot(work)
    one_line(run("convert", "a.pbtxt", "-o", "out.json"), 2,
             "out.json: error: cannot write: No space left on device")
    assert snapshot(work) == before  # no temporary file left behind


def test_a_planted_symlink_at_a_temporary_name_is_never_followed(work: Path) -> None:
    victim = work / "victim.txt"
    victim.write_text("precious")
    for name in (".out.json.tmp", "out.json.tmp", ".out.json.tmp.png", ".out.json.0.tmp"):
        (work / name).symlink_to(victim)
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(os.path.basename(src))
        real_replace(src, dst)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", spy)
        assert run("convert", "a.pbtxt", "-o", "out.json").exit_code == 0
        assert run("convert", "a.pbtxt", "-o", "out.json").exit_code == 0
    assert victim.read_text() == "precious"
    assert (work / "out.json").read_bytes().startswith(b"{")
    assert len(seen) == 2 and seen[0] != seen[1]  # a fresh random name every time
    assert all(name.startswith(".out.json.") and name.endswith(".tmp") for name in seen)


def test_fmt_and_fix_write_through_a_symlink(work: Path) -> None:
    (work / "real").mkdir()
    messy = work / "real" / "c.pbtxt"
    messy.write_text("num_hosts:   2\n")
    (work / "link.pbtxt").symlink_to("real/c.pbtxt")
    result = run("fmt", "link.pbtxt")
    assert result.exit_code == 0 and result.stderr == "reformatted link.pbtxt\n"
    assert (work / "link.pbtxt").is_symlink() and messy.read_text() == "num_hosts: 2\n"

    tags = QUICKSTART.replace("tag: 1", "tag: 3")
    assert tags != QUICKSTART
    messy.write_text(tags)
    result = run("validate", "--fix", "link.pbtxt")
    assert "fixed (renumbered dynamic tags)" in result.stderr
    assert (work / "link.pbtxt").is_symlink()
    assert "tag: 1" in messy.read_text() and "tag: 3" not in messy.read_text()


def test_output_to_a_device_is_written_directly() -> None:
    if not os.access("/dev/null", os.W_OK):
        pytest.skip("no writable /dev/null")
    result = run("convert", str(EXAMPLES / "quickstart.pbtxt"), "-o", "/dev/null", "--to",
                 "binary")
    assert result.exit_code == 0 and result.stderr == ""
    assert Path("/dev/null").is_char_device()


def test_dev_stdout_appends_where_the_shell_redirects(work: Path) -> None:
    script = Path(sys.executable).parent / "tpuemb"
    if not script.exists() or not Path("/dev/stdout").exists():
        pytest.skip("needs the tpuemb console script and /dev/stdout")
    (work / "log.txt").write_text("previous\n")
    done = subprocess.run(["bash", "-c", f"'{script}' convert a.pbtxt -o /dev/stdout --to json "
                           ">> log.txt"], cwd=work, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    assert (work / "log.txt").read_text().startswith('previous\n{\n  "table_descriptor"')


def test_output_set_writes_everything_or_nothing(work: Path) -> None:
    before = snapshot(work)
    with pytest.raises(RuntimeError), atomic.OutputSet(make_dirs=True) as outputs:
        outputs.write_bytes(work / "new" / "deeper" / "summary.json", b"{}")
        with outputs.open(work / "new" / "tables.npz") as handle:
            handle.write(b"partial")
            raise RuntimeError("the run failed")
    assert snapshot(work) == before  # no file, no temporary, no folder
    with atomic.OutputSet(make_dirs=True) as outputs:
        outputs.write_bytes(work / "new" / "summary.json", b"{}")
        with outputs.open(work / "new" / "tables.npz") as handle:
            handle.write(b"complete")
        assert not (work / "new" / "summary.json").exists()  # nothing visible before the end
    assert (work / "new" / "summary.json").read_bytes() == b"{}"
    assert (work / "new" / "tables.npz").read_bytes() == b"complete"
    assert sorted(p.name for p in (work / "new").iterdir()) == ["summary.json", "tables.npz"]


# --------------------------------------------------------------------------------------------
# 3. Nesting and size limits


@pytest.mark.parametrize("command", ["convert", "validate", "fmt", "inspect"])
@pytest.mark.parametrize("kind", ["text", "json", "binary"])
def test_nesting_beyond_what_protobuf_reads_back_is_a_parse_error(
        work: Path, command: str, kind: str) -> None:
    if kind == "text":
        name, where = "deep.pbtxt", "deep.pbtxt:5:"
        (work / name).write_text(deep_text(1000))
    elif kind == "json":
        name, where = "deep.json", "deep.json:1:"
        (work / name).write_text('{"table_descriptor": [' + '{"a": ' * 5000 + "1"
                                 + "}" * 5000 + "]}")
    else:
        name, where = "deep.binpb", "deep.binpb: byte "
        (work / name).write_bytes(deep_message(150).SerializeToString())
    before = snapshot(work)
    args = {"convert": ("convert", name, "-o", "out.json"), "validate": ("validate", name),
            "fmt": ("fmt", name), "inspect": ("inspect", name)}[command]
    result = run(*args)
    if command == "fmt" and kind == "binary":
        one_line(result, 2, "deep.binpb: byte ")
    elif command == "validate":
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert result.stdout.startswith(where.replace(": byte ", ": error[PARSE001] byte "))
        assert f"nested more than {MAX_DEPTH} messages deep" in result.stdout
    else:
        one_line(result, 2, where, f"nested more than {MAX_DEPTH} messages deep")
    assert snapshot(work) == before


def test_deepest_readable_nesting_round_trips_in_every_format(work: Path) -> None:
    (work / "ok.pbtxt").write_text(deep_text(MAX_DEPTH))
    for step in (("ok.pbtxt", "ok.binpb"), ("ok.binpb", "ok.json"), ("ok.json", "back.pbtxt")):
        assert run("convert", step[0], "-o", step[1]).exit_code == 0
    assert tpuemb_cfg.load("back.pbtxt") == tpuemb_cfg.load("ok.pbtxt")
    (work / "over.pbtxt").write_text(deep_text(MAX_DEPTH + 1))
    one_line(run("convert", "over.pbtxt", "-o", "over.binpb"), 2, "over.pbtxt:5:")
    assert not (work / "over.binpb").exists()


def test_library_refuses_to_write_what_it_could_not_read_back(work: Path) -> None:
    with pytest.raises(InputError, match=f"nests more than {MAX_DEPTH} levels deep"):
        tpuemb_cfg.dump(deep_message(MAX_DEPTH + 1), "deep.binpb")
    with pytest.raises(InputError, match="byte "):
        tpuemb_cfg.load(deep_message(150).SerializeToString())
    assert not (work / "deep.binpb").exists()


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_one_unreadable_file_does_not_hide_the_others(work: Path, fmt: str) -> None:
    import json

    (work / "deep.pbtxt").write_text(deep_text(1000))
    (work / "deep.json").write_text("[" * 5000 + "]" * 5000)
    (work / "odd.cfg").write_text("num_hosts: 1\n")
    (work / "tags.pbtxt").write_text(QUICKSTART.replace("tag: 1", "tag: 3"))
    result = run("validate", "-f", fmt, "deep.pbtxt", "deep.json", "odd.cfg", "tags.pbtxt")
    assert result.exit_code == 2 and result.stderr == ""
    document = json.loads(result.stdout)
    if fmt == "json":
        found = {f["path"]: [d["rule"] for d in f["diagnostics"]] for f in document["files"]}
        assert found["deep.pbtxt"] == ["PARSE001"] and found["deep.json"] == ["PARSE001"]
        assert found["odd.cfg"] == ["PARSE001"]
        assert "TAG002" in found["tags.pbtxt"]
    else:
        rules = [r["ruleId"] for r in document["runs"][0]["results"]]
        assert rules.count("PARSE001") == 3 and "TAG002" in rules


def test_input_size_limit_refuses_and_suggests_a_limit_that_works(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = QUICKSTART + "# padding\n" * 400  # about 6 KB
    (work / "big.pbtxt").write_text(big)
    monkeypatch.setenv("TPUEMB_MAX_INPUT", "4K")
    line = one_line(run("convert", "big.pbtxt", "-o", "out.json"), 2,
                    f"big.pbtxt: error: the file has {len(big):,} bytes, more than the input "
                    "limit of 4 KiB")
    suggested = line.rsplit("TPUEMB_MAX_INPUT=", 1)[1]
    assert not (work / "out.json").exists()
    monkeypatch.setenv("TPUEMB_MAX_INPUT", suggested)
    assert run("convert", "big.pbtxt", "-o", "out.json").exit_code == 0
    monkeypatch.setenv("TPUEMB_MAX_INPUT", "lots")
    one_line(run("convert", "big.pbtxt", "-o", "x.json"), 2,
             "TPUEMB_MAX_INPUT='lots': not a size")


def test_an_endless_input_stops_at_the_limit(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUEMB_MAX_INPUT", "64K")
    one_line(run("convert", "-", "-o", "out.json", stdin=b"num_hosts: 1\n" * 10_000), 2,
             "<stdin>: error: stopped reading after 64 KiB (the input limit) and the input "
             "goes on", "TPUEMB_MAX_INPUT=")
    if Path("/dev/zero").exists():
        one_line(run("convert", "/dev/zero", "--from", "binary", "-o", "out.json"), 2,
                 "/dev/zero: error: stopped reading after 64 KiB")
    assert not (work / "out.json").exists()


def test_numbers_too_long_for_python_are_parse_errors(work: Path) -> None:
    (work / "n.json").write_text('{"num_hosts": ' + "9" * 5000 + "}")
    one_line(run("convert", "n.json", "-o", "n.pbtxt"), 2,
             "n.json:1:15: error: a number with 5,000 digits; the widest integer field (int64) "
             "holds 19 digits")
    (work / "n.toml").write_text("num_hosts = " + "9" * 5000 + "\n")
    one_line(run("compile", "n.toml", "-o", "n.pbtxt"), 2,
             "n.toml: error: cannot read the spec: an integer with 5,000 digits")
    assert not (work / "n.pbtxt").exists()


def test_an_infinite_number_for_an_enum_is_a_parse_error(work: Path) -> None:
    # Found by the hypothesis fuzzing: protobuf's JSON reader calls int() on the float
    # infinity 1e99999 reads as, and the OverflowError escaped (from fmt of a .binpb too, whose
    # hint tries the other formats).
    (work / "c.json").write_text('{"mode": 1e99999}')
    (work / "c.binpb").write_text('{"mode": 1e99999}')
    one_line(run("convert", "c.json", "-o", "c.pbtxt"), 2,
             "c.json:1:10: error: number 1e99999 is infinite as a float; an integer or enum "
             "field takes a whole number")
    one_line(run("fmt", "c.binpb"), 2, "c.binpb: byte 0: error:")
    assert (work / "c.binpb").read_text() == '{"mode": 1e99999}'
    assert not (work / "c.pbtxt").exists()


def test_the_infinite_number_is_located_past_strings_that_look_like_numbers(work: Path) -> None:
    # A quoted "Infinity" is a float field's valid value, and a name may hold "1e99999": the
    # error points at the bare number on line 2.
    (work / "c.json").write_text(
        '{"table_descriptor": [{"name": "t 1e99999", "optimization_parameters": '
        '{"learning_rate": {"constant": "Infinity"}}}],\n "mode": 1e99999}')
    one_line(run("convert", "c.json", "-o", "c.pbtxt"), 2,
             "c.json:2:10: error: number 1e99999 is infinite as a float")
    assert not (work / "c.pbtxt").exists()


def test_a_multi_megabyte_string_is_validated_in_little_memory(work: Path) -> None:
    huge = "a" * 5_000_000
    text = QUICKSTART.replace('name: "user"', f'name: "{huge}"', 1).replace(
        'name: "item"', f'name: "{huge}"', 1).replace("dimension: 16", "dimension: 0", 1)
    (work / "huge.pbtxt").write_text(text)
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = run("validate", "huge.pbtxt")
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 1, result.output
    assert peak < 12 * len(text), f"peak {peak:,} bytes for a {len(text):,}-byte file"
    assert seconds < 30
    lines = result.stdout.splitlines()
    assert lines and all(len(line) < 400 for line in lines)
    assert "'aaaaaaaaaaaaaaaaaaaaaaaa…' (5,000,000 characters)" in result.stdout


# --------------------------------------------------------------------------------------------
# 5. Interrupts


def test_ctrl_c_while_writing_leaves_nothing(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = os.fsync

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    before = snapshot(work)
    one_line(run("convert", "a.pbtxt", "-o", "out.binpb"), 130,
             "tpuemb: interrupted; no output file was left half-written")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert snapshot(work) == before


def _interrupt_command(args: list[str], delay: float, **kwargs: object) -> tuple[int, str]:
    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    return process.returncode, err.decode()


def _python_start_up() -> float:
    """Seconds the interpreter needs to start (with site) before any tpuemb code can run."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return max(times)


def test_ctrl_c_at_any_moment_exits_130_with_one_line(tmp_path: Path) -> None:
    """The real command, interrupted from its first instant to a running state (`validate -`
    waits on standard input). Python's own start-up, before the first line of tpuemb runs, answers
    Ctrl-C itself (possibly with a traceback of the interpreter's site module): no program can
    change that, so a run interrupted there is retried a little later."""
    script = Path(sys.executable).parent / "tpuemb"
    if not script.exists():
        pytest.skip("the tpuemb console script is not installed beside this Python")
    start_up = _python_start_up()
    for offset in (0.0, 0.005, 0.02, 0.05, 0.1, 0.3):
        for attempt in range(4):
            delay = (start_up if offset else 0.0) + offset + 0.05 * attempt
            code, err = _interrupt_command([str(script), "validate", "-"], delay, cwd=tmp_path)
            ours = "/tpuemb_cfg/" in err  # a frame in tpuemb's own files
            if "Traceback" in err and not ours:
                continue  # Python's own start-up answered; try a little later
            if code == -signal.SIGINT and not err:
                continue  # killed before Python installed its handler at all
            break
        assert "Traceback" not in err, (offset, err)
        assert code == 130, (offset, code, err)
        assert err == "tpuemb: interrupted; no output file was left half-written\n", err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# 7. Accurate hints


@pytest.mark.parametrize("command", ["validate", "fmt", "inspect", "convert"])
def test_unknown_input_extension_hint_names_only_options_the_command_has(
        work: Path, command: str) -> None:
    (work / "c.cfg").write_text("num_hosts: 1\n")
    args = ["convert", "c.cfg", "-o", "x.json"] if command == "convert" else [command, "c.cfg"]
    result = run(*args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = result.output
    assert "cannot tell the format from the file name (.cfg)" in text
    assert "its content looks like text: name it c.pbtxt" in text
    if command == "convert":
        assert "or pass --from text" in text
    else:
        assert "--from" not in text and "--to" not in text and "pass the format" not in text


def test_binary_given_as_text(work: Path) -> None:
    data = tpuemb_cfg.load("a.pbtxt").SerializeToString()
    (work / "b.pbtxt").write_bytes(data)
    result = run("validate", "b.pbtxt")
    assert result.exit_code == 2
    assert ("the file looks like a binary TPUEmbeddingConfiguration: name it b.binpb (the "
            "extension decides the format)") in result.stdout
    one_line(run("convert", "b.pbtxt", "-o", "x.json"), 2,
             "looks like a binary TPUEmbeddingConfiguration: name it b.binpb or pass --from "
             "binary")
    line = one_line(run("convert", "b.pbtxt", "--from", "text", "-o", "x.json"), 2,
                    "pass --from binary instead")
    assert "name it" not in line
    result = run("validate", "-", stdin=data)
    assert "standard input is read as text; save it as a .binpb file" in result.stdout
    assert not (work / "x.json").exists()


def test_text_given_as_binary(work: Path) -> None:
    (work / "t.pb").write_text(QUICKSTART)
    one_line(run("convert", "t.pb", "-o", "x.json"), 2,
             "the file looks like TPUEmbeddingConfiguration in text format: name it t.pbtxt or "
             "pass --from text")


def test_a_simulation_spec_given_as_a_configuration(work: Path) -> None:
    spec = (EXAMPLES / "sim" / "backup_workers.pbtxt").read_text()
    (work / "sim.pbtxt").write_text(spec)
    result = run("validate", "sim.pbtxt")
    assert result.exit_code == 2
    assert ('has no field named "steps"; the file looks like a SimulationSpec (the --spec file '
            "of `tpuemb simulate`), not a TPUEmbeddingConfiguration") in result.stdout
    one_line(run("convert", "sim.pbtxt", "-o", "sim.json"), 2, "looks like a SimulationSpec")


def test_random_bytes_as_npz_are_described_without_pickle_advice(tmp_path: Path) -> None:
    path = tmp_path / "B.npz"
    path.write_bytes(np.random.default_rng(0).bytes(256))
    with pytest.raises(InputError) as info:
        read_npz(path)
    assert "allow_pickle" not in str(info.value) and "pickle" not in str(info.value)
    assert "cannot read as .npz: the file starts with" in str(info.value)
    assert "while an .npz archive starts with 50 4b ('PK', a zip archive)" in str(info.value)
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError) as info:
        read_npz(tmp_path / "objects.npz")
    assert "allow_pickle" not in str(info.value) and "Python objects" in str(info.value)


def test_cli_py_without_protobuf_says_so() -> None:
    code = ("import runpy, sys; sys.modules['google'] = None; "
            "sys.argv = ['cli.py', 'validate', 'examples/quickstart.pbtxt']; "
            "runpy.run_path('cli.py', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("tpuemb: the protobuf package is not installed in this Python")
    assert "pip install 'protobuf>=6.31.1,<8'" in out.stderr
    assert "generated" not in out.stderr


def test_library_without_protobuf_says_so() -> None:
    code = ("import sys; sys.modules['google'] = None; import tpuemb_cfg\n"
            "try:\n    tpuemb_cfg.load\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("the protobuf package is not installed in this Python")


def test_a_signal_inside_an_import_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first Ctrl-C that lands in the import system (e.g. the module lock's weakref callback,
    where a raised KeyboardInterrupt would be printed as "Exception ignored" with a traceback)
    ends the command at once with the one line; anywhere else it unwinds."""
    from tpuemb_cfg.base import interrupt as _interrupt

    class Exited(Exception):
        pass

    def fake_exit(signum: int | None = None, frame: object = None) -> None:
        raise Exited(signum)

    namespace: dict[str, object] = {}
    exec(compile("import sys\nframe = sys._getframe()", "<frozen importlib._bootstrap>", "exec"),
         namespace)
    previous = {n: signal.getsignal(n) for n in _interrupt.SIGNALS}
    monkeypatch.setattr(_interrupt, "exit_now", fake_exit)
    try:
        with pytest.raises(Exited) as info:
            _interrupt.raise_once(signal.SIGINT, namespace["frame"])
        assert info.value.args == (signal.SIGINT,)
        with pytest.raises(KeyboardInterrupt):
            _interrupt.raise_once(signal.SIGINT, sys._getframe())
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def test_exit_now_while_the_writer_module_is_still_being_imported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal during the import of ``tpuemb_cfg.formats.atomic`` finds the module without its
    functions: ``exit_now`` still prints the one line and exits 130, no AttributeError."""
    import types

    from tpuemb_cfg.base import interrupt as _interrupt

    exits: list[int] = []
    written: list[bytes] = []
    monkeypatch.setitem(sys.modules, "tpuemb_cfg.formats.atomic",
                        types.ModuleType("tpuemb_cfg.formats.atomic"))
    monkeypatch.setattr(_interrupt.os, "write", lambda fd, data: written.append(data) or len(data))

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(_interrupt.os, "_exit", fake_exit)
    with pytest.raises(SystemExit):
        _interrupt.exit_now(signal.SIGINT)
    assert exits == [130]
    assert written == [b"tpuemb: interrupted; no output file was left half-written\n"]
