"""``tpuemb validate --fix``: the mechanical fixes.

1. **Tags** (TAG001, TAG002): renumber every dynamic tag (learning rates and
   ``frequency_aware_adagrad`` step counters, negative ones included) to 0..K-1 in sorted order.
   The old -> new mapping is reported, because the training code must reorder its list of
   learning rates the same way.
2. **Legacy style** (MODE005): TensorFlow's own conversion, ``PopulateFeatureDescriptors`` in
   ``tpu_embedding_configuration_proto_rewrite.cc``: for each table t in order, one descriptor
   ``{table_id: t, input_shape: [B * num_features]}`` with an empty name. The legacy fields are
   then removed, because TensorFlow rejects a file that has both (MODE001, MODE002). Each table
   still produces one activation of ``[B * num_features, dimension]``, as in legacy style, so
   the training code does not change.
3. **Accumulation** (ACC002): write ``gradient_accumulation_status: ENABLED`` where it is
   UNSPECIFIED (which TensorFlow reads as ENABLED).
4. **SparseCore limit keys** (SC001, a Python SparseCore spec): a ``max_ids_per_table`` /
   ``max_unique_ids_per_table`` key that names a table inside a stack is renamed to the
   stack's name, in the spec's text (:func:`rename_spec_keys`, called by
   ``spec_check.fix_sparsecore_spec``).

The fixes are applied to a copy of the message first; that copy is the truth. For a text file the
same changes are then made as small edits of the original text, so comments and layout survive;
the edited text is parsed again and must equal the fixed message, otherwise the whole file is
re-printed from the message (and a note says comments were lost). Binary and JSON files are
re-serialized. Nothing is written unless the new bytes parse back to the fixed message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.schema import AccumulationStatus
from tpuemb_cfg.formats.locations import scan_locations, tokenize
from tpuemb_cfg.model.derived import INT32_MAX, derive
from tpuemb_cfg.rules.sparsecore import LIMIT_SETTINGS

if TYPE_CHECKING:
    from tpuemb_cfg.formats.io import Source
    from tpuemb_cfg.formats.locations import Token
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

@dataclass
class FixResult:
    """Outcome of :func:`fix_source`: the new file content (``data``; ``text`` for text files)."""

    changed: bool
    data: bytes
    text: str | None
    message: TPUEmbeddingConfiguration
    applied: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tag_mapping: dict[int, int] = field(default_factory=dict)


@dataclass
class _Edit:
    start: int
    end: int
    text: str


@dataclass
class _Plan:
    """Changes to make, as field-level operations the text editor and the message share."""

    set_values: dict[str, str] = field(default_factory=dict)  # field path -> new scalar text
    inserts: list[tuple[str, str]] = field(default_factory=list)  # (message path, "name: value")
    deletes: list[str] = field(default_factory=list)  # field paths of scalars to remove
    append: str = ""  # text appended at the end of the file
    #: Where the end-of-line comment of a deleted field goes: ``append`` holds
    #: ``_slot(path)`` at that place (replaced by the comment, or by nothing).
    comment_slots: list[str] = field(default_factory=list)


def _slot(path: str) -> str:
    """A marker in :attr:`_Plan.append` standing for the comment of the deleted ``path``."""
    return f"\x00{path}\x00"


def _step_input(op: Any, field: str) -> Any:
    """The message of the per-step input ``field`` (a ``TagUse.kind``) of the algorithm of the
    table's ``OptimizationParameters`` ``op``."""
    return getattr(getattr(op, op.WhichOneof("parameters")), field)


