"""The whole command line under random commands, file contents and file-system states.

Each example builds a fresh folder with an input file (valid, damaged, odd encodings, duplicate
JSON keys, escape bytes in names, a spec that changes directory...) in some state (a plain file,
a symlink, a symlink loop, a hard link, read-only, missing, a directory), picks a command with
options and an output (new, onto the input through a symlink, into a read-only folder, a
directory, ``-``), and a standard output (a pipe, ``/dev/full``, closed), then runs ``python -m
tpuemb_cfg`` with an address-space cap: in a child forked for the example by
``tests/cli_forkserver.py`` (a process that has imported the command's modules once: one for
``simulate``, ``inspect`` and ``compile``, which also imports NumPy, numba and the executor they
load when they run, one for the other commands, which never load them; the child starts and
ends as the command's own process would, and no example sees another's), or, with
``TPUEMB_PROPERTY_SUBPROCESS=1``, as a process of its own. Properties, whatever happened:

- no traceback, and the exit status is one the documentation gives (0, 1, 2);
- no file changed that the command does not change by design (``fmt`` without ``--check``,
  ``validate --fix``), and those keep their hard links, or say so, and their UTF-8 BOM;
- a failed command leaves no file behind; a successful one creates only its outputs;
- what was named as output is where the output went (a spec that changes the working
  directory cannot move it);
- ``fmt -`` as a filter always writes the text back;
- a JSON configuration with a duplicate key is refused, never half-read;
- no raw escape byte from a configuration reaches the terminal.

A second property covers the Ray options (``--runtime-env``, ``--ray-address``, ``--shards``,
``--no-ship`` of ``simulate`` and ``bench --backend ray``) under arbitrary values, at an address
where nothing answers: exit 2 and one line (or click's usage block), never a traceback, no file
changed, Ray never started.

Profiles (docs/testing.md): 120 examples of the first property and 40 of the second in the
default profile (what ``pytest`` and CI run, derandomized); 10,000 of each in the long one, run
before a release (``TPUEMB_PROPERTY_EXAMPLES`` sets the count of both in either):

    TPUEMB_TEST_PROFILE=long .venv/bin/python -m pytest -q tests/test_cli_properties.py
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, derandomized, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES_COUNT = examples(120, long=10_000)
#: The Ray options' examples: 40 by default (CI), as many as the others when the profile says.
RAY_EXAMPLES_COUNT = examples(40, long=10_000)
SUBPROCESS = os.environ.get("TPUEMB_PROPERTY_SUBPROCESS") == "1"
MEMORY_CAP = 6 << 30  # address space of one command (numba reserves some for its compiler)
DOCUMENTED_EXITS = {0, 1, 2}

QUICKSTART = (EXAMPLES / "quickstart.pbtxt").read_text(encoding="utf-8")
SMALL = """table_descriptor {
  name: "t"
  vocabulary_size: 50
  dimension: 4
  optimization_parameters {
    adagrad { }
    learning_rate { constant: 0.1 }  # tpuemb: disable=OPT010
  }
}
feature_descriptor { name: "f" table_id: 0 input_shape: 8 }
mode: TRAINING
num_hosts: 1
num_tensor_cores: 1
"""
ESCAPED = SMALL.replace('name: "t"', 'name: "t\\033]0;pwned\\007"')
SPEC_PY = """from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig
table = TableConfig(vocabulary_size=30, dim=4, name="t")
feature_config = {"f": FeatureConfig(table=table, name="f")}
optimizer = SGD(learning_rate=0.1)
per_replica_batch_size = 4
"""
SPEC_CHDIR = "import os\nos.makedirs('elsewhere', exist_ok=True)\nos.chdir('elsewhere')\n" + SPEC_PY

#: name -> (bytes, extension): the input files the examples draw from.
CONTENTS: dict[str, tuple[bytes, str]] = {
    "small": (SMALL.encode(), ".pbtxt"),
    "quickstart": (QUICKSTART.encode(), ".pbtxt"),
    "bom": (b"\xef\xbb\xbf" + SMALL.encode(), ".pbtxt"),
    "unformatted": (SMALL.replace("\n  ", "\n").replace("{ }", "{}").encode(), ".pbtxt"),
    "escaped-name": (ESCAPED.encode(), ".pbtxt"),
    "not-utf8": (b"table_descriptor { name: \"\xff\xfe\" }\n", ".pbtxt"),
    "truncated": (SMALL.encode()[:97], ".pbtxt"),
    "json": (b'{"table_descriptor": [{"name": "t", "vocabulary_size": 50, "dimension": 4}]}',
             ".json"),
    "json-duplicate": (b'{"mode": "TRAINING", "mode": "INFERENCE", "num_hosts": 1}', ".json"),
    "binary-garbage": (bytes(range(256)) * 3, ".binpb"),
    "empty": (b"", ".pbtxt"),
    "spec": (SPEC_PY.encode(), ".py"),
    "spec-chdir": (SPEC_CHDIR.encode(), ".py"),
    "spec-exit": (b"import os\nos._exit(0)\n", ".py"),
    "spec-raise": (b"raise SystemExit(0)\n", ".py"),
}
STATES = ("file", "symlink", "hardlink", "readonly", "missing", "directory", "loop")
#: (command name, template); IN is the input, OUT an output file, DIR an output folder.
COMMANDS = (
    ("validate", ["validate", "IN"]),
    ("validate-json", ["validate", "--format", "json", "IN"]),
    ("validate-sarif", ["validate", "--format", "sarif", "IN"]),
    ("validate-fix", ["validate", "--fix", "IN"]),
    ("fmt", ["fmt", "IN"]),
    ("fmt-check", ["fmt", "--check", "IN"]),
    ("fmt-filter", ["fmt", "-"]),
    ("convert-out", ["convert", "IN", "-o", "OUT"]),
    ("convert-stdout", ["convert", "IN", "--to", "json"]),
    ("inspect", ["inspect", "IN"]),
    ("compile", ["compile", "IN", "-o", "OUT"]),
    ("simulate", ["simulate", "IN", "--steps", "1", "--quiet", "--out-dir", "DIR"]),
)
CHANGES_INPUT = {"fmt", "validate-fix"}
#: Fork servers by what their children find imported: the commands that load the executor,
#: NumPy and numba when they run (``simulate``; ``inspect`` and ``compile`` load NumPy and parts
#: of the executor) fork from a server that imported them; the others (which never import
#: them) from one that did not, so their children end (interpreter finalization) as quickly as
#: their own processes would.
SERVER_MODULES: dict[str, tuple[str, ...]] = {
    "commands": (),
    "executor": ("tpuemb_cfg.executor.core", "tpuemb_cfg.executor.engines.numpy",
                 "tpuemb_cfg.executor.engines.numba", "tpuemb_cfg.sim", "tpuemb_cfg.session",
                 "tpuemb_cfg.validation.inspect_summary", "tpuemb_cfg.embedding"),
}
SERVER_OF = {"simulate": "executor", "inspect": "executor", "compile": "executor"}
OUT_STATES = ("new", "onto-input", "readonly-dir", "directory")
STDOUTS = ("pipe", "full", "closed")


@dataclass
class Case:
    content: str
    state: str
    command: str
    out_state: str
    out_ext: str
    stdout: str
    folder: Path = field(default_factory=Path)


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry below ``folder``: (inode, mode, bytes of a regular file)."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) and os.access(
                path, os.R_OK) else None
            out[str(path.relative_to(folder))] = (info.st_ino, info.st_mode, data)
    return out


def _build(case: Case) -> tuple[list[str], bytes | None, Path, Path]:
    """The folder's files; returns (argv, stdin, input path, output path)."""
    folder = case.folder
    data, ext = CONTENTS[case.content]
    source = folder / f"config{ext}"
    given = source
    if case.state in ("file", "readonly", "hardlink", "symlink"):
        source.write_bytes(data)
    if case.state == "readonly":
        source.chmod(0o444)
    elif case.state == "hardlink":
        os.link(source, folder / f"other{ext}")
    elif case.state == "symlink":
        given = folder / f"link{ext}"
        given.symlink_to(source.name)
    elif case.state == "directory":
        source.mkdir()
    elif case.state == "loop":
        given = folder / f"loop{ext}"
        given.symlink_to(given.name)
    out = folder / f"out{case.out_ext}"
    if case.out_state == "onto-input":
        if case.state in ("file", "readonly", "hardlink", "symlink"):
            out.symlink_to(source.name)
    elif case.out_state == "readonly-dir":
        locked = folder / "locked"
        locked.mkdir()
        out = locked / f"out{case.out_ext}"
    elif case.out_state == "directory":
        out.mkdir()
    template = dict(COMMANDS)[case.command]
    argv = [str(given.name) if a == "IN" else str(out.relative_to(folder)) if a == "OUT"
            else "run-out" if a == "DIR" else a for a in template]
    stdin = data if case.command == "fmt-filter" else None
    return argv, stdin, source, out


