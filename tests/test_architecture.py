"""The import contract and the one home of each optimizer (docs/architecture.md).

Reads the package's source with :mod:`ast` (nothing is imported) and checks:

- **Layers look down**: every module belongs to one layer (longest prefix of ``LAYERS``); a
  module imports only modules of its own group or of lower layers. Groups that share a layer
  (validate / compile / run; backends / sim) do not import each other.
- **No cycles**: the module graph (imports at any depth, ``if TYPE_CHECKING:`` blocks aside) has
  no strongly connected component of more than one module.
- **No private reach**: a name or module starting with ``_`` is used only inside the package
  that defines it (``a.b._c`` belongs to ``a.b`` and its sub-packages).
- **One home per optimizer**: each proto name of ``OptimizationParameters.parameters`` appears in
  code (an identifier, or a word of a string that is not a docstring) in at most
  ``MAX_OPTIMIZER_MODULES`` modules.

An import ``from a.b import c`` depends on ``a.b.c`` when that is a module, else on ``a.b``;
importing a package's ``__init__`` is a dependency on the package module itself, as
``import-linter`` counts it.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("TPUEMB_ARCH_ROOT") or Path(__file__).resolve().parents[1])
PACKAGE = ROOT / "tpuemb_cfg"

#: Lowest first. Each layer is {group: module prefixes}; a module takes the longest prefix.
LAYERS: tuple[dict[str, tuple[str, ...]], ...] = (
    {"base": (
        "tpuemb_cfg.proto", "tpuemb_cfg.schema", "tpuemb_cfg.errors", "tpuemb_cfg.units",
        "tpuemb_cfg.numerics", "tpuemb_cfg._streams", "tpuemb_cfg._interrupt",
        "tpuemb_cfg.usercode", "tpuemb_cfg.protoutil", "tpuemb_cfg.version", "tpuemb_cfg.lazy",
        "tpuemb_cfg.base",
    )},
    {"io": (
        "tpuemb_cfg.atomic", "tpuemb_cfg.io", "tpuemb_cfg.npzio", "tpuemb_cfg.limits",
        "tpuemb_cfg.locations",
    )},
    {"algorithms": ("tpuemb_cfg.algorithms",)},
    {"model": (
        "tpuemb_cfg.derived", "tpuemb_cfg.layout", "tpuemb_cfg.model", "tpuemb_cfg.sparsecore",
    )},
    {"validate": (
        "tpuemb_cfg.validator", "tpuemb_cfg.rules", "tpuemb_cfg.fix", "tpuemb_cfg.report",
        "tpuemb_cfg.settings", "tpuemb_cfg.inspect_summary",
    )},
    {
        "compile": ("tpuemb_cfg.embedding",),
        "run": ("tpuemb_cfg.executor",),
    },
    {
        "backends": ("tpuemb_cfg.backends",), "sim": ("tpuemb_cfg.sim",),
        "plan": ("tpuemb_cfg.planner",),
    },
    {"session": ("tpuemb_cfg.session", "tpuemb_cfg.spec_check", "tpuemb_cfg.bench")},
    {"cli": (
        "tpuemb_cfg.commands", "tpuemb_cfg.cli", "tpuemb_cfg.__main__", "tpuemb_cfg.simulate",
        "tpuemb_cfg",
    )},
)

OPTIMIZERS = (
    "adagrad", "adagrad_momentum", "bounded_adagrad", "frequency_aware_adagrad",
    "stochastic_gradient_descent", "ftrl", "adam", "momentum", "lion", "rms_prop",
    "centered_rms_prop", "mdl_adagrad_light", "adadelta", "proximal_adagrad", "online_yogi",
    "proximal_yogi", "frequency_estimator", "user_defined_program", "assign",
)
MAX_OPTIMIZER_MODULES = 3
#: Proto names that are also a hyper-parameter field of other optimizers (``momentum`` of
#: AdagradMomentum and RMSProp): as an attribute, argument or keyword they name the field, so
#: only their other uses (strings, names, definitions) count as naming the optimizer.
ALSO_FIELDS = frozenset({"momentum"})


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] = (-1, -1, "")
    for index, groups in enumerate(LAYERS):
        for group, prefixes in groups.items():
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                    best = (len(prefix), index, group)
    if best[0] < 0:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")
    return best[1], best[2]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _package_of(module: str) -> str:
    path = MODULES.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


class _Import:
    def __init__(self, source: str, target: str, line: int, typing_only: bool,
                 private_name: str | None) -> None:
        self.source, self.target, self.line = source, target, line
        self.typing_only, self.private_name = typing_only, private_name


def _imports() -> list[_Import]:
    found: list[_Import] = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing = _type_checking_nodes(tree)
        package = _package_of(module)
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES:
                        found.append(_Import(module, alias.name, node.lineno,
                                             id(node) in typing, None))
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                if not origin.startswith("tpuemb_cfg"):
                    continue
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    if sub in MODULES:
                        found.append(_Import(module, sub, node.lineno, id(node) in typing, None))
                        bound[alias.asname or alias.name] = sub
                    elif origin in MODULES:
                        private = alias.name if alias.name.startswith("_") else None
                        found.append(_Import(module, origin, node.lineno, id(node) in typing,
                                             private))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(_Import(module, bound[node.value.id], node.lineno, False, node.attr))
    return found


IMPORTS = _imports()


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_layers_only_look_down() -> None:
    wrong = []
    for imp in IMPORTS:
        (low, group), (high, other) = _layer(imp.source), _layer(imp.target)
        if high > low or (high == low and group != other):
            wrong.append(f"{imp.source}:{imp.line} ({group}) imports {imp.target} ({other})")
    assert not wrong, "imports that look up or sideways:\n" + "\n".join(sorted(set(wrong)))


def test_no_import_cycles() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in IMPORTS:
        if not imp.typing_only and imp.source != imp.target:
            edges[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative Tarjan
        nonlocal counter
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(", ".join(c) for c in cycles)


def _private_owner(target: str, name: str | None) -> str | None:
    """The package a private module or name belongs to, or None if it is public."""
    if name is not None:
        return _package_of(target) if MODULES[target].name != "__init__.py" else target
    parts = target.split(".")
    for depth, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:depth])
    return None


def test_no_private_reach_across_packages() -> None:
    wrong = []
    for imp in IMPORTS:
        owner = _private_owner(imp.target, imp.private_name)
        if owner is not None and not _inside(imp.source, owner):
            what = f"{imp.target}.{imp.private_name}" if imp.private_name else imp.target
            wrong.append(f"{imp.source}:{imp.line} uses {what} (private to {owner})")
    assert not wrong, "private names used across packages:\n" + "\n".join(sorted(set(wrong)))


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            ids.add(id(node.value))
    return ids


@functools.cache
def optimizer_homes() -> dict[str, set[str]]:
    """For each optimizer proto name, the modules that name it in code."""
    homes: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        if module.startswith("tpuemb_cfg.proto"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_ids(tree)
        for node in ast.walk(tree):
            words: list[str] = []
            if isinstance(node, ast.Name):
                words = [node.id]
            elif isinstance(node, ast.Attribute) and node.attr not in ALSO_FIELDS:
                words = [node.attr]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                words = [node.name]
            elif isinstance(node, ast.arg) and node.arg not in ALSO_FIELDS:
                words = [node.arg]
            elif isinstance(node, ast.keyword) and node.arg and node.arg not in ALSO_FIELDS:
                words = [node.arg]
            elif isinstance(node, ast.alias):
                words = [node.name.rpartition(".")[2], node.asname or ""]
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docstrings):
                words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value)
            for word in words:
                if word in OPTIMIZERS:
                    homes[word].add(module)
    return homes


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_each_optimizer_has_one_home(name: str) -> None:
    modules = sorted(optimizer_homes()[name])
    assert len(modules) <= MAX_OPTIMIZER_MODULES, f"{name} is named in {len(modules)}: {modules}"


# -- one platform table ---------------------------------------------------------------------------
#
# Chip facts (HBM, SparseCores per chip or device, chip lists) and the SparseCore defaults (256
# ids per partition, the 2 MiB activation and 2 GiB shard limits) live in tpuemb_cfg/base/
# (platform.py, sparsecore_defaults.py); everything else reads them. The scan below reads the
# facts from those two files (run as plain scripts: they import nothing from the package) and
# looks for them written again, by context, so that an unrelated 256 (a histogram bucket, a
# hash table) is not flagged:
#
# - an integer written as N x a GiB/GB unit (``95 * 2**30``, ``32 * _GIB``, ``16 * 10**9``), or a
#   literal equal to such a product (``95e9``), where N is the HBM of some chip or device;
# - a number assigned, passed or defaulted under a name of a fact (``max_ids_per_chip_per_sample``,
#   ``MINIBATCHES``: 64); a ``max_ids`` /
#   ``max_unique_ids`` / ``DEFAULT_LIMIT`` name given the default limit, a SparseCore count name
#   (``sparse_cores``, ``num_sc``) given a count above 1, an ``ACTIVATION`` / ``SHARD`` name
#   given one of those limits;
# - text that is not a docstring (messages, help, rule summaries) and the docstrings of rules
#   (``tpuemb explain``) listing two SparseCore chips together (``v5p, v6e``; ``v5p 4, v6e 2``)
#   or naming a chip's HBM figure (``95 GiB``).

BASE_FACTS = ("tpuemb_cfg.base.platform", "tpuemb_cfg.base.sparsecore_defaults")
_UNITS = {"GIB": 2**30, "GB": 10**9}
_LIMIT_NAME = re.compile(r"max_(unique_)?ids|DEFAULT_LIMIT|DEFAULT_MAX", re.IGNORECASE)
_CORES_NAME = re.compile(r"sparse_cores?|num_sc\b", re.IGNORECASE)
_BYTES_NAME = re.compile(r"ACTIVATION|SHARD", re.IGNORECASE)
_SAMPLE_NAME = re.compile(r"per_chip_per_sample|MINIBATCHES", re.IGNORECASE)


@functools.cache
def _facts() -> dict[str, object]:
    import runpy

    facts = runpy.run_path(str(PACKAGE / "base" / "platform.py"))
    facts.update(runpy.run_path(str(PACKAGE / "base" / "sparsecore_defaults.py")))
    return facts


def _hbm_counts() -> set[int]:
    facts = _facts()
    gib = int(facts["GIB"])  # type: ignore[call-overload]
    counts: set[int] = set()
    for chip in facts["PLATFORMS"]:  # type: ignore[attr-defined]
        for size in (chip.hbm_bytes, chip.hbm_bytes_per_device, chip.tf_hbm_bytes_per_device):
            counts.add(size // gib)
    return counts


def _number(node: ast.AST) -> int | float | None:
    """A numeric constant expression's value (unit names such as ``_GIB`` count as their value)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value  # type: ignore[no-any-return]
    if isinstance(node, ast.Name):
        for unit, value in _UNITS.items():
            if node.id.upper().lstrip("_").endswith(unit):
                return value
        return None
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _number(node.left), _number(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Mult):
        return left * right
    if not isinstance(right, int) or not 0 <= right <= 64:
        return None
    if isinstance(node.op, ast.Pow):
        return left ** right  # type: ignore[no-any-return]
    if isinstance(node.op, ast.LShift) and isinstance(left, int):
        return left << right
    return None