def _renumber_tags(
    config: TPUEmbeddingConfiguration, plan: _Plan, result: FixResult, path: str
) -> None:
    derived = derive(config)
    tags = sorted(derived.tag_map)
    if not tags or tags == list(range(len(tags))):
        return
    mapping = {old: new for new, old in enumerate(tags)}
    tables = list(config.table_descriptor)
    for use in derived.tag_uses:
        new = mapping[use.tag]
        op = tables[use.table].optimization_parameters
        if use.kind == "learning_rate":
            if new == use.tag:
                continue
            op.learning_rate.dynamic.tag = new
            plan.set_values[use.field_path] = str(new)
            if new != 0 and use.tag == 0:
                plan.inserts.append((use.field_path.removesuffix(".tag"), f"tag: {new}"))
        elif use.present:
            if new == use.tag:
                continue
            _step_input(op, use.kind).tag = new
            plan.set_values[use.field_path] = str(new)
            if use.tag == 0:
                plan.inserts.append((use.field_path.removesuffix(".tag"), f"tag: {new}"))
        elif new != 0:
            _step_input(op, use.kind).tag = new
            base = use.field_path.removesuffix(f".{use.kind}.tag")
            plan.inserts.append((base, f"{use.kind} {{ tag: {new} }}"))
    result.tag_mapping = mapping
    changed = ", ".join(f"{old} -> {new}" for old, new in mapping.items() if old != new)
    result.applied.append("renumbered dynamic tags")
    result.notes.append(
        f"{path}: renumbered dynamic tags (old -> new): {changed}. The training code must now "
        "send, at position k of its learning-rate list, the value it used to send for the old tag "
        "that maps to k."
    )


def _convert_legacy(
    config: TPUEmbeddingConfiguration, plan: _Plan, result: FixResult, path: str
) -> None:
    """TensorFlow's ``PopulateFeatureDescriptors``: one feature of ``[B * n_t]`` ids per table.

    A table's feature then yields the activation ``[B * n_t, dimension]`` its legacy form yields,
    so nothing changes for the training program. TensorFlow re-derives the batch size as the GCD
    of the new sizes (validation-rules.md section 1.2); it can be a multiple of the old B, which
    only changes how the runtime counts features internally, not any shape the program sees.
    """
    if config.feature_descriptor or not config.table_descriptor:
        return
    batch = config.batch_size_per_tensor_core
    counts = [t.num_features for t in config.table_descriptor]
    not_converted = f"{path}: legacy style not converted to feature descriptors (MODE005): "
    if batch <= 0 or any(n <= 0 for n in counts):
        t = next((t for t, n in enumerate(counts) if n <= 0), None)
        what = (f"batch_size_per_tensor_core is {batch}" if batch <= 0 else
                f"table_descriptor[{t}] has num_features {counts[t or 0]}")
        result.notes.append(
            f"{not_converted}{what}, and TensorFlow's rewrite needs both positive (MODE003, "
            "MODE004); set them first")
        return
    overflowing = [t for t, n in enumerate(counts) if batch * n > INT32_MAX]
    if overflowing:  # TensorFlow's 32-bit product would overflow (FEAT005): nothing to mirror
        t = overflowing[0]
        result.notes.append(
            f"{not_converted}table_descriptor[{t}]: batch_size_per_tensor_core {batch} x "
            f"num_features {counts[t]} = {batch * counts[t]:,} exceeds 2^31 - 1, where "
            "TensorFlow's 32-bit product overflows (FEAT005); lower batch_size_per_tensor_core "
            "or num_features first")
        return
    config.batch_size_per_tensor_core = 0
    plan.deletes.append("batch_size_per_tensor_core")
    plan.comment_slots.append("batch_size_per_tensor_core")
    blocks = []
    for t, table in enumerate(config.table_descriptor):
        table.num_features = 0
        deleted = f"table_descriptor[{t}].num_features"
        plan.deletes.append(deleted)
        plan.comment_slots.append(deleted)
        feature = config.feature_descriptor.add()
        feature.table_id = t
        feature.input_shape.append(batch * counts[t])
        # A comment at the end of a deleted line moves to the line that replaces it.
        first = _slot("batch_size_per_tensor_core") if t == 0 else ""
        blocks.append(
            f"feature_descriptor {{{first}\n  table_id: {t}\n  input_shape: {batch * counts[t]}"
            f"{_slot(deleted)}\n}}\n"
        )
    plan.append = "".join(blocks)
    sizes = ", ".join(f"[{batch * n}]" for n in counts[:6]) + (", ..." if len(counts) > 6 else "")
    result.applied.append("converted legacy style to feature descriptors")
    result.notes.append(
        f"{path}: converted batch_size_per_tensor_core {batch} and num_features to one feature "
        f"descriptor per table, as TensorFlow's own rewrite does (input shapes {sizes}); every "
        "table still produces the same activation, so the training code does not change"
    )