def _environment() -> dict[str, str]:
    """The commands' environment: this one without the profile's variables, the checkout
    first on the import path, a dumb terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUEMB_PROPERTY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TERM"] = "dumb"
    return env


class ForkServer:
    """``tests/cli_forkserver.py``: one process that has imported the command's modules (and
    ``modules``) and forks a fresh child per example, which starts as ``python -m tpuemb_cfg``
    does (its own session, the memory cap, a pipe for standard input, the files or a closed
    descriptor for the standard streams) and ends as that process would."""

    def __init__(self, folder: Path, modules: tuple[str, ...] = ()) -> None:
        self._requests_read, self._requests = os.pipe()
        self._replies, self._replies_write = os.pipe()
        self._log = folder / "forkserver.stderr"
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "cli_forkserver.py"),
                 str(self._requests_read), str(self._replies_write), *modules],
                env=_environment(), cwd=folder, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=log,
                pass_fds=(self._requests_read, self._replies_write))
        os.close(self._requests_read)
        os.close(self._replies_write)
        self._answers = os.fdopen(self._replies, "r", encoding="utf-8")

    def run(self, request: dict[str, object]) -> int:
        os.write(self._requests, (json.dumps(request) + "\n").encode())
        line = self._answers.readline()
        assert line, f"the fork server ended: {self._log.read_text(errors='replace')[-3000:]}"
        code = json.loads(line)["returncode"]
        if code == "timeout":
            raise subprocess.TimeoutExpired(request["argv"], request["timeout"])  # type: ignore[arg-type]
        return int(code)

    def close(self) -> None:
        os.close(self._requests)
        self._process.wait(timeout=60)
        self._answers.close()


_server: dict[str, ForkServer] = {}


@pytest.fixture(scope="module", autouse=True)
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The fork servers of this module's examples (none when each runs as its own process);
    they start side by side."""
    if not SUBPROCESS:
        for name, modules in SERVER_MODULES.items():
            _server[name] = ForkServer(tmp_path_factory.mktemp(f"forkserver-{name}"), modules)
    yield
    while _server:
        _server.popitem()[1].close()


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    os.setsid()