def _hbm_written(node: ast.AST, counts: set[int]) -> bool:
    units = set(_UNITS.values())
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = _number(node.left), _number(node.right)
        for n, unit in ((left, right), (right, left)):
            if unit in units and n in counts:
                return True
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return any(node.value == n * unit for n in counts if n > 32 for unit in units)
    return False


def _named_values(tree: ast.AST) -> Iterator[tuple[str, ast.AST, int]]:
    """(name, value, line) of assignments, keywords, parameter defaults and getattr defaults."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value, node.lineno
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            yield node.target.id, node.value, node.lineno
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg, node.value, node.value.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults,
                             strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                      if d is not None]
            for arg, default in pairs:
                yield arg.arg, default, default.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "getattr" and len(node.args) == 3
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            yield node.args[1].value, node.args[2], node.lineno


def _ints(node: ast.AST) -> list[int]:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _ints(e)]
    value = _number(node)
    return [int(value)] if isinstance(value, int) else []


def _messages(tree: ast.AST) -> Iterator[ast.Constant]:
    """String constants that are not docstrings, and the docstrings of ``@rule`` functions."""
    plain_docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            is_rule = isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "rule"
                for d in node.decorator_list)
            if not is_rule:
                plain_docs.add(id(node.body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in plain_docs:
            yield node


@functools.cache
def _fact_patterns() -> tuple[set[int], int, set[int], re.Pattern[str], re.Pattern[str]]:
    facts = _facts()
    counts = _hbm_counts()
    default_limit = int(facts["DEFAULT_MAX_IDS_PER_PARTITION"])  # type: ignore[call-overload]
    byte_limits = {int(facts[k]) for k in  # type: ignore[call-overload]
                   ("ACTIVATION_MEMORY_BYTES_LIMIT", "VARIABLE_SHARD_BYTES_LIMIT")}
    chips = [c.name for c in facts["sparsecore_chips"]()]  # type: ignore[operator]
    names = "|".join(re.escape(n) for n in chips)
    chip_list = re.compile(rf"\b({names})\b[^.;:\n]{{0,16}}?\b(?!\1\b)({names})\b",
                           re.IGNORECASE)
    figure = re.compile(rf"\b({'|'.join(str(n) for n in sorted(counts) if n > 32)})\s?Gi?B\b")
    return counts, default_limit, byte_limits, chip_list, figure


def _fact_copies(where: str, source: str) -> list[str]:
    """The chip facts and SparseCore defaults ``source`` writes again (see above)."""
    counts, default_limit, byte_limits, chip_list, figure = _fact_patterns()
    per_sample = int(_facts()["DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE"])  # type: ignore[call-overload]
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.Constant)) and _hbm_written(node, counts):
            found.append(f"{where}:{node.lineno}: HBM {ast.unparse(node)}")
    for name, value, line in _named_values(tree):
        numbers = _ints(value)
        if _SAMPLE_NAME.search(name) and per_sample in numbers:
            found.append(f"{where}:{line}: {name} = {per_sample} (a SparseCore default)")
        if _LIMIT_NAME.search(name) and default_limit in numbers:
            found.append(f"{where}:{line}: {name} = {default_limit} (the default limit)")
        if _CORES_NAME.search(name) and any(n > 1 for n in numbers):
            found.append(f"{where}:{line}: {name} = {numbers} (SparseCores)")
        if _BYTES_NAME.search(name) and byte_limits & set(numbers):
            found.append(f"{where}:{line}: {name} (a SparseCore byte limit)")
    for text in _messages(tree):
        match = chip_list.search(text.value) or figure.search(text.value)
        if match:
            found.append(f"{where}:{text.lineno}: text {match.group(0)!r}")
    return found


def test_chip_facts_and_sparsecore_defaults_live_only_in_base() -> None:
    copies = [copy for module, path in MODULES.items()
              if module not in BASE_FACTS and not module.startswith("tpuemb_cfg.proto")
              for copy in _fact_copies(str(path.relative_to(ROOT)),
                                       path.read_text(encoding="utf-8"))]
    assert not copies, ("chip facts or SparseCore defaults written outside tpuemb_cfg/base/ "
                        "(read them from base.platform / base.sparsecore_defaults):\n"
                        + "\n".join(copies))


def test_the_fact_scan_finds_each_kind_of_copy() -> None:
    source = (
        "HBM = 95 * 2**30\nOTHER = 95e9\nDEFAULT_LIMIT = 256\nSPARSE_CORE_COUNTS = (2, 4)\n"
        "def f(max_ids_per_partition=256):\n    return getattr(f, 'max_unique_ids', 256)\n"
        "MESSAGE = 'accepts 4 (TPU v5p) or 2 (v6e, TPU7x)'\n"
        "ACTIVATION_LIMIT = 2 * 1024 * 1024\n"
        "BUCKETS = 256\nSHIFT = 4 << 32\nTEXT = 'a v5p-64 slice'\nBUDGET = 64 * _GIB\n"
        "MAX_MINIBATCHES = 64\n"
        "def g():\n    'Chips v5p, v6e, TPU7x (a docstring, not a message).'\n"
    )
    lines = sorted(int(c.split(": ", 1)[0].rsplit(":", 1)[1])
                   for c in _fact_copies("probe", source))
    assert lines == [1, 2, 3, 4, 5, 6, 7, 8, 13]


#: The modules that read the platform table or the SparseCore defaults (a new chip kind is one
#: record in base/platform.py; these pick it up).
PLATFORM_READERS = (
    "tpuemb_cfg.derived",  # TPU_DEVICE_MEMORY (SIZE004, --tpu)
    "tpuemb_cfg.sparsecore.topology",  # CHIPS, ChipKind, chip_kind, DEFAULT_SPARSE_CORES
    "tpuemb_cfg.sparsecore.stacker",  # byte and row limits, messages
    "tpuemb_cfg.sparsecore.feed",  # TensorFlow's default limits
    "tpuemb_cfg.sparsecore.summary",  # the default limit in inspect/plan
    "tpuemb_cfg.sparsecore.config",  # max_ids_per_chip_per_sample
    "tpuemb_cfg.sparsecore.preprocess_input",  # the COO buffer, minibatches
    "tpuemb_cfg.sparsecore.tf_preprocess",
    "tpuemb_cfg.planner.limits",
    "tpuemb_cfg.sparsecore.jte.specs",  # jax-tpu-embedding's defaults
    "tpuemb_cfg.sparsecore.jte.convert",
    "tpuemb_cfg.sparsecore.jte.stacking",  # num_sc_per_device accepted
    "tpuemb_cfg.embedding.keras_rs_jax",
    "tpuemb_cfg.rules._facts",  # the $facts of rule texts
    "tpuemb_cfg.rules._sparsecore_common",
    "tpuemb_cfg.rules.sparsecore_devices",
    "tpuemb_cfg.commands.validate",  # --tpu help
    "tpuemb_cfg.commands.plan",  # --topology help
)


@functools.cache
def _targets() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for imp in _imports():
        found[imp.source].add(imp.target)
    return found


@pytest.mark.parametrize("module", PLATFORM_READERS)
def test_platform_readers_import_base(module: str) -> None:
    assert _targets()[module] & set(BASE_FACTS), f"{module} no longer reads tpuemb_cfg.base"
