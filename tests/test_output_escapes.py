"""Names and option values are the user's data, never terminal commands: a table or feature name
and an option value holding each kind of escape (C0 controls, CSI, OSC ended by BEL or by ST,
the one-byte C1 CSI U+009B and OSC U+009D, a bidirectional override) reach no output raw, in
any command and format, and the text outputs show them visibly (``\\x1b``); JSON and SARIF keep
the true name (escaped by JSON).
"""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, zipf_sample

from tpuemb_cfg.base.errors import printable, printable_json

ROOT = Path(__file__).resolve().parents[1]

#: One of each: OSC ended by BEL (retitles the window), OSC ended by ST (a hyperlink), CSI
#: (clears the screen), the C1 CSI and OSC (one character each) ended by the C1 ST, DEL and a
#: right-to-left override.
EVIL = "u\x1b]0;owned\x07\x1b]8;;x\x1b\\\x1b[2J\x9b31m\x9d0;t\x9c\x7f\u202e"
#: How the text outputs show it.
SHOWN = r"u\x1b]0;owned\x07\x1b]8;;x\x1b\\x1b[2J\x9b31m\x9d0;t\x9c\x7f\u202e"


def assert_safe(text: str) -> None:
    """No character a terminal could act on: C0 controls but the line break and the tab, DEL,
    C1 controls, bidirectional overrides and isolates."""
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f
           or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]
    assert not bad, [hex(ord(c)) for c in bad]


def strings(document: Any) -> set[str]:
    """Every string of a JSON document, keys included."""
    if isinstance(document, str):
        return {document}
    if isinstance(document, dict):
        return set(document).union(*map(strings, document.values()))
    if isinstance(document, list):
        return set().union(*map(strings, document))
    return set()


def run(*args: str) -> Any:
    result = run_cli(*args)
    assert_safe(result.stdout)
    assert_safe(result.stderr)
    return result


def test_printable_escapes_each_kind_and_keeps_what_it_is_asked_to() -> None:
    assert printable(EVIL) == SHOWN
    assert printable("a\nb\tc", keep="\n") == "a\nb\\tc"
    assert printable("tables: é, 名前") == "tables: é, 名前"  # printable text is left alone
    document = json.dumps({"name": EVIL}, ensure_ascii=False)
    escaped = printable(document, json=True)
    assert_safe(escaped)
    assert json.loads(escaped) == {"name": EVIL}
    assert json.loads(printable_json({EVIL: [EVIL, "\U000e0001"]})) == {EVIL: [EVIL, "\U000e0001"]}


# -- SparseCore: inspect, validate, simulate, plan ------------------------------------------------

SPEC = f'''from tpuemb_cfg.embedding import (
    Adagrad, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig)

topology = "v6e-8"
optimizer = Adagrad(learning_rate=0.01)
N = {EVIL!r}
user = TableConfig(vocabulary_size=20_000, dim=64, name=N)
video = TableConfig(vocabulary_size=10_000, dim=64, name="video")
feature_config = {{
    N: FeatureConfig(user, output_shape=[128], name=N),
    "video": FeatureConfig(video, output_shape=[128]),
}}
sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_table={{N: 64}})
'''


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("tpuemb_cfg.sparsecore.feed")
    path = tmp_path_factory.mktemp("escapes") / "evil.py"
    path.write_text(SPEC)
    return str(path)


def _sample(config: str, rows: int, batch: int) -> str:
    zipf = zipf_sample()
    path = str(Path(config).with_suffix(".npz"))
    zipf.write(path, zipf.zipf_columns(zipf.schema_of(config), rows), batch)
    return path


def test_sparsecore_inspect_shows_the_names_escaped(spec: str) -> None:
    result = run("inspect", spec)
    assert result.exit_code == 0, result.output
    assert f"stack {SHOWN}_video:" in result.stdout
    assert f"  {SHOWN}: 20000 x 64" in result.stdout