def _run(case: Case, argv: list[str], stdin: bytes | None) -> tuple[int, bytes, bytes]:
    stderr_path = case.folder.parent / f"{case.folder.name}.stderr"
    stdout_path = case.folder.parent / f"{case.folder.name}.stdout"
    if _server:
        code = _server[SERVER_OF.get(case.command, "commands")].run({
            "argv": argv, "cwd": str(case.folder),
            "stdin": (stdin or b"").decode("latin-1"),
            "stdout": {"full": "/dev/full", "closed": None}.get(case.stdout, str(stdout_path)),
            "stderr": str(stderr_path), "memory_cap": MEMORY_CAP, "timeout": 120,
        })
        if not stdout_path.exists():
            stdout_path.write_bytes(b"")
        return code, stdout_path.read_bytes(), stderr_path.read_bytes()
    with open(stderr_path, "wb") as err, open(stdout_path, "wb") as out:
        stdout: int | object = out
        if case.stdout == "full":
            stdout = os.open("/dev/full", os.O_WRONLY)

        def preexec() -> None:
            _limits()
            if case.stdout == "closed":
                os.close(1)

        try:
            result = subprocess.run(
                [sys.executable, "-m", "tpuemb_cfg", *argv], cwd=case.folder, env=_environment(),
                input=stdin if stdin is not None else b"",
                stdout=stdout,  # type: ignore[arg-type]
                stderr=err, timeout=120, preexec_fn=preexec)
        finally:
            if isinstance(stdout, int):
                os.close(stdout)
    return result.returncode, stdout_path.read_bytes(), stderr_path.read_bytes()


