"""Library surface: names, TensorFlow message compatibility, no descriptor clash, entry points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, golden
from tf_emulation import register

import tpuemb_cfg
from tpuemb_cfg import TPUEmbeddingConfiguration, as_config, dump, load


def test_public_names() -> None:
    for name in ("TPUEmbeddingConfiguration", "OptimizationParameters", "DynamicLearningRate",
                 "LearningRate", "ClippingLimits", "load", "dump", "as_config"):
        assert hasattr(tpuemb_cfg, name), name
    lr = tpuemb_cfg.LearningRate(dynamic=tpuemb_cfg.DynamicLearningRate(tag=0))
    assert lr.SerializeToString() == b"\x12\x00"  # present but empty: tag 0


def test_our_files_and_package_are_not_tensorflows() -> None:
    file = TPUEmbeddingConfiguration.DESCRIPTOR.file
    assert file.name == "tpuemb_cfg/proto/tpu_embedding_configuration.proto"
    assert file.package == "tpuemb_cfg.proto"
    full_name = TPUEmbeddingConfiguration.DESCRIPTOR.full_name
    assert full_name == "tpuemb_cfg.proto.TPUEmbeddingConfiguration"


def test_tensorflow_messages_are_accepted_and_both_schemas_coexist() -> None:
    tf = register()
    data = golden("configs", "c06_optimizers_1.binpb").read_bytes()
    theirs = tf["TPUEmbeddingConfiguration"].FromString(data)
    assert theirs.DESCRIPTOR.full_name == "tensorflow.tpu.TPUEmbeddingConfiguration"
    ours = as_config(theirs)
    assert isinstance(ours, TPUEmbeddingConfiguration)
    assert ours.SerializeToString() == data
    # a tpuemb message is accepted by TensorFlow's class through the wire format, too
    assert tf["TPUEmbeddingConfiguration"].FromString(ours.SerializeToString()) == theirs


def test_tensorflow_registered_first_then_tpuemb_imported() -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests');"
        "from google.protobuf import descriptor_pool;"
        "import tf_emulation;"  # imports tpuemb's generated modules to copy them ...
        "pool = descriptor_pool.Default();"
        "tf = tf_emulation.register(pool);"
        "import tpuemb_cfg;"
        "m = tf['TPUEmbeddingConfiguration'](num_hosts=3);"
        "print(tpuemb_cfg.as_config(m).num_hosts)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_as_config_rejects_other_messages() -> None:
    with pytest.raises(TypeError, match="expected a TPUEmbeddingConfiguration"):
        as_config(tpuemb_cfg.OptimizationParameters())
    with pytest.raises(TypeError):
        as_config(42)


def test_load_and_dump_by_extension(tmp_path: Path) -> None:
    message = load(golden("configs", "c03_legacy.pbtxt"))
    for suffix, golden_suffix in ((".pb", "binpb"), (".textproto", "pbtxt"), (".json", "json"),
                                  (".txtpb", "pbtxt"), (".bin", "binpb")):
        out = tmp_path / f"x{suffix}"
        dump(message, out)
        assert out.read_bytes() == golden("configs", f"c03_legacy.{golden_suffix}").read_bytes()
    raw = golden("configs", "c03_legacy.binpb").read_bytes()
    assert load(raw) == message
    assert load(golden("configs", "c03_legacy.pbtxt").read_bytes(), format="text") == message
    dump(message, tmp_path / "y.cfg", format="binary")
    assert (tmp_path / "y.cfg").read_bytes() == raw


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)


def test_python_dash_m_and_the_checkout_shim() -> None:
    for args in (("-m", "tpuemb_cfg", "--version"), ("cli.py", "--version")):
        out = _run(*args)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"tpuemb {tpuemb_cfg.__version__}")


def test_shell_completion_script() -> None:
    out = _run("-m", "tpuemb_cfg", "completion", "bash")
    assert out.returncode == 0
    assert "_TPUEMB_COMPLETE" in out.stdout


def test_cli_shim_is_not_installed_as_a_module() -> None:
    out = subprocess.run([sys.executable, "-c", "import cli"], cwd="/", capture_output=True)
    assert out.returncode != 0


def test_builtin_example_is_the_quickstart_example() -> None:
    from importlib import resources

    packaged = resources.files("tpuemb_cfg.data").joinpath("default_config.pbtxt").read_bytes()
    assert packaged == (ROOT / "examples" / "quickstart.pbtxt").read_bytes()


def test_importing_the_package_loads_neither_protobuf_nor_click() -> None:
    """`import tpuemb_cfg` is cheap (every public name loads on first use): the command starts
    fast, and Ctrl-C during its start-up has almost nothing to interrupt."""
    code = ("import sys, tpuemb_cfg; "
            "print(sorted(m for m in ('google.protobuf', 'click', 'numpy') if m in sys.modules)); "
            "tpuemb_cfg.TPUEmbeddingConfiguration; print('google.protobuf' in sys.modules)")
    out = _run("-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]


def test_a_library_import_leaves_sigint_alone() -> None:
    code = ("import signal, tpuemb_cfg.cli; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)")
    out = _run("-c", code)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_a_moved_module_keeps_its_old_path_for_a_release() -> None:
    """``import tpuemb_cfg.io`` and ``from tpuemb_cfg.errors import InputError`` (documented
    paths before the root was grouped into folders) give the very module at its new home."""
    code = (
        "import importlib, sys\n"
        "from tpuemb_cfg._moved import MOVED\n"
        "from tpuemb_cfg.errors import InputError\n"
        "from tpuemb_cfg.base.errors import InputError as Home\n"
        "assert InputError is Home\n"
        "for old, new in MOVED.items():\n"
        "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
        "    assert sys.modules[old] is sys.modules[new], old\n"
        "import tpuemb_cfg\n"
        "assert tpuemb_cfg.io is sys.modules['tpuemb_cfg.formats.io']\n"
        "print(len(MOVED))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 20
