"""Build hook: compile protos/ to Python (+ .pyi stubs) before the package is collected.

Runs for `pip install .`, `pip install -e .` and wheel builds. The generated modules land in
tpuemb_cfg/proto/ (git-ignored), so an editable install imports them from the source tree.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

ROOT = Path(__file__).resolve().parent
PROTO_ROOT = ROOT / "protos"


def generate_protos() -> None:
    import grpc_tools
    from grpc_tools import protoc  # build-time dependency (pyproject build-system.requires)

    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = str(Path(grpc_tools.__file__).parent / "_proto")  # google/protobuf/*.proto
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={ROOT}"]
    plugin = shutil.which("protoc-gen-mypy") or str(Path(sys.executable).parent / "protoc-gen-mypy")
    if os.path.exists(plugin):
        args += [f"--plugin=protoc-gen-mypy={plugin}", f"--mypy_out={ROOT}"]
    args += sources
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + " ".join(sources))


class GenerateProtos(Command):
    description = "compile protos/*.proto into tpuemb_cfg/proto"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        generate_protos()


class BuildPy(build_py):
    def run(self) -> None:
        generate_protos()
        super().run()


class EggInfo(egg_info):
    def run(self) -> None:
        generate_protos()
        super().run()


setup(cmdclass={"build_py": BuildPy, "egg_info": EggInfo, "generate_protos": GenerateProtos})