def _outputs(case: Case, out: Path) -> set[str]:
    """Paths (relative to the folder) a successful command may create."""
    name = str(out.relative_to(case.folder))
    return {
        "convert-out": {name}, "compile": {name},
        "simulate": {"run-out", "run-out/tables.npz", "run-out/summary.json",
                     "run-out/checkpoint.npz"},
    }.get(case.command, set())


def check(case: Case) -> None:
    argv, stdin, source, out = _build(case)
    before = _snapshot(case.folder)
    code, stdout, stderr = _run(case, argv, stdin)
    after = _snapshot(case.folder)
    what = f"{case} -> exit {code}\nstderr: {stderr[-2000:]!r}"
    assert b"Traceback (most recent call last)" not in stderr + stdout, what
    assert code in DOCUMENTED_EXITS, what
    assert b"\x1b" not in stdout + stderr, f"a raw escape byte was printed: {what}"
    # Inputs: unchanged, unless the command changes its input by design.
    for name, (inode, mode, data) in before.items():
        assert name in after, f"{name} was removed: {what}"
        now = after[name]
        if now[2] == data and now[1] == mode:
            continue
        linked = {source.name} | ({f"other{source.suffix}"} if case.state == "hardlink" else set())
        changer = case.command in CHANGES_INPUT and name in linked and code in (0, 1)
        assert changer, f"{name} changed: {what}"
        if now[2] is not None:  # rewritten in place or replaced: the permissions stay
            assert stat.S_IMODE(now[1]) == stat.S_IMODE(mode), f"mode of {name} changed: {what}"
        if data is not None and data.startswith(b"\xef\xbb\xbf"):
            assert now[2] is not None and now[2].startswith(b"\xef\xbb\xbf"), f"BOM lost: {what}"
        if case.state == "hardlink" and now[0] != inode:
            assert b"link" in stderr, f"a hard link was detached silently: {what}"
    # New files: only the outputs, and only on success.
    new = set(after) - set(before)
    # a spec that makes a folder and changes into it: the folder is the spec's doing, but
    # nothing of tpuemb's may land in it
    assert not any(n.startswith("elsewhere/") for n in new), f"output followed chdir: {what}"
    new.discard("elsewhere")
    if code == 2 and not (case.stdout != "pipe" and b"standard output" in stderr):
        # (a run whose files were complete when printing its summary failed keeps them)
        assert not new, f"a failed command left {sorted(new)}: {what}"
    else:
        allowed = _outputs(case, out)
        assert new <= allowed, f"unexpected files {sorted(new - allowed)}: {what}"
    if case.command == "fmt-filter" and code == 0 and stdin:
        assert stdout.strip(), f"fmt - wrote nothing for a non-empty input: {what}"
    if case.content == "json-duplicate" and case.state in ("file", "symlink", "readonly",
                                                         "hardlink"):
        if case.command not in ("fmt", "fmt-check", "fmt-filter", "compile", "simulate"):
            # refused, whatever is said first (an output path onto the input is refused
            # before anything is read); when nothing else is wrong, the key is the reason
            assert code == 2, what
            if case.out_state == "new" and case.stdout == "pipe":
                assert b"twice" in (stdout + stderr).lower(), what