def _explicit_accumulation(
    config: TPUEmbeddingConfiguration, plan: _Plan, result: FixResult, path: str
) -> None:
    count = 0
    for t, table in enumerate(config.table_descriptor):
        if not table.HasField("optimization_parameters"):
            continue
        op = table.optimization_parameters
        if op.gradient_accumulation_status != AccumulationStatus.UNSPECIFIED:
            continue
        op.gradient_accumulation_status = AccumulationStatus.ENABLED  # type: ignore[assignment]
        base = f"table_descriptor[{t}].optimization_parameters"
        plan.set_values[f"{base}.gradient_accumulation_status"] = "ENABLED"
        plan.inserts.append((base, "gradient_accumulation_status: ENABLED"))
        count += 1
    if count:
        result.applied.append("made gradient accumulation explicit")
        result.notes.append(
            f"{path}: wrote gradient_accumulation_status: ENABLED on {count} table(s)"
        )


# ------------------------------------------------------------------------------------------------
# Text edits


class _TextEditor:
    def __init__(self, text: str, descriptor: Any) -> None:
        self.text = text
        self.tokens: list[Token] = tokenize(text)[0]
        self.locations = scan_locations(text, descriptor)
        starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                starts.append(i + 1)
        self.line_starts = starts
        self.index = {(tok.line, tok.column): i for i, tok in enumerate(self.tokens)}
        self.edits: list[_Edit] = []

    def offset(self, token: Token) -> int:
        return self.line_starts[token.line - 1] + token.column - 1

    def end(self, token: Token) -> int:
        return self.offset(token) + len(token.text)

    def _name_token(self, path: str) -> int | None:
        pos = self.locations.get(path)
        return None if pos is None else self.index.get(pos)

    def _value_token(self, name_index: int) -> int | None:
        i = name_index + 1
        if i < len(self.tokens) and self.tokens[i].text == ":":
            i += 1
        if i < len(self.tokens) and self.tokens[i].kind in ("number", "ident"):
            return i
        return None

    def has(self, path: str) -> bool:
        return self.locations.get(path) is not None

    def set_value(self, path: str, value: str) -> bool:
        name = self._name_token(path)
        value_index = None if name is None else self._value_token(name)
        if value_index is None:
            return False
        token = self.tokens[value_index]
        self.edits.append(_Edit(self.offset(token), self.end(token), value))
        return True

    def delete(self, path: str) -> str | None:
        """Delete the scalar field ``path``; returns the comment that ended its line (``""`` if
        none), deleted with it, or ``None`` when the field cannot be placed. A field alone on
        its line takes the whole line; a comment belongs to the field before it on its line."""
        name = self._name_token(path)
        value_index = None if name is None else self._value_token(name)
        if name is None or value_index is None:
            return None
        start = self.offset(self.tokens[name])
        end = self.end(self.tokens[value_index])
        line_start = self.text.rfind("\n", 0, start) + 1
        line_end = self.text.find("\n", end)
        line_end = len(self.text) if line_end < 0 else line_end
        rest = self.text[end:line_end].strip()
        comment = rest if rest.startswith("#") else ""
        if comment:
            end = line_end - len(self.text[end:line_end]) + len(self.text[end:line_end].rstrip())
        if not self.text[line_start:start].strip() and (not rest or comment):
            start, end = line_start, min(line_end + 1, len(self.text))  # the whole line
        self.edits.append(_Edit(start, end, ""))
        return comment

    def insert(self, message_path: str, snippet: str) -> bool:
        name = self._name_token(message_path)
        if name is None:
            return False
        i = name + 1
        if i < len(self.tokens) and self.tokens[i].text == ":":
            i += 1
        if i >= len(self.tokens) or self.tokens[i].text not in ("{", "<"):
            return False
        brace = self.tokens[i]
        at = self.end(brace)
        nxt = self.tokens[i + 1] if i + 1 < len(self.tokens) else None
        if nxt is None or nxt.line == brace.line:
            tail = "" if self.text[at : at + 1].isspace() else " "
            self.edits.append(_Edit(at, at, f" {snippet}{tail}"))
            return True
        line_text = self.text[self.line_starts[nxt.line - 1] : self.offset(nxt)]
        indent = line_text if not line_text.strip() else ""
        if nxt.text in ("}", ">"):
            indent += "  "
        self.edits.append(_Edit(at, at, f"\n{indent}{snippet}"))
        return True

    def apply(self, append: str) -> str:
        out = []
        last = 0
        for edit in sorted(self.edits, key=lambda e: (e.start, e.end)):
            if edit.start < last:
                raise ValueError("overlapping edits")
            out.append(self.text[last : edit.start])
            out.append(edit.text)
            last = edit.end
        out.append(self.text[last:])
        result = "".join(out)
        if append:
            if result and not result.endswith("\n"):
                result += "\n"
            result += append
        return result