def test_sparsecore_inspect_json_keeps_the_true_name(spec: str) -> None:
    result = run("inspect", "--json", spec)
    assert {f"{EVIL}_video", EVIL} <= strings(json.loads(result.stdout))


@pytest.mark.parametrize("fmt", ["text", "github", "json", "sarif"])
def test_validate_shows_the_key_escaped(spec: str, fmt: str) -> None:
    result = run("validate", "--format", fmt, spec)
    assert "SC001" in result.stdout
    if fmt == "json":  # the message quotes the key as Python does (repr), in every format
        messages = [d["message"] for f in json.loads(result.stdout)["files"]
                    for d in f["diagnostics"]]
        assert any(repr(EVIL) in m for m in messages)


def test_simulate_dry_run_and_run_show_the_names_escaped(spec: str, tmp_path: Path) -> None:
    result = run("simulate", "--dry-run", spec)
    assert result.exit_code == 0, result.output
    assert f"{SHOWN}_video  {SHOWN},video" in result.stdout
    result = run("simulate", spec, "--steps", "1", "--out-dir", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert f"{SHOWN}_video" in result.stdout


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_sparsecore_plan_shows_the_names_escaped(spec: str, fmt: str) -> None:
    sample = _sample(spec, 2048, 1024)
    result = run("plan", spec, "--ids", sample, "--format", fmt)
    assert result.exit_code == 0, result.output
    if fmt == "text":
        assert f"largest tables there: {SHOWN} " in result.stdout
    elif fmt == "json":
        assert EVIL in strings(json.loads(result.stdout))


def test_legacy_plan_shows_the_table_name_escaped(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "quickstart.pbtxt").read_text()
    octal = "".join(c if c.isprintable() and c != "\\" else
                    "".join(f"\\{b:03o}" for b in c.encode()) for c in EVIL)
    config = tmp_path / "evil.pbtxt"
    config.write_text(text.replace('name: "user"', f'name: "{octal}"', 1))
    sample = _sample(str(config), 384, 64)
    result = run("plan", str(config), "--ids", sample)
    assert result.exit_code == 0, result.output
    assert SHOWN in result.stdout
    result = run("plan", str(config), "--ids", sample, "--format", "json")
    assert EVIL in strings(json.loads(result.stdout))


# -- option values in refusals -------------------------------------------------------------------


@pytest.mark.parametrize("address", [f"{EVIL}:6379", f"ray://{EVIL}:6379"])
def test_a_ray_address_refusal_shows_the_address_escaped(
        address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before anything connects: no cluster answers (the connection is refused here,
    as it is by a host with nothing on the port), or ray:// without Ray Client's grpcio."""
    pytest.importorskip("ray")

    def refused(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setitem(__import__("sys").modules, "grpc", None)  # import grpc fails
    result = run("simulate", "--backend", "ray", "--ray-address", address, "--steps", "1")
    assert result.exit_code == 2
    assert f"--ray-address {printable(address)}: " in result.stderr


def test_an_option_value_click_refuses_is_shown_escaped() -> None:
    result = run("simulate", "--engine", EVIL)
    assert result.exit_code == 2
    assert "Invalid value for '--engine'" in result.stderr


def test_a_path_in_an_error_is_shown_escaped(tmp_path: Path) -> None:
    result = run("validate", str(tmp_path / f"{EVIL}.pbtxt"))
    assert result.exit_code == 2
    assert f"{SHOWN}.pbtxt: error[PARSE001]" in result.stdout


def test_a_progress_line_shows_a_name_escaped() -> None:
    """The simulate log's lines (a file or pipe as standard error) name checkpoint paths."""
    import io

    from tpuemb_cfg.commands._progress import RunLog

    stream = io.StringIO()
    RunLog("lines", stream, wall=lambda: 0.0).line(f"checkpoint {EVIL}.npz written")
    assert stream.getvalue() == (f"1970-01-01T00:00:00Z tpuemb simulate: checkpoint {SHOWN}.npz "
                                 "written\n")