cases = st.builds(
    Case,
    content=st.sampled_from(sorted(CONTENTS)),
    state=st.sampled_from(STATES),
    command=st.sampled_from([name for name, _ in COMMANDS]),
    out_state=st.sampled_from(OUT_STATES),
    out_ext=st.sampled_from([".pbtxt", ".json", ".binpb", ".txt"]),
    stdout=st.sampled_from(STDOUTS),
)


@settings(max_examples=EXAMPLES_COUNT, deadline=None,
          derandomize=derandomized(EXAMPLES_COUNT),
          suppress_health_check=[HealthCheck.too_slow])
@given(case=cases)
def test_every_command_under_every_input_is_safe(case: Case) -> None:
    with tempfile.TemporaryDirectory() as top:
        case.folder = Path(top) / "work"
        case.folder.mkdir()
        try:
            check(case)
        finally:
            for dirpath, dirnames, _ in os.walk(top):
                for name in dirnames:  # read-only folders would keep the cleanup out
                    os.chmod(Path(dirpath) / name, 0o755)


# ------------------------------------------------------------------------------------------------
# The Ray options under arbitrary values

#: ``simulate`` and ``bench`` with ``--backend ray``: the options each example adds values to.
RAY_COMMANDS = {
    "simulate": ["simulate", "config.pbtxt", "--steps", "1", "-q", "--out-dir", "run-out",
                 "--backend", "ray"],
    "dry-run": ["simulate", "config.pbtxt", "--dry-run", "--backend", "ray"],
    "bench": ["bench", "--vocab", "10", "--ids", "4", "--steps", "1", "--backend", "ray"],
}
#: The files an ``@FILE`` value may name (created in each example's folder).
RAY_FILES = {
    "env.json": b'{"env_vars": {"A": "1"}}',
    "deep.json": b'{"a": ' * 100_000,
    "large.json": b'{"env_vars": {"A": "' + b"x" * 70_000 + b'"}}',
    "bad.json": b'\xff\xfe{"pip": []}',
}
#: The input limit of the examples (``@/dev/zero`` stops at it).
RAY_INPUT_LIMIT = "64K"
#: Characters of free text: anything an argument can hold but NUL (and ESC and CSI, whose
#: escaping the main property test covers; ``--shards`` gets printable ASCII only, as click
#: echoes the value of a malformed number raw).
_ARGUMENT_TEXT = st.text(st.characters(blacklist_categories=("Cs",),
                                       blacklist_characters="\x00\x1b\x9b"), max_size=40)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _ARGUMENT_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["pip", "env_vars", "working_dir", "py_modules", "excludes", "conda",
                         "container", "config", "uv", "image_uri", "x"]) | _ARGUMENT_TEXT,
        inner, max_size=3),
    max_leaves=12)
RUNTIME_ENVS = st.one_of(
    _JSON_VALUES.map(json.dumps),
    _ARGUMENT_TEXT,
    st.sampled_from([f"@{name}" for name in RAY_FILES]
                    + ["@missing.json", "@/dev/zero", "@/dev/null", "@.", "@", "@-"]),
    st.integers(1, 5000).map(lambda n: "[" * n),
    st.integers(1, 100).map(lambda n: '{"env_vars": ' * n + "{}" + "}" * n),
)


def ray_addresses(closed: int) -> st.SearchStrategy[str]:
    """Addresses where no Ray answers (``closed``: a port of this machine the test holds
    without listening) or that the command refuses (any port text); never ``auto``, ``local``
    or a host but this machine's (those would join or start Ray, or send traffic - a name
    lookup included - off this machine)."""
    hosts = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "ray://127.0.0.1", " 127.0.0.1",
                             ""])
    ports = st.one_of(st.just(str(closed)), st.integers(-2, 2**70).map(str), _ARGUMENT_TEXT)
    return st.builds(lambda h, p: f"{h}:{p}", hosts, ports)