def _edit_text(text: str, plan: _Plan, descriptor: Any) -> str | None:
    """The original text with the plan applied, or ``None`` when an edit cannot be placed."""
    editor = _TextEditor(text, descriptor)
    for message_path, snippet in plan.inserts:
        field_name = snippet.split(":")[0].split("{")[0].strip()
        if editor.has(f"{message_path}.{field_name}"):
            continue  # written in the text: set_values changes it in place
        if not editor.insert(message_path, snippet):
            return None
    for path, value in plan.set_values.items():
        if editor.has(path) and not editor.set_value(path, value):
            return None
    comments: dict[str, str] = {}
    for path in plan.deletes:
        if editor.has(path):
            comment = editor.delete(path)
            if comment is None:
                return None
            comments[path] = comment
    append = plan.append
    for path in plan.comment_slots:
        append = append.replace(_slot(path), f"  {comments[path]}" if comments.get(path) else "")
    try:
        return editor.apply(append)
    except ValueError:
        return None


#: Fix name -> the rule ids whose selection enables it.
FIXES: dict[str, tuple[str, ...]] = {
    "tags": ("TAG001", "TAG002"),
    "legacy": ("MODE005",),
    "accumulation": ("ACC002",),
    "sparsecore_keys": ("SC001",),  # a SparseCore spec's limit keys (spec_check)
}


def fixes_for(rule_ids: Iterable[str]) -> set[str]:
    """The fixes enabled by a selection of rules (a fix runs when one of its rules is selected)."""
    chosen = set(rule_ids)
    return {name for name, ids in FIXES.items() if chosen.intersection(ids)}


_BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark


def fix_source(source: Source, fixes: Iterable[str] | None = None) -> FixResult:
    """Apply the mechanical fixes (all, or those named in ``fixes``, see :data:`FIXES`).

    The result says what changed and holds the new bytes.

    Raises :class:`InputError` when the fixed file would not parse back to the fixed message
    (nothing must then be written).
    """
    from tpuemb_cfg.formats.io import serialize

    original = source.message
    fixed = type(original)()
    fixed.CopyFrom(original)
    plan = _Plan()
    result = FixResult(changed=False, data=source.data, text=source.text, message=fixed)
    wanted = set(FIXES) if fixes is None else set(fixes)
    if "tags" in wanted:
        _renumber_tags(fixed, plan, result, source.path)
    if "legacy" in wanted:
        _convert_legacy(fixed, plan, result, source.path)
    if "accumulation" in wanted:
        _explicit_accumulation(fixed, plan, result, source.path)
    if not result.applied:
        return result

    expected = fixed.SerializeToString(deterministic=True)
    new_text: str | None = None
    if source.format == "text" and source.text is not None:
        new_text = _edit_text(source.text, plan, original.DESCRIPTOR)
        if new_text is not None and not _parses_to(
            new_text.encode("utf-8"), "text", expected, type(original)
        ):
            new_text = None
        if new_text is None:
            new_text = serialize(fixed, "text").decode("utf-8")
            result.notes.append(
                f"{source.path}: the file was re-printed from the message; comments were not kept"
            )
        data = new_text.encode("utf-8")
    else:
        data = serialize(fixed, source.format)
    if source.format != "binary" and source.data.startswith(_BOM):
        data = _BOM + data  # the file's byte-order mark stays (the parser skips it)
    if not _parses_to(data, source.format, expected, type(original)):
        raise InputError(
            "the fixed file would not parse back to the fixed configuration; nothing was written",
            path=source.path,
        )
    result.changed = data != source.data
    result.data = data
    result.text = new_text
    return result


