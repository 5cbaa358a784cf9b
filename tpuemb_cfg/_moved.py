"""Old import paths of the modules that moved into folders (issue 35): one table, kept for a
release.

tpuemb 0.1 kept 32 modules side by side in the package root. They now live in folders that show
the floors (``base/``, ``formats/``, ``model/``, ``validation/``; the anchor benchmark in
``run/``), and ``import tpuemb_cfg.io`` or
``from tpuemb_cfg.errors import InputError`` keep working: a finder on ``sys.meta_path`` answers
each old name below with the module at its new home, the same module object (not a copy), so
``isinstance`` checks, monkeypatching and pickles see one module. ``tpuemb_cfg.errors`` is a
documented public path and stays one. The package's own code imports the new paths
(``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

#: old module name -> its home now
MOVED: dict[str, str] = {
    "tpuemb_cfg.errors": "tpuemb_cfg.base.errors",
    "tpuemb_cfg.units": "tpuemb_cfg.base.units",
    "tpuemb_cfg.numerics": "tpuemb_cfg.base.numerics",
    "tpuemb_cfg.usercode": "tpuemb_cfg.base.usercode",
    "tpuemb_cfg.protoutil": "tpuemb_cfg.base.protoutil",
    "tpuemb_cfg.version": "tpuemb_cfg.base.version",
    "tpuemb_cfg.lazy": "tpuemb_cfg.base.lazy",
    "tpuemb_cfg.schema": "tpuemb_cfg.base.schema",
    "tpuemb_cfg._interrupt": "tpuemb_cfg.base.interrupt",
    "tpuemb_cfg._streams": "tpuemb_cfg.base.streams",
    "tpuemb_cfg.io": "tpuemb_cfg.formats.io",
    "tpuemb_cfg.atomic": "tpuemb_cfg.formats.atomic",
    "tpuemb_cfg.npzio": "tpuemb_cfg.formats.npzio",
    "tpuemb_cfg.limits": "tpuemb_cfg.formats.limits",
    "tpuemb_cfg.locations": "tpuemb_cfg.formats.locations",
    "tpuemb_cfg.derived": "tpuemb_cfg.model.derived",
    "tpuemb_cfg.layout": "tpuemb_cfg.model.layout",
    "tpuemb_cfg.validator": "tpuemb_cfg.validation.validator",
    "tpuemb_cfg.fix": "tpuemb_cfg.validation.fix",
    "tpuemb_cfg.report": "tpuemb_cfg.validation.report",
    "tpuemb_cfg.settings": "tpuemb_cfg.validation.settings",
    "tpuemb_cfg.inspect_summary": "tpuemb_cfg.validation.inspect_summary",
    "tpuemb_cfg.bench": "tpuemb_cfg.run.bench",
    "tpuemb_cfg.bench_ray": "tpuemb_cfg.run.bench_ray",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new home."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The module ran at its new home already."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (the package ``__init__`` calls it)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
