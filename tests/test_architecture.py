"""The import contract, the size limit and the one home of each optimizer (docs/architecture.md).

Reads the package's source with :mod:`ast` (nothing is imported) and checks:

- **Layers look down**: every module belongs to one layer (longest prefix of ``LAYERS``); a
  module imports only modules of its own group or of lower layers. Groups that share a layer
  (validate / compile / run; backends / sim) do not import each other.
- **No cycles, by any route**: the module graph has no strongly connected component of more
  than one module. Its edges are every import: at module level, in ``if TYPE_CHECKING:``
  blocks, inside functions, and ``importlib.import_module(...)`` / ``__import__(...)`` calls
  whose name the source spells out. Registry strings (``"tpuemb_cfg.a.b:NAME"``) are not edges
  (``REGISTRY_STRING``); ``test_registry_strings_resolve`` checks each names a real attribute.
- **In-function imports keep start-up fast**: a module of the package is imported inside a
  function only when that defers a heavy package (``HEAVY_PACKAGES``) the importing module does
  not load anyway, or when the importing module is in ``IN_FUNCTION_ALLOWED`` with its reason.
- **No module over ``MAX_MODULE_LINES`` physical lines** (generated ``*_pb2.py`` aside).
- **No private reach**: a name or module starting with ``_`` is used only inside the package
  that defines it (``a.b._c`` belongs to ``a.b`` and its sub-packages).
- **One home per optimizer**: each proto name of ``OptimizationParameters.parameters`` appears in
  code (an identifier, or a word of a string that is not a docstring) in at most
  ``MAX_OPTIMIZER_MODULES`` modules.

An import ``from a.b import c`` depends on ``a.b.c`` when that is a module, else on ``a.b``;
importing a package's ``__init__`` is a dependency on the package module itself, as
``import-linter`` counts it. Importing ``a.b.c`` also runs ``a`` and ``a.b`` (their
``__init__``), which :func:`heavy_loads` counts.
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
    {"base": ("tpuemb_cfg.proto", "tpuemb_cfg.base")},
    {"io": ("tpuemb_cfg.formats",)},
    {"algorithms": ("tpuemb_cfg.algorithms",)},
    {"model": ("tpuemb_cfg.model", "tpuemb_cfg.sparsecore", "tpuemb_cfg.checkpoints")},
    {"validate": ("tpuemb_cfg.validation", "tpuemb_cfg.rules")},
    {
        "compile": ("tpuemb_cfg.embedding",),
        "run": ("tpuemb_cfg.executor",),
    },
    {
        "backends": ("tpuemb_cfg.backends",), "sim": ("tpuemb_cfg.sim",),
        "plan": ("tpuemb_cfg.planner",),
    },
    {"session": ("tpuemb_cfg.session", "tpuemb_cfg.spec_check", "tpuemb_cfg.run")},
    {"review": ("tpuemb_cfg.review",)},
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


#: How a module reaches another (``_Import.kind``): at module level (a class body counts); in an
#: ``if TYPE_CHECKING:`` block; inside a function or lambda; or through
#: ``importlib.import_module(...)`` / ``__import__(...)`` with a name the source spells out (a
#: string literal, or ``__name__`` / ``__package__`` followed by literal text, as in
#: ``f"{__name__}.numba"``), wherever the call is.
MODULE_LEVEL, TYPING, IN_FUNCTION, DYNAMIC = "module", "typing", "function", "dynamic"
_PB2 = "google.protobuf"  # what importing a generated ``*_pb2`` module imports

#: Third-party packages whose import costs start-up time: the roots of :func:`heavy_modules`.
#: ``google.protobuf`` stands for the generated ``*_pb2`` modules too (each imports it).
HEAVY_PACKAGES = ("numpy", "numba", "ray", "pyarrow", "google.protobuf", "matplotlib",
                  "tensorstore")

#: Modules allowed an in-function import that defers nothing heavy, each with its reason
#: (``test_in_function_imports_keep_start_up_fast``; docs/architecture.md, "In-function
#: imports"). Empty: every such import moved to the top of its module. An entry needs a reason
#: a test or a command relies on (say, a module whose own import must stay minimal because a
#: subprocess or a signal handler loads it), and ``test_in_function_allow_list_is_used`` drops
#: it once it is no longer needed.
IN_FUNCTION_ALLOWED: dict[str, str] = {}

#: ``"tpuemb_cfg.a.b:NAME"`` in a string: a registry entry (``executor.storage.BACKENDS``),
#: imported by name only when it is chosen. Not an edge of the import graph (the plug-in imports
#: the seam that names it: counting it would make every plug-in a cycle by construction);
#: ``test_registry_strings_resolve`` checks that each names a module that defines NAME.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
REGISTRY_STRING = re.compile(rf"^(tpuemb_cfg(?:\.{_NAME})*):({_NAME})$")


def _package_of(module: str) -> str:
    path = MODULES.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


class _Import:
    def __init__(self, source: str, target: str, line: int, kind: str,
                 private_name: str | None, deferred: bool = False) -> None:
        self.source, self.target, self.line = source, target, line
        self.kind, self.private_name = kind, private_name
        #: Run only when a function is called (an in-function import, or a dynamic one in a
        #: function), not when the module is imported.
        self.deferred = deferred or kind == IN_FUNCTION

    @property
    def typing_only(self) -> bool:
        return self.kind == TYPING


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _dynamic_name(call: ast.Call, module: str) -> str | None:
    """The module an ``importlib.import_module(...)`` or ``__import__(...)`` call names, when its
    first argument spells it out (relative names resolved against ``package=``), else None."""
    func = call.func
    called = (func.attr if isinstance(func, ast.Attribute)
              else func.id if isinstance(func, ast.Name) else "")
    if called not in ("import_module", "__import__") or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        name = first.value
    elif (isinstance(first, ast.JoinedStr) and len(first.values) == 2
          and isinstance(first.values[0], ast.FormattedValue)
          and isinstance(first.values[0].value, ast.Name)
          and first.values[0].value.id in ("__name__", "__package__")
          and isinstance(first.values[1], ast.Constant)):
        base = module if first.values[0].value.id == "__name__" else _package_of(module)
        name = base + str(first.values[1].value)
    else:
        return None
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        parts = _package_of(module).split(".")
        name = ".".join(parts[: len(parts) - (level - 1)] + [name.lstrip(".")]).rstrip(".")
    return name if name in MODULES else None


class _Collector(ast.NodeVisitor):
    """Every import of one module, with its kind (module level, typing, in a function, dynamic),
    the names it binds to modules, and the package-external imports at module level."""

    def __init__(self, module: str) -> None:
        self.module, self.package = module, _package_of(module)
        self.found: list[_Import] = []
        self.bound: dict[str, str] = {}
        self.external: set[str] = set()  # third-party modules imported at module level
        self.functions = 0
        self.typing = 0
        self.tree = ast.Module(body=[], type_ignores=[])

    def _kind(self) -> str:
        return TYPING if self.typing else IN_FUNCTION if self.functions else MODULE_LEVEL

    def _add(self, target: str, line: int, private: str | None = None) -> None:
        self.found.append(_Import(self.module, target, line, self._kind(), private))

    def _nested(self, node: ast.AST) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self.typing += 1
        for child in node.body:
            self.visit(child)
        self.typing -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in MODULES:
                self._add(alias.name, node.lineno)
                if alias.asname:
                    self.bound[alias.asname] = alias.name
            elif self._kind() == MODULE_LEVEL:
                self.external.add(_PB2 if alias.name.endswith("_pb2") else alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        if origin != "tpuemb_cfg" and not origin.startswith("tpuemb_cfg."):
            if self._kind() == MODULE_LEVEL:
                self.external.update(f"{origin}.{alias.name}" for alias in node.names)
            return
        for alias in node.names:
            sub = f"{origin}.{alias.name}"
            if (origin.endswith("_pb2") or sub.endswith("_pb2")) and self._kind() == MODULE_LEVEL:
                self.external.add(_PB2)  # generated code (not in MODULES)
            if sub in MODULES:
                self._add(sub, node.lineno)
                self.bound[alias.asname or alias.name] = sub
            elif origin in MODULES:
                self._add(origin, node.lineno, alias.name if alias.name.startswith("_")
                          and not alias.name.startswith("__") else None)

    def visit_Call(self, node: ast.Call) -> None:
        target = _dynamic_name(node, self.module)
        if target is not None:
            self.found.append(_Import(self.module, target, node.lineno, DYNAMIC, None,
                                      deferred=self.functions > 0))
        self.generic_visit(node)


@functools.cache
def _collected() -> dict[str, _Collector]:
    found = {}
    for module, path in MODULES.items():
        collector = _Collector(module)
        collector.tree = ast.parse(path.read_text(encoding="utf-8"))
        collector.visit(collector.tree)
        found[module] = collector
    return found


def _imports() -> list[_Import]:
    found: list[_Import] = []
    for module, collector in _collected().items():
        found += collector.found
        for node in ast.walk(collector.tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in collector.bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(_Import(module, collector.bound[node.value.id], node.lineno,
                                     MODULE_LEVEL, node.attr))
    return found


IMPORTS = _imports()


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_collector_sees_every_route() -> None:
    """The routes the graph follows, on a module written for it: a module-level import, one
    under ``TYPE_CHECKING``, one in a function, and dynamic ones (a literal, ``__import__``,
    ``__package__`` plus a literal); a name the source does not spell out is not followed."""
    source = (
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "from tpuemb_cfg.base import units\n"
        "if TYPE_CHECKING:\n"
        "    from tpuemb_cfg.formats.io import Source\n"
        "def f(name):\n"
        "    from tpuemb_cfg.formats import npzio\n"
        "    importlib.import_module('tpuemb_cfg.formats.limits')\n"
        "    importlib.import_module(name)\n"
        "    return __import__('tpuemb_cfg.formats.atomic')\n"
        "M = importlib.import_module(f'{__package__}.version')\n"
    )
    collector = _Collector("tpuemb_cfg.base.errors")
    collector.visit(ast.parse(source))
    assert [(i.target, i.kind, i.deferred) for i in collector.found] == [
        ("tpuemb_cfg.base.units", MODULE_LEVEL, False), ("tpuemb_cfg.formats.io", TYPING, False),
        ("tpuemb_cfg.formats.npzio", IN_FUNCTION, True),
        ("tpuemb_cfg.formats.limits", DYNAMIC, True),
        ("tpuemb_cfg.formats.atomic", DYNAMIC, True), ("tpuemb_cfg.base.version", DYNAMIC, False),
    ]


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
    for imp in IMPORTS:  # every kind: module level, typing, in a function, dynamic
        if imp.source != imp.target:
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
    assert not cycles, "import cycles (the edges inside each):\n" + "\n".join(
        _cycle_lines(component) for component in cycles)


def _cycle_lines(component: list[str]) -> str:
    """One cycle and the imports inside it, with their lines and kinds."""
    members = set(component)
    edges = sorted({f"  {imp.source}:{imp.line} -> {imp.target} ({imp.kind})"
                    for imp in IMPORTS if imp.source in members and imp.target in members
                    and imp.source != imp.target})
    return "\n".join(["cycle: " + ", ".join(component), *edges])


#: The most physical lines a module may have (generated ``*_pb2.py`` aside): a module longer
#: than this does more than one thing; split it by what it does.
MAX_MODULE_LINES = 800


def physical_lines(data: bytes) -> int:
    """What ``wc -l`` counts, plus a last line without its newline: blank lines, comments and
    docstrings included."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def test_physical_lines_counts_like_wc() -> None:
    assert [physical_lines(b""), physical_lines(b"a"), physical_lines(b"a\n"),
            physical_lines(b"a\n\nb"), physical_lines(b"\n\n")] == [0, 1, 1, 3, 2]


