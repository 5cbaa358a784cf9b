"""`tpuemb convert` and `tpuemb fmt`: move between formats, and one canonical text layout.

The canonical layout is exactly what protobuf's ``text_format.MessageToString`` writes with default
options (fields in field-number order, two-space indentation, shortest float32 spelling), which is
also what TensorFlow-side tooling writes, so a formatted file diffs cleanly against theirs.
Comments are kept: a comment on a line of its own stays in front of the field that followed it, a
comment at the end of a field's line stays on that field's line; comments with no field after them
move to the end of the file. A ``# tpuemb: disable=ID`` at the end of a line silences the findings
of every field that starts on that line (:mod:`tpuemb_cfg.validation.validator`), so it is copied
onto each of them, each now on a line of its own.

A UTF-8 byte-order mark stays. ``fmt -`` is a filter (an editor's "format buffer"): it always
writes the text. A file with several hard links is not rewritten
(:func:`tpuemb_cfg.formats.atomic.refuse_hard_linked` says why and what to do).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Mapping

import click

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.commands.flags import echo
from tpuemb_cfg.formats.atomic import check_outputs, refuse_hard_linked
from tpuemb_cfg.formats.io import (
    atomic_write_bytes,
    detect_format,
    normalize_format,
    read_source,
    serialize,
)
from tpuemb_cfg.formats.locations import DISABLE, parent_path, scan_locations, tokenize
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

FORMATS = ["text", "binary", "json"]


@click.command()
@click.argument("source", metavar="IN")
@click.option("-o", "--output", "output", default="-", show_default=True, metavar="OUT",
              help="Output file; '-' writes to stdout.")
@click.option("--to", "to_format", type=click.Choice(FORMATS),
              help="Output format. Default: from OUT's extension (text for stdout).")
@click.option("--from", "from_format", type=click.Choice(FORMATS),
              help="Input format. Default: from IN's extension (text for stdin).")
def convert(source: str, output: str, to_format: str | None, from_format: str | None) -> None:
    """Convert configuration IN to another format.

    Formats follow the file extension: .pbtxt/.textproto/.txtpb text, .pb/.binpb/.bin binary,
    .json JSON (proto field names, as TensorFlow tooling writes it). The output bytes are exactly
    what TensorFlow writes for the same message. The output file is replaced atomically (a
    symbolic link is written through) and is never IN itself: that is refused before reading.

    \b
    Examples:
      tpuemb convert model.pbtxt -o model.binpb
      tpuemb convert model.binpb --to json > model.json
    """
    fmt = normalize_format(to_format) if to_format else detect_format(output, "--to", output=True)
    if output == "-" and fmt == "binary" and sys.stdout.isatty():
        raise UsageError("refusing to write binary protobuf to a terminal; use -o FILE")
    check_outputs([("-o", output)], [("IN", source)])
    src = read_source(source, from_format, format_option="--from")
    atomic_write_bytes(output, serialize(src.message, fmt))


def _comment_plan(
    text: str,
) -> tuple[list[str], dict[str, list[str]], dict[str, str], list[str]]:
    """Attach the comments of ``text`` to field paths: (header, leading, trailing, end-of-file).

    Comments above the first field are the file's header and stay at the top.
    """
    locations = scan_locations(text, TPUEmbeddingConfiguration.DESCRIPTOR)
    tokens, comments = tokenize(text)
    lines_with_tokens: dict[int, int] = {}
    for token in tokens:
        lines_with_tokens.setdefault(token.line, token.column)
    starts = sorted((pos, path) for path, pos in locations.positions.items())
    first_path_on_line = locations.path_at_line()
    paths_on_line: dict[int, list[str]] = {}
    for path in locations.order:
        paths_on_line.setdefault(locations.positions[path][0], []).append(path)
    raw_lines = text.split("\n")
    first_line = tokens[0].line if tokens else len(raw_lines) + 1
    header: list[str] = []
    leading: dict[str, list[str]] = {}
    trailing: dict[str, str] = {}
    tail: list[str] = []
    for line in sorted(comments):
        for body in comments[line]:
            if line < first_line:
                header.append("#" + body)
                continue
            source_line = raw_lines[line - 1]
            comment_col = source_line.find("#" + body) + 1
            has_code_before = line in lines_with_tokens and lines_with_tokens[line] < comment_col
            if has_code_before and line in first_path_on_line:
                path = first_path_on_line[line]
                trailing[path] = (trailing[path] + " " if path in trailing else "") + "#" + body
                # `# tpuemb: disable=ID` silences the findings of every field that starts on
                # its line; the canonical layout gives each of them a line of its own, so each
                # gets a copy of the directive (else a silenced finding would come back).
                directives = [m.group(0).rstrip() for m in DISABLE.finditer(body)]
                for other in paths_on_line[line][1:] if directives else ():
                    copy = " ".join(f"# {d}" for d in directives)
                    trailing[other] = (trailing[other] + " " if other in trailing else "") + copy
                continue
            after = next((p for (pos, p) in starts if pos[0] > line), None)
            if after is None:
                tail.append("#" + body)
            else:
                leading.setdefault(after, []).append("#" + body)
    return header, leading, trailing, tail


def format_text(text: str, message: TPUEmbeddingConfiguration) -> str:
    """The canonical text of ``message`` with the comments of ``text`` carried over."""
    canonical = serialize(message, "text").decode("utf-8")
    header, leading, trailing, tail = _comment_plan(text)
    if not header and not leading and not trailing and not tail:
        return canonical
    out_locations = scan_locations(canonical, TPUEmbeddingConfiguration.DESCRIPTOR)
    positions = out_locations.positions

    def resolve(path: str) -> str | None:
        for candidate in (path, path + "[0]"):
            if candidate in positions:
                return candidate
        return None

    leading_out: dict[str, list[str]] = {}
    for path, items in leading.items():
        target = resolve(path)
        if target is None:
            tail = items + tail
        else:
            leading_out.setdefault(target, []).extend(items)
    trailing_out = _trailing_targets(trailing, resolve, tail)
    body = _interleave(canonical, header, out_locations.path_at_line(), leading_out,
                       trailing_out)
    if tail:
        if body and not body.endswith("\n"):
            body += "\n"
        body += "\n".join(tail) + "\n"
    return body


def _trailing_targets(trailing: dict[str, str], resolve: Callable[[str], str | None],
                      tail: list[str]) -> dict[str, str]:
    """The trailing comments by the path of the canonical text they follow; those that follow
    no field of it are appended to ``tail``."""
    trailing_out: dict[str, str] = {}
    for path, comment in trailing.items():
        target = resolve(path)
        if target is None and DISABLE.search(comment):
            # a field the canonical text leaves out (a default value): the findings about it
            # are placed on its nearest ancestor, so the directive goes there
            ancestor = parent_path(path)
            while ancestor and target is None:
                target, ancestor = resolve(ancestor), parent_path(ancestor)
        if target is None:
            tail.append(comment)
        elif comment not in trailing_out.get(target, ""):
            trailing_out[target] = f"{trailing_out[target]} {comment}" if target in trailing_out \
                else comment
    return trailing_out


def _interleave(canonical: str, header: list[str], at_line: Mapping[int, str],
                leading_out: dict[str, list[str]], trailing_out: dict[str, str]) -> str:
    """``canonical`` with the header, and the leading and trailing comments of each path on the
    line where the path starts."""
    placed: set[str] = set()
    result: list[str] = list(header)
    for number, line in enumerate(canonical.split("\n"), start=1):
        at = at_line.get(number)
        if at is not None and at not in placed:
            placed.add(at)
            indent = line[: len(line) - len(line.lstrip(" "))]
            result.extend(indent + c for c in leading_out.get(at, []))
            if at in trailing_out:
                line = f"{line}  {trailing_out[at]}"
        result.append(line)
    return "\n".join(result)


def format_file(path: str) -> tuple[str, str]:
    """(current content, canonical content) of one text or JSON configuration file."""
    src = read_source(path)
    if src.format == "binary":
        raise InputError("fmt formats text and JSON files; binary files have no layout",
                         path=src.path)
    current = src.data.decode("utf-8")
    if src.format == "json":
        canonical = serialize(src.message, "json").decode("utf-8")
    else:
        canonical = format_text(src.text or "", src.message)
    bom = "\ufeff" if current.startswith("\ufeff") else ""  # a byte-order mark stays
    return current, bom + canonical


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--check", is_flag=True,
              help="Change nothing; exit 1 if any file is not formatted.")
@click.option("--diff", "show_diff", is_flag=True,
              help="Change nothing; print a unified diff of what would change.")
def fmt(files: tuple[str, ...], check: bool, show_diff: bool) -> None:
    """Rewrite text configurations in the one canonical layout.

    The layout is protobuf's default text output (what TensorFlow tooling writes); comments
    are kept next to the field they describe. Formatting is idempotent. JSON files get
    protobuf's JSON layout. Files are replaced atomically, and only when they change; a
    symbolic link is written through (the file it points to is formatted, the link stays); a
    file with several hard links is left alone (exit 2). '-' reads stdin and always writes the
    formatted text to stdout.

    Exit status: 0 all formatted (or reformatted), 1 with --check/--diff when a file would
    change, 2 when a file cannot be read or parsed.
    """
    changed = 0
    failed = 0
    for path in files:
        try:
            current, canonical = format_file(path)
        except (InputError, UsageError) as exc:
            echo(str(exc), err=True)
            failed += 1
            continue
        if current == canonical:
            if path == "-" and not (check or show_diff):
                # A filter (an editor's "format buffer") always writes the text back: writing
                # nothing would replace the buffer with nothing.
                atomic_write_bytes("-", canonical.encode("utf-8"))
            continue
        changed += 1
        if show_diff:
            diff = difflib.unified_diff(current.splitlines(keepends=True),
                                        canonical.splitlines(keepends=True),
                                        fromfile=path, tofile=path + " (formatted)")
            sys.stdout.writelines(diff)
        if check or show_diff:
            if check:
                echo(f"would reformat {path}", err=True)
            continue
        try:
            if path != "-":
                refuse_hard_linked(path)
            atomic_write_bytes(path, canonical.encode("utf-8"))
        except InputError as exc:  # OutputError: hard links, a read-only folder, a full disk
            echo(str(exc), err=True)
            failed += 1
            continue
        echo(f"reformatted {path}", err=True)
    if failed:
        sys.exit(2)
    if changed and (check or show_diff):
        sys.exit(1)
