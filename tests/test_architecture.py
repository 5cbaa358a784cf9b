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
    {"session": ("tpuemb_cfg.session", "tpuemb_cfg.spec_check", "tpuemb_cfg.bench",
                 "tpuemb_cfg.run")},
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
