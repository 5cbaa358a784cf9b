"""Random and mutated inputs never produce a traceback: only diagnostics and exit 1 or 2."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from click.testing import CliRunner
from conftest import EXAMPLES, examples
from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuemb_cfg import TPUEmbeddingConfiguration
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.cli import main
from tpuemb_cfg.formats.io import read_source
from tpuemb_cfg.model.derived import derive, host_sizes
from tpuemb_cfg.rules import Diagnostic
from tpuemb_cfg.validation.fix import fix_source
from tpuemb_cfg.validation.report import FORMATS, FileReport, render
from tpuemb_cfg.validation.validator import validate

FD = FieldDescriptor
INT32 = st.one_of(
    st.sampled_from([0, 1, 2, 3, -1, 7, 2**31 - 1, -(2**31), 65536, 32768]),
    st.integers(-(2**31), 2**31 - 1),
)
INT64 = st.one_of(
    st.sampled_from([0, 1, 2, -1, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1)
)
FLOAT = st.floats(width=32, allow_nan=True, allow_infinity=True)
TEXT = st.text(alphabet="ab\x00\u00e9 '\"", max_size=3)
ENUM = st.integers(-2, 5)

SCALARS = {
    FD.TYPE_INT32: INT32,
    FD.TYPE_INT64: INT64,
    FD.TYPE_FLOAT: FLOAT,
    FD.TYPE_DOUBLE: st.floats(),
    FD.TYPE_BOOL: st.booleans(),
    FD.TYPE_STRING: TEXT,
    FD.TYPE_ENUM: ENUM,
}


def fill(data: st.DataObject, message: Any, depth: int) -> None:
    """Set a random subset of ``message``'s fields, at most one member per oneof."""
    desc = message.DESCRIPTOR
    chosen_oneof = {
        oneof.name: data.draw(st.sampled_from([None, *[f.name for f in oneof.fields]]))
        for oneof in desc.oneofs
    }
    for field in desc.fields:
        if (
            field.containing_oneof is not None
            and chosen_oneof[field.containing_oneof.name] != field.name
        ):
            continue
        if field.containing_oneof is None and not data.draw(st.booleans()):
            continue
        repeated = field.is_repeated
        if field.type == FD.TYPE_MESSAGE:
            if depth <= 0:
                continue
            count = data.draw(st.integers(0, 4)) if repeated else 1
            for _ in range(count):
                sub = (
                    getattr(message, field.name).add() if repeated else getattr(message, field.name)
                )
                sub.SetInParent()
                fill(data, sub, depth - 1)
        elif repeated:
            getattr(message, field.name).extend(
                data.draw(st.lists(SCALARS[field.type], max_size=3))
            )
        else:
            setattr(message, field.name, data.draw(SCALARS[field.type]))


@st.composite
def configs(draw: st.DrawFn) -> TPUEmbeddingConfiguration:
    data = draw(st.data())
    config = TPUEmbeddingConfiguration()
    fill(data, config, depth=6)
    return config


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_random_messages_give_only_diagnostics(config: TPUEmbeddingConfiguration) -> None:
    derived = derive(config)
    host_sizes(config, derived)
    found = validate(config, show_derived=True, options={"memory_budget_bytes": 1024})
    assert all(isinstance(d, Diagnostic) for d in found)
    crashed = [d for d in found if "internal error in rule" in d.message]
    assert crashed == []
    reports = [FileReport("random.pbtxt", found)]
    for fmt in FORMATS:
        output = render(fmt, reports)
        if fmt in ("json", "sarif"):
            json.loads(output)
        elif fmt == "junit":
            ElementTree.fromstring(output.split("\n", 1)[1])


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_random_binary_files_exit_1_or_2_and_fix_safely(config: TPUEmbeddingConfiguration) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.binpb"
        path.write_bytes(config.SerializeToString())
        result = CliRunner().invoke(main, ["validate", "--format", "json", str(path)])
        assert result.exit_code in (0, 1, 2), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        try:
            fixed = fix_source(read_source(str(path)))
        except InputError:
            return
        if fixed.changed:
            parsed = TPUEmbeddingConfiguration.FromString(fixed.data)
            assert sorted(derive(parsed).tag_map) == list(range(derive(parsed).k))


def _seed_texts() -> list[str]:
    texts = [p.read_text() for p in sorted(EXAMPLES.glob("*.pbtxt"))]
    texts.append(
        'mode: TRAINING\ntable_descriptor { name: "a" num_features: 2 optimization_parameters '
        "{ learning_rate { dynamic { tag: 3 } } frequency_aware_adagrad { } } }\n"
        "batch_size_per_tensor_core: 8\n"
    )
    return texts


SEEDS = _seed_texts()
NOISE = st.text(alphabet="{}<>[]:#\"'-.0123456789abcdef_ \n", max_size=6)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        at = draw(st.integers(0, len(text) - 1))
        kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 20)) :]
        elif kind == "insert":
            text = text[:at] + draw(NOISE) + text[at:]
        elif kind == "replace":
            text = text[:at] + draw(NOISE) + text[at + draw(st.integers(1, 6)) :]
        else:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end + 1
            text = text[:end] + text[start:end] + text[end:]
    return text


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.sampled_from(FORMATS))
def test_mutated_text_never_tracebacks(text: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.pbtxt"
        path.write_text(text)
        result = CliRunner().invoke(
            main, ["validate", "--show-derived", "--format", fmt, str(path)]
        )
        assert result.exit_code in (0, 1, 2), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.exception
        )
        if "internal error in rule" in result.output:
            raise AssertionError(result.output)
        parsed_before = _parses(path)
        fixed = CliRunner().invoke(main, ["validate", "--fix", str(path)])
        assert fixed.exit_code in (0, 1, 2)
        assert fixed.exception is None or isinstance(fixed.exception, SystemExit), fixed.exception
        if parsed_before:
            assert _parses(path), "--fix wrote a file that does not parse"


def _parses(path: Path) -> bool:
    try:
        text_format.Parse(path.read_text(), TPUEmbeddingConfiguration())
    except (text_format.ParseError, ValueError, TypeError):
        return False
    return True


def _same_positions(text: str) -> None:
    """Locating findings element by element (or, for an unusual top level, in one stream of
    the whole text) places every finding where the full scan does, and sees the same
    suppression comments."""
    from tpuemb_cfg.formats.locations import scan_locations
    from tpuemb_cfg.validation.validator import (
        _locate,
        _locate_in_whole_text,
        _position,
        run_rules,
        selected_rules,
    )

    config = TPUEmbeddingConfiguration()
    try:
        text_format.Parse(text, config)
    except (text_format.ParseError, ValueError, TypeError):
        return
    paths = [d.field_path for d in run_rules(config, selected_rules(show_derived=True))]
    paths += ["", "table_descriptor", "feature_descriptor[0]", "table_descriptor[99].name"]
    full = scan_locations(text, config.DESCRIPTOR)
    for chosen in (paths, paths[:1], paths[-1:], paths[::-1]):
        for locate in (_locate, _locate_in_whole_text):
            placed = locate(text, config.DESCRIPTOR, chosen)
            for k, path in enumerate(chosen):
                where = _position(full, path)
                assert (placed.lines[k], placed.columns[k]) == where, path
                assert placed.comments[k] == full.line_comments.get(where[0]), path


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_partial_locations_match_full_scan_on_mutated_text(text: str) -> None:
    _same_positions(text)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.booleans())
def test_partial_locations_match_full_scan_on_printed_messages(
    config: TPUEmbeddingConfiguration, one_line: bool
) -> None:
    _same_positions(text_format.MessageToString(config, as_one_line=one_line))