def test_no_module_over_the_line_limit() -> None:
    long = {module: n for module, path in MODULES.items()
            if (n := physical_lines(path.read_bytes())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(
        f"{module}: {n}" for module, n in sorted(long.items()))


def _loads_with(module: str) -> set[str]:
    """The package's modules that importing ``module`` runs: its parent packages' ``__init__``s
    and the modules it imports at module level (typing and in-function imports aside), and
    theirs."""
    collected = _collected()
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parts = current.split(".")
        parents = (".".join(parts[:n]) for n in range(1, len(parts)))
        todo += [parent for parent in parents if parent in MODULES]
        todo += [imp.target for imp in collected[current].found
                 if imp.kind in (MODULE_LEVEL, DYNAMIC) and not imp.deferred]
    return seen


def _is_heavy_package(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in HEAVY_PACKAGES)


@functools.cache
def heavy_loads() -> dict[str, frozenset[str]]:
    """For each module of the package, the ``HEAVY_PACKAGES`` that importing it loads (through
    the modules it runs: :func:`_loads_with`)."""
    collected = _collected()
    direct = {module: {root for root in HEAVY_PACKAGES for name in c.external
                       if name == root or name.startswith(root + ".")}
              for module, c in collected.items()}
    return {module: frozenset().union(*(direct[m] for m in _loads_with(module)))
            for module in MODULES}


def heavy_modules() -> set[str]:
    """The package's modules whose import loads one of ``HEAVY_PACKAGES``."""
    return {module for module, loads in heavy_loads().items() if loads}


def test_heavy_modules_are_found() -> None:
    """The classification the rule below rests on, on modules whose imports are known: the
    ``.npz`` reader imports NumPy; ``io`` imports the generated messages (protobuf); the NumPy
    engine imports NumPy, and its package the generated messages; the error classes and the
    unit grammar import nothing heavy."""
    loads = heavy_loads()
    assert loads["tpuemb_cfg.formats.npzio"] == {"numpy"}
    assert loads["tpuemb_cfg.formats.io"] == {"google.protobuf"}
    assert "numpy" in loads["tpuemb_cfg.executor.engines.numpy"]
    assert loads["tpuemb_cfg.base.errors"] == loads["tpuemb_cfg.base.units"] == frozenset()


def _defers_heavy(imp: _Import) -> bool:
    """Whether an in-function import keeps start-up fast: the module it imports loads a heavy
    package that importing the module it sits in does not load anyway."""
    loads = heavy_loads()
    return bool(loads[imp.target] - loads[imp.source])


def test_in_function_imports_keep_start_up_fast() -> None:
    """An import of one of the package's modules inside a function (or a dynamic one there) is
    allowed only when it keeps start-up fast: importing the module it names loads one of
    ``HEAVY_PACKAGES`` (NumPy, numba, Ray, pyarrow, protobuf, matplotlib) that importing the
    module it sits in does not load already; or the importing module is in
    ``IN_FUNCTION_ALLOWED`` with its reason. Any other import belongs at the top of the module,
    where the layer and cycle tests see it plainly."""
    wrong = sorted({
        f"{imp.source}:{imp.line} imports {imp.target} in a function (it defers nothing heavy: "
        "import it at the top)"
        for imp in IMPORTS
        if imp.deferred and imp.source != imp.target and not _defers_heavy(imp)
        and imp.source not in IN_FUNCTION_ALLOWED
    })
    assert not wrong, "in-function imports that do not keep start-up fast:\n" + "\n".join(wrong)


def test_in_function_allow_list_is_used() -> None:
    """Every allowed module still has an in-function import the rule would refuse (else drop
    its entry)."""
    users = {imp.source for imp in IMPORTS
             if imp.deferred and imp.source != imp.target and not _defers_heavy(imp)}
    assert set(IN_FUNCTION_ALLOWED) <= users, sorted(set(IN_FUNCTION_ALLOWED) - users)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_registry_strings_resolve() -> None:
    """Every ``"tpuemb_cfg.a.b:NAME"`` string names a module of the package that defines NAME at
    its top level, so a renamed module or attribute fails here, not when a user chooses it."""
    wrong, seen = [], 0
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            match = REGISTRY_STRING.match(node.value)
            if match is None:
                continue
            seen += 1
            target, name = match.groups()
            if target not in MODULES:
                wrong.append(f"{module}:{node.lineno}: {node.value!r}: no module {target}")
            elif name not in _top_level_names(ast.parse(MODULES[target].read_text("utf-8"))):
                wrong.append(f"{module}:{node.lineno}: {node.value!r}: {target} has no {name}")
    assert seen, "no registry string found: is REGISTRY_STRING still the registry's form?"
    assert not wrong, "registry strings that do not resolve:\n" + "\n".join(wrong)


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


#: A finding id (``rules._registry._ID_RE``) as a word of a string.
FINDING_ID = re.compile(r"\b[A-Z][A-Z_]*[0-9]{3}\b")
#: Id-shaped strings that name no finding: the id of a diagnostic made outside any rule.
NOT_FINDING_IDS = frozenset({"UNKNOWN000"})


def _registered_ids() -> set[str]:
    """Ids registered in ``tpuemb_cfg/rules`` by a call of ``rule`` (or a wrapper named
    ``*rule``, as ``range_rule``) with the id as its first argument."""
    found: set[str] = set()
    for module, path in MODULES.items():
        if not _inside(module, "tpuemb_cfg.rules"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            first = node.args[0]
            if (name.endswith("rule") and isinstance(first, ast.Constant)
                    and isinstance(first.value, str) and FINDING_ID.fullmatch(first.value)):
                found.add(first.value)
    return found


@functools.cache
def emitted_finding_ids() -> dict[str, frozenset[str]]:
    """Each id-shaped word of a string in code (not a docstring or comment) -> the modules
    naming it: the ids a command can emit (``tests/test_findings_registry.py`` reads it too)."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstring_ids(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings):
                for word in FINDING_ID.findall(node.value):
                    found[word].add(module)
    return {word: frozenset(modules) for word, modules in found.items()}


def test_every_finding_id_has_one_registry() -> None:
    """Each finding id a module names in code (a string, not a docstring or comment) is a rule
    of the one registry (``tpuemb_cfg.rules``): validate's, SparseCore's and plan's alike."""
    registered = _registered_ids()
    assert {"PARSE001", "TAG002", "SC001", "PLAN004", "PLAN021"} <= registered
    missing = {word: modules for word, modules in emitted_finding_ids().items()
               if word not in registered and word not in NOT_FINDING_IDS}
    assert not missing, "finding ids named in code but registered by no rule:\n" + "\n".join(
        f"{word}: {', '.join(sorted(modules))}" for word, modules in sorted(missing.items()))


#: Learning-rate schedules and Adam's bias correction: each is written once (issue 35), in its
#: home module; no other module defines a function or class of these names (Keras' class names
#: in snake case included). Every spec that declares a schedule (a model spec, a TOML spec, a
#: simulation spec) calls the home's function, so the same schedule gives the same rates.
SCHEDULE_HOMES: dict[str, str] = {
    **dict.fromkeys((
        "exponential_decay", "piecewise_constant", "warmup_cosine", "exponential",
        "inverse_time", "piecewise", "polynomial", "cosine", "cosine_restarts",
        "warmup_poly_decay", "inverse_time_decay", "piecewise_constant_decay",
        "polynomial_decay", "cosine_decay", "cosine_decay_restarts", "warm_up_and_poly_decay",
    ), "tpuemb_cfg.algorithms.schedules"),
    **dict.fromkeys(("bias_correction", "bias_corrected_rate", "adam_bias_correction"),
                    "tpuemb_cfg.algorithms.adam"),
}


def _definitions() -> dict[str, set[str]]:
    """Each function or class name (at any depth) -> the modules defining it."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[node.name.lower()].add(module)
    return found


def test_each_schedule_is_defined_in_one_module() -> None:
    definitions = _definitions()
    wrong = [f"{name} is defined in {', '.join(sorted(definitions[name] - {home}))} (its home "
             f"is {home})" for name, home in SCHEDULE_HOMES.items()
             if definitions[name] - {home}]
    assert not wrong, "schedules defined outside their home:\n" + "\n".join(wrong)
    # the homes hold them (a renamed function would leave the check above empty-handed)
    for name in ("exponential_decay", "piecewise_constant", "warmup_cosine", "exponential",
                 "bias_correction", "bias_corrected_rate"):
        assert definitions[name] == {SCHEDULE_HOMES[name]}, name
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
    "tpuemb_cfg.model.derived",  # TPU_DEVICE_MEMORY (SIZE004, --tpu)
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
# ------------------------------------------------------------------------------------------------
# The storage seam (docs/architecture.md, "The storage seam"): the executor and the sims reach a
# storage only through the calls ``executor.storage.Storage`` declares, and choose a backend only
# through its descriptor (``storage.choose_backend``), never by testing its name.

#: The packages that may know a backend by name: the backends themselves.
BACKEND_PACKAGES = ("tpuemb_cfg.backends",)


def _outside_backends() -> list[tuple[str, ast.AST]]:
    return [(module, ast.parse(path.read_text(encoding="utf-8")))
            for module, path in MODULES.items()
            if not any(_inside(module, package) for package in BACKEND_PACKAGES)]


def _names_a_storage(node: ast.AST) -> bool:
    """Whether ``node`` is a storage by its name: ``storage``, ``self.storage``, ``store`` ..."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    else:
        return False
    return "storage" in name.lower() or name.lower().strip("_") == "store"


def storage_probes(tree: ast.AST) -> list[int]:
    """Lines of ``getattr``/``hasattr`` calls on a storage (what a declared seam replaces)."""
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "hasattr") and node.args
                  and _names_a_storage(node.args[0]))


def backend_name_tests(tree: ast.AST, name: str = "ray") -> list[int]:
    """Lines of comparisons with the string ``name`` (``backend == "ray"``, ``!= "ray"``,
    ``in ("ray", ...)``)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            values = (operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set)
                      else [operand])
            if any(isinstance(v, ast.Constant) and v.value == name for v in values):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_the_scans_find_what_they_look_for() -> None:
    """The two scans below, on code that does what they forbid and on code that does not."""
    probing = ast.parse("if callable(getattr(self.storage, 'prefetch', None)): pass\n"
                        "x = hasattr(store, 'flush')\ny = getattr(self.plan, 'tables')")
    assert storage_probes(probing) == [1, 2]
    named = ast.parse("a = backend == 'ray'\nb = 'ray' != placement.backend\n"
                      "c = backend in ('local', 'ray')\nd = backend == 'local'\ne = {'ray': 1}")
    assert backend_name_tests(named) == [1, 2, 3]


def test_no_storage_is_probed_outside_the_backends() -> None:
    wrong = [f"{module}:{line}" for module, tree in _outside_backends()
             for line in storage_probes(tree)]
    assert not wrong, ("getattr/hasattr on a storage (declare the call on "
                       "executor.storage.Storage instead):\n" + "\n".join(wrong))


def test_no_backend_is_known_by_name_outside_the_backends() -> None:
    wrong = [f"{module}:{line}" for module, tree in _outside_backends()
             for line in backend_name_tests(tree)]
    assert not wrong, ('a comparison with "ray" (ask the backend descriptor instead: '
                       "storage.choose_backend(name).in_process, .errors, .session ...):\n"
                       + "\n".join(wrong))


def test_no_cycle_in_the_run_layer_counting_typing_and_local_imports() -> None:
    """The executor and the backends: no loop even through ``if TYPE_CHECKING:`` imports or
    imports inside functions (a module's dependencies are one-way)."""
    edges: dict[str, set[str]] = defaultdict(set)
    scope = ("tpuemb_cfg.executor", "tpuemb_cfg.backends")
    for imp in IMPORTS:
        if imp.source != imp.target and all(
                any(_inside(m, p) for p in scope) for m in (imp.source, imp.target)):
            edges[imp.source].add(imp.target)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for child in edges[todo.pop()]:
                if child == goal:
                    return True
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return False

    loops = sorted(f"{a} -> {b}" for a in list(edges) for b in edges[a] if reaches(b, a))
    assert not loops, "imports that close a loop:\n" + "\n".join(loops)


# -- the floors as folders (issue 35) ------------------------------------------------------------

#: The package root: the public face (the lazy package, the command, ``errors``' old path through
#: the alias table, the simulator's API) and the session / run layer. Everything else lives in a
#: folder named for its floor (base, formats, model, validation, ...).
ROOT_MODULES = frozenset({
    "tpuemb_cfg", "tpuemb_cfg.__main__", "tpuemb_cfg._moved", "tpuemb_cfg.cli",
    "tpuemb_cfg.facade", "tpuemb_cfg.session", "tpuemb_cfg.simulate", "tpuemb_cfg.spec_check",
})


def _moved_table() -> dict[str, str]:
    """``_moved.MOVED`` read from the source (nothing is imported)."""
    tree = ast.parse((PACKAGE / "_moved.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "MOVED":
            assert node.value is not None
            table = ast.literal_eval(node.value)
            assert isinstance(table, dict)
            return table
    raise AssertionError("tpuemb_cfg/_moved.py defines no MOVED table")


def test_the_root_holds_the_public_face_and_the_run_layer() -> None:
    root = {module for module, path in MODULES.items()
            if path.parent == PACKAGE and path.name != "__init__.py" or module == "tpuemb_cfg"}
    assert root == ROOT_MODULES, (f"new at the root: {sorted(root - ROOT_MODULES)}; gone: "
                                  f"{sorted(ROOT_MODULES - root)}")


def test_every_old_path_leads_to_a_module_and_none_is_used_inside() -> None:
    moved = _moved_table()
    assert moved, "the alias table is empty"
    for old, new in moved.items():
        assert new in MODULES, f"{old} -> {new}: no such module"
        assert old not in MODULES, f"{old} exists again beside its alias"
    wrong = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py")]):
        if path.name.endswith("_pb2.py") or path == PACKAGE / "_moved.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name} (now {moved[name]})"
                      for name in names if name in moved]
    assert not wrong, "old module paths imported (use the new ones):\n" + "\n".join(wrong)