def _parses_to(data: bytes, fmt: str, expected: bytes, message_type: Any) -> bool:
    from tpuemb_cfg.formats.io import parse_bytes

    message = message_type()
    try:
        parse_bytes(data, fmt, message, "<fixed>")  # type: ignore[arg-type]
    except InputError:
        return False
    return bool(message.SerializeToString(deterministic=True) == expected)


# ------------------------------------------------------------------------------------------------
# SparseCore specs (Python): SC001's rename of a limit key
#
# The key is found in the syntax tree, not by its text: the dictionary passed as the setting's
# keyword argument (directly, or through a name bound once to a dictionary literal), then the
# one string literal in it whose value is the key. Anything less certain (the dictionary built
# by code, a name bound twice or used elsewhere, the key written twice or built from names) is
# reported and left to the user. Only the literal's own bytes change.


@dataclass(frozen=True)
class KeyPlace:
    """Where a limit key's string literal is written in a spec: ``start``/``end`` character
    offsets in its text, ``line`` and ``column`` (1-based, characters) of its first character."""

    start: int
    end: int
    line: int
    column: int


@dataclass
class _Parsed:
    text: str
    tree: Any
    line_starts: list[int]
    parents: dict[int, Any]


def _parse(text: str) -> _Parsed | None:
    import ast
    import re

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return None
    # Python ends a line at \r\n, \r or \n (str.splitlines also splits at \f, \x1c, \x85 ...)
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    return _Parsed(text, tree, starts, parents)


_PARSED: dict[str, _Parsed | None] = {}


def _parsed(text: str) -> _Parsed | None:
    if text not in _PARSED:
        _PARSED.clear()  # one spec at a time: its findings are placed, then it is fixed
        _PARSED[text] = _parse(text)
    return _PARSED[text]


def _offset(parsed: _Parsed, line: int, byte_column: int) -> int:
    """The character offset of ``ast``'s (1-based line, UTF-8 byte column)."""
    start = parsed.line_starts[line - 1]
    end = parsed.line_starts[line] if line < len(parsed.line_starts) else len(parsed.text)
    prefix = parsed.text[start:end].encode("utf-8", "surrogatepass")[:byte_column]
    return start + len(prefix.decode("utf-8", "surrogatepass"))


def _bindings(tree: Any, name: str) -> list[Any]:
    """Every node that binds (or declares global) ``name`` anywhere in ``tree``."""
    import ast

    found: list[Any] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound = node.id
        elif isinstance(node, ast.arg):
            bound = node.arg
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound = node.name
        elif isinstance(node, ast.alias):
            bound = node.asname or node.name.split(".")[0]
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
            bound = node.name or ""
        elif isinstance(node, ast.MatchMapping):
            bound = node.rest or ""
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound = name if name in node.names else ""
        else:
            continue
        if bound == name:
            found.append(node)
    return found