@dataclass
class RayCase:
    command: str
    runtime_env: str | None
    address: str
    shards: str | None
    no_ship: bool


def _ray_run(folder: Path, argv: list[str]) -> tuple[int, bytes, bytes]:
    """``tpuemb ARGV`` in ``folder`` (forked from the executor's fork server, or a process of
    its own), with the examples' input limit: (exit status, stdout, stderr)."""
    stdout_path, stderr_path = folder / "stdout", folder / "stderr"
    env = {"TPUEMB_MAX_INPUT": RAY_INPUT_LIMIT}
    if _server:
        code = _server["executor"].run({
            "argv": argv, "cwd": str(folder / "work"), "stdin": "", "env": env,
            "stdout": str(stdout_path), "stderr": str(stderr_path), "memory_cap": MEMORY_CAP,
            "timeout": 120})
        return code, stdout_path.read_bytes(), stderr_path.read_bytes()
    done = subprocess.run([sys.executable, "-m", "tpuemb_cfg", *argv], cwd=folder / "work",
                          env={**_environment(), **env}, input=b"", capture_output=True,
                          timeout=120, preexec_fn=_limits)
    return done.returncode, done.stdout, done.stderr


def check_ray(case: RayCase, folder: Path) -> None:
    work = folder / "work"
    work.mkdir()
    (work / "config.pbtxt").write_text(SMALL.replace("num_hosts: 1", "num_hosts: 2"))
    for name, data in RAY_FILES.items():
        (work / name).write_bytes(data)
    before = _snapshot(work)
    argv = [*RAY_COMMANDS[case.command], "--ray-address", case.address]
    if case.runtime_env is not None:
        argv += ["--runtime-env", case.runtime_env]
    if case.shards is not None:
        argv += ["--shards", case.shards]
    if case.no_ship:
        argv.append("--no-ship")
    code, stdout, stderr = _ray_run(folder, argv)
    what = f"{case} -> exit {code}\nstderr: {stderr[-2000:]!r}\nstdout: {stdout[-500:]!r}"
    assert b"Traceback" not in stdout + stderr, what
    # Refused (nothing answers at the address): exit 2, and one line - or click's usage
    # block for a value of the wrong kind, which ends in its one "Error:" line.
    assert code == 2, what
    lines = stderr.decode("utf-8", "replace").strip().split("\n")  # the terminal's lines
    assert len(lines) == 1 or (lines[0].startswith("Usage: ") and lines[-1].startswith(
        "Error: ")), what
    assert not stdout.strip(), what
    assert _snapshot(work) == before, f"files changed: {what}"


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A port of this machine bound without listening for the module: nothing answers there."""
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    try:
        yield held.getsockname()[1]
    finally:
        held.close()


@settings(max_examples=RAY_EXAMPLES_COUNT, deadline=None,
          derandomize=derandomized(EXAMPLES_COUNT), suppress_health_check=[
              HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_ray_options_under_any_value_are_refused_in_one_line(
        data: st.DataObject, closed_port: int) -> None:
    """``--runtime-env``, ``--ray-address``, ``--shards`` and ``--no-ship`` of ``--backend ray``
    with arbitrary values, at an address where nothing answers: exit 2 and one line (or
    click's usage block), never a traceback, no file changed; Ray never starts (the address
    refuses every run the options would allow)."""
    case = RayCase(command=data.draw(st.sampled_from(sorted(RAY_COMMANDS))),
                   runtime_env=data.draw(st.none() | RUNTIME_ENVS),
                   address=data.draw(ray_addresses(closed_port)),
                   shards=data.draw(st.none() | st.integers(-3, 2**65).map(str)
                                    | st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                              max_size=10)),
                   no_ship=data.draw(st.booleans()))
    with tempfile.TemporaryDirectory() as top:
        check_ray(case, Path(top))
