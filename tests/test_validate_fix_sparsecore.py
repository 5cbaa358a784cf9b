"""`tpuemb validate --fix` of SC001 in a SparseCore spec: the limit key renamed is the string
literal that made the key, in the dictionary the spec passed, and no other byte of the file
changes (line endings, byte-order mark, comments, the other dictionaries).

Tables ``user`` and ``video`` (same width and optimizer) are stacked as ``user_video``
(docs/sparsecore/rules.md, SC001), so a key ``"user"`` must become ``"user_video"``. Each
expected file is written out by hand: the input with only the key's literal replaced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rulecheck import invoke

pytest.importorskip("tpuemb_cfg.sparsecore.feed")
pytest.importorskip("tpuemb_cfg.embedding.sparsecore")

HEAD = (
    "from tpuemb_cfg.embedding import (\n"
    "    Adagrad, FeatureConfig, SparseCoreEmbeddingConfig, TableConfig)\n"
    "\n"
    'topology = "v6e-8"\n'
    "optimizer = Adagrad(learning_rate=0.01)\n"
    'user = TableConfig(vocabulary_size=2_000_000, dim=64, name="user")\n'
    'video = TableConfig(vocabulary_size=1_000_000, dim=64, name="video")\n'
)
FEATURES = (
    "feature_config = {\n"
    '    "user": FeatureConfig(user, output_shape=[128]),\n'
    '    "video": FeatureConfig(video, output_shape=[128]),\n'
    "}\n"
)


def fix(tmp_path: Path, data: bytes, *args: str) -> tuple[bytes, str, int]:
    """The spec's bytes after `tpuemb validate --fix --select SC001`, what it printed (the
    notes, then the findings left) and its status."""
    path = tmp_path / "spec.py"
    path.write_bytes(data)
    result = invoke("validate", "--fix", "--select", "SC001", *args, str(path))
    return path.read_bytes(), result.output, result.exit_code


def test_a_limits_dict_held_in_a_variable_is_renamed_where_it_is_written(tmp_path: Path) -> None:
    # The feature_config key "user" (the feature's name) comes first in the file: it must stay.
    before = (HEAD + FEATURES + 'LIMITS = {"user": 64}\n'
              "sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_table=LIMITS)\n")
    after, err, status = fix(tmp_path, before.encode())
    assert after == before.replace('{"user": 64}', '{"user_video": 64}').encode()
    assert status == 0, err
    assert "spec.py:12: renamed the limit key 'user' to 'user_video' (SC001)" in err


@pytest.mark.parametrize(("limits", "fixed"), [
    # "us\x65r" is "user"; the unique-id limits' "user" is a finding of its own, in its own
    # dictionary (the old fix wrote both renames over the escaped literal)
    ('    max_ids_per_table={"us\\x65r": 32},  # "user"\n'
     '    max_unique_ids_per_table={"user": 16},\n',
     '    max_ids_per_table={"user_video": 32},  # "user"\n'
     '    max_unique_ids_per_table={"user_video": 16},\n'),
    # max_unique_ids_per_table already keys the stack: its "user" is reported, not renamed
    ('    max_unique_ids_per_table={"user": 16, "user_video": 8},\n'
     '    max_ids_per_table={"us\\x65r": 32},\n',
     '    max_unique_ids_per_table={"user": 16, "user_video": 8},\n'
     '    max_ids_per_table={"user_video": 32},\n'),
])
def test_an_escaped_key_is_renamed_where_it_is_written(tmp_path: Path, limits: str,
                                                       fixed: str) -> None:
    call = HEAD + FEATURES + "sparse_core_config = SparseCoreEmbeddingConfig(\n"
    after, err, status = fix(tmp_path, (call + limits + ")\n").encode())
    assert after == (call + fixed + ")\n").encode()
    assert status == 0, err


def test_a_crlf_spec_with_a_bom_keeps_both(tmp_path: Path) -> None:
    text = (HEAD + FEATURES + "sparse_core_config = SparseCoreEmbeddingConfig(\n"
            "    max_ids_per_table={'user': 1024},  # é\n)\n")
    before = b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()
    after, err, status = fix(tmp_path, before)
    assert after == before.replace(b"{'user': 1024}", b"{'user_video': 1024}")
    assert status == 0, err


def test_diff_shows_the_change_and_writes_nothing(tmp_path: Path) -> None:
    before = (HEAD + FEATURES + 'sparse_core_config = SparseCoreEmbeddingConfig('
              'max_ids_per_table={"user": 8})\n').encode()
    after, err, status = fix(tmp_path, before, "--diff")
    assert after == before
    assert "[--diff: not written]" in err


@pytest.mark.parametrize(("limits", "why"), [
    # bound twice: which binding the call saw is not certain from the text
    ('LIMITS = {"user": 64}\nLIMITS = {"user": 64}\n', "which is bound 2 times"),
    # used elsewhere (it may be changed there)
    ('LIMITS = {"user": 64}\nprint(LIMITS)\n', "which line 13 also uses"),
    # built by code
    ('LIMITS = dict(user=64)\n', "which line 12 does not set to a dictionary literal"),
    # a key added after the literal
    ('LIMITS = {}\n', "which line 13 also uses"),
])
def test_a_key_that_cannot_be_located_for_certain_is_reported_not_fixed(
        tmp_path: Path, limits: str, why: str) -> None:
    extra = 'LIMITS["user"] = 64\n' if limits == "LIMITS = {}\n" else ""
    before = (HEAD + FEATURES + limits + extra +
              "sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_table=LIMITS)\n"
              ).encode()
    after, err, status = fix(tmp_path, before)
    assert after == before
    assert status == 0  # a warning
    assert "not fixed (SC001): the max_ids_per_table key 'user' cannot be located" in err
    assert why in err
    assert "rename it to 'user_video' by hand" in err
    call = before.count(b"\n")  # the last line
    assert f"spec.py:{call}:1: warning[SC001] max_ids_per_table key 'user' (64)" in err


def test_the_finding_is_placed_at_the_key_the_spec_passed(tmp_path: Path) -> None:
    path = tmp_path / "spec.py"
    path.write_text(HEAD + FEATURES + 'LIMITS = {"user": 64}\n'
                    "sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_table=LIMITS)\n")
    result = invoke("validate", "--select", "SC001", str(path))
    assert result.output.startswith(f"{path}:12:11: warning[SC001]")


# -- a fix never changes any other byte ----------------------------------------------------------

_NOISE = st.sampled_from(["", "# user\n", '"user"\n', "x = {'user': 1}\n", "# é ‮\n"])


@settings(max_examples=examples(25), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(newline=st.sampled_from(["\n", "\r\n", "\r"]), bom=st.booleans(),
       quote=st.sampled_from(['"', "'"]),
       spelling=st.sampled_from(["user", "us\\x65r", "u\\u0073er", "us' 'er"]),
       variable=st.booleans(), noise=st.lists(_NOISE, min_size=3, max_size=3))
def test_a_fix_changes_the_key_literal_and_no_other_byte(
        tmp_path: Path, newline: str, bom: bool, quote: str, spelling: str, variable: bool,
        noise: list[str]) -> None:
    """The file is built as ``prefix + key literal + suffix``; the fixed file must be exactly
    ``prefix + "user_video" literal + suffix``, whatever the line endings, byte-order mark,
    quotes, escapes and lookalike text around it."""
    spelled = spelling.replace("'", quote)
    if variable:
        prefix = noise[0] + HEAD + noise[1] + FEATURES + "LIMITS = {"
        suffix = (": 64}\n" + noise[2] +
                  "sparse_core_config = SparseCoreEmbeddingConfig(max_ids_per_table=LIMITS)\n")
    else:
        prefix = (noise[0] + HEAD + FEATURES + noise[1] +
                  "sparse_core_config = SparseCoreEmbeddingConfig(\n    max_ids_per_table={")
        suffix = ": 64},\n)\n" + noise[2]

    def encode(text: str) -> bytes:
        return text.replace("\n", newline).encode()

    head = (b"\xef\xbb\xbf" if bom else b"") + encode(prefix)
    literal = quote + spelled + quote
    after, err, status = fix(tmp_path, head + literal.encode() + encode(suffix))
    assert after == head + (quote + "user_video" + quote).encode() + encode(suffix), err
    assert status == 0, err