def _bound_dict(parsed: _Parsed, name: Any, settings: tuple[str, ...]) -> Any:
    """The dictionary literal the name node ``name`` stands for, or why it cannot be told:
    ``name`` must be bound once, by ``NAME = {...}``, and be read only as a limit setting's
    keyword argument (anything else might change the dictionary)."""
    import ast

    where = f"it is passed as {name.id}, "
    bindings = _bindings(parsed.tree, name.id)
    if len(bindings) != 1:
        return where + (f"which is bound {len(bindings)} times" if bindings
                        else "which the spec never binds")
    target = bindings[0]
    statement = parsed.parents.get(id(target))
    value = None
    if isinstance(statement, ast.Assign) and statement.targets == [target]:
        value = statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.target is target:
        value = statement.value
    if not isinstance(value, ast.Dict):
        return where + f"which line {target.lineno} does not set to a dictionary literal"
    for node in ast.walk(parsed.tree):
        if isinstance(node, ast.Name) and node.id == name.id and isinstance(node.ctx, ast.Load):
            keyword = parsed.parents.get(id(node))
            if not (isinstance(keyword, ast.keyword) and keyword.arg in settings):
                return where + f"which line {node.lineno} also uses"
    return value


def locate_limit_key(text: str, call_line: int | None, setting: str, key: str,
                     keys: Iterable[str]) -> KeyPlace | str:
    """Where the Python spec ``text`` writes the limit key ``key`` of ``setting``: in the
    dictionary passed as ``setting=`` to the one call at ``call_line`` that has that keyword
    (the ``SparseCoreEmbeddingConfig`` the spec builds), written there or bound once to a name
    that call passes. ``keys``: the keys the dictionary held when the spec ran; the literal must
    write exactly those. Returns the place, or the reason it cannot be told for certain."""
    import ast

    parsed = _parsed(text)
    if parsed is None:
        return "the spec does not parse as Python"
    if call_line is None:
        return f"no line of the spec is known to set {setting}"
    calls = [n for n in ast.walk(parsed.tree) if isinstance(n, ast.Call)
             and n.lineno == call_line and any(k.arg == setting for k in n.keywords)]
    if len(calls) != 1:
        return (f"line {call_line} has {len(calls)} calls with {setting}=" if calls else
                f"line {call_line} does not pass {setting}= as a keyword argument")
    value = next(k.value for k in calls[0].keywords if k.arg == setting)
    if isinstance(value, ast.Name):
        value = _bound_dict(parsed, value, LIMIT_SETTINGS)
        if isinstance(value, str):
            return value
    if not isinstance(value, ast.Dict):
        return f"{setting} is not written as a dictionary literal"
    at = f"the dictionary at line {value.lineno}"
    if any(k is None for k in value.keys):
        return f"{at} unpacks another one (**)"
    written = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
               for k in value.keys]
    matches = [k for k, v in zip(value.keys, written, strict=True) if v == key]
    if len(matches) > 1:
        return f"{at} writes the key {len(matches)} times"
    if None in written or sorted(written) != sorted(keys):  # type: ignore[type-var]
        return (f"{at} does not write the keys {setting} held when the spec ran as string "
                "literals (some are computed, or added or removed later)")
    if not matches:
        return f"{at} has no key {key!r}"
    node = matches[0]
    assert node is not None and node.end_lineno is not None and node.end_col_offset is not None
    start = _offset(parsed, node.lineno, node.col_offset)
    end = _offset(parsed, node.end_lineno, node.end_col_offset)
    try:  # the span must be the literal (parenthesized: implicit concatenation over lines)
        same = ast.literal_eval(f"({text[start:end]}\n)") == key
    except (ValueError, SyntaxError):
        same = False
    if not same:
        return f"the key's literal at line {node.lineno} could not be placed"
    return KeyPlace(start, end, node.lineno, start - parsed.line_starts[node.lineno - 1] + 1)


def string_literal(value: str, quote: str = '"', ascii_only: bool = False) -> str:
    """``value`` as a Python string literal in ``quote`` (``'`` or ``"``): the quote and the
    backslash escaped, and every character ``str.isprintable`` refuses (and, with
    ``ascii_only``, every non-ASCII one) written as an escape."""
    out = []
    for char in value:
        if char in (quote, "\\"):
            out.append("\\" + char)
        elif char.isprintable() and (char.isascii() or not ascii_only):
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return quote + "".join(out) + quote


@dataclass
class SpecFix:
    """Outcome of :func:`rename_spec_keys`: the new bytes of a Python spec and what changed."""

    changed: bool
    data: bytes
    applied: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KeyRenameAt:
    """One rename asked of :func:`rename_spec_keys`: the limit key ``old`` of ``setting`` (whose
    dictionary held ``keys`` when the spec ran), passed at ``call_line``, becomes ``new``."""

    setting: str
    old: str
    new: str
    call_line: int | None
    keys: tuple[str, ...]


def _spec_body(data: bytes) -> tuple[bytes, str, str] | str:
    """(the byte-order mark, the text, its encoding) of a Python file's bytes, or why the text
    cannot be edited byte for byte (it must decode and encode back to the same bytes)."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        return f"its encoding cannot be told ({exc})"
    bom = _BOM if data.startswith(_BOM) else b""
    encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    body = data[len(bom):]
    try:
        text = body.decode(encoding)
        same = text.encode(encoding) == body
    except (UnicodeError, LookupError):
        same = False
    if not same:
        return f"it is not valid {encoding}"
    return bom, text, encoding


def rename_spec_keys(data: bytes, renames: Iterable[KeyRenameAt], path: str) -> SpecFix:
    """Rename limit keys in the Python spec whose bytes are ``data``: each key's string literal
    (:func:`locate_limit_key`) is replaced by the new name in the same quotes; no other byte
    changes (line endings, byte-order mark, comments and layout stay). A key that cannot be
    located for certain is left alone and a note says why: the spec is the user's code."""
    import ast
    import codecs

    result = SpecFix(changed=False, data=data)
    body = _spec_body(data)
    todo = list(renames)
    if isinstance(body, str):
        if todo:
            result.notes.append(f"{path}: not fixed (SC001): {body}; rename the limit keys "
                                "by hand")
        return result
    bom, text, encoding = body
    ascii_only = codecs.lookup(encoding).name != "utf-8"
    edits: dict[tuple[int, int], tuple[str, KeyPlace, KeyRenameAt]] = {}
    for rename in todo:
        place = locate_limit_key(text, rename.call_line, rename.setting, rename.old,
                                 rename.keys)
        if isinstance(place, str):
            where = f"{path}:{rename.call_line}" if rename.call_line else path
            result.notes.append(
                f"{where}: not fixed (SC001): the {rename.setting} key {rename.old!r} cannot be "
                f"located for certain: {place}; rename it to {rename.new!r} by hand")
            continue
        quote = text[place.end - 1]
        literal = string_literal(rename.new, quote if quote in "'\"" else '"', ascii_only)
        span = (place.start, place.end)
        if span in edits and edits[span][0] != literal:
            result.notes.append(f"{path}:{place.line}: not fixed (SC001): one key renamed two "
                                "ways; rename it by hand")
            continue
        if span not in edits:
            result.notes.append(f"{path}:{place.line}: renamed the limit key {rename.old!r} to "
                                f"{rename.new!r} (SC001)")
        edits[span] = (literal, place, rename)
    if not edits:
        return result
    pieces: list[bytes] = []
    last = 0  # the original bytes between the edits, sliced, not re-encoded
    for (start, end), (literal, _, _) in sorted(edits.items()):
        byte_start = len(bom) + len(text[:start].encode(encoding))
        byte_end = byte_start + len(text[start:end].encode(encoding))
        if data[byte_start:byte_end].decode(encoding, "replace") != text[start:end]:
            return SpecFix(changed=False, data=data, notes=[
                f"{path}: not fixed (SC001): the limit keys could not be placed in the file's "
                "bytes; rename them by hand"])
        pieces += [data[last:byte_start], literal.encode(encoding)]
        last = byte_end
    pieces.append(data[last:])
    new = b"".join(pieces)
    try:
        ast.parse(new)
    except (SyntaxError, ValueError):
        return SpecFix(changed=False, data=data, notes=[
            f"{path}: not fixed (SC001): the renamed spec would not parse; rename the limit "
            "keys by hand"])
    result.data = new
    result.changed = new != data
    result.applied.append(f"renamed {len(edits)} limit key(s) to stacked table names")
    return result
