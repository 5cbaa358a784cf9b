"""The run layer's narrow entry points and the storage-backend registry.

``tpuemb_cfg.executor.Executor``/``replay`` take a ``Prepared`` plus ``RunOptions`` and
``Placement``; the backend is chosen by name from ``storage.BACKENDS`` (the executor imports
none); a setting the chosen backend would ignore is refused; the step route of every table is
chosen once; replay checks every batch once.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.backends.ray.options import RayOptions
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.executor import Executor, Placement, RunOptions, core
from tpuemb_cfg.executor import storage as storage_module
from tpuemb_cfg.executor.local import LOCAL
from tpuemb_cfg.model.layout import TableLayout, host_of
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor as PublicExecutor

replay = importlib.import_module("tpuemb_cfg.executor.replay")

CONFIG = b"""
table_descriptor { name: "t" vocabulary_size: 10 dimension: 2
  optimization_parameters { learning_rate { constant: 0.1 } adagrad { } } }
feature_descriptor { name: "f" table_id: 0 input_shape: 4 }
mode: TRAINING num_hosts: 2 num_tensor_cores: 1 sharding_strategy: MOD
"""


def message() -> Any:
    from tpuemb_cfg import load

    return load(CONFIG, "text")


@pytest.fixture(scope="module")
def prepared() -> Any:
    return prepare(message())


def test_executor_takes_a_prepared_configuration(prepared: Any) -> None:
    with pytest.raises(TypeError, match="tpuemb_cfg.simulate.Executor"):
        Executor(CONFIG)  # type: ignore[arg-type]
    executor = Executor(prepared, RunOptions(engine="numpy"))
    assert executor.prepared is prepared and executor.engine.name == "numpy"
    public = PublicExecutor(message(), engine="numpy", seed=3)
    assert isinstance(public, Executor)


def test_options_name_the_library_parameter() -> None:
    with pytest.raises(ValueError, match="max_memory"):
        RunOptions(max_memory="lots")
    with pytest.raises((TypeError, ValueError), match="seed"):
        RunOptions(seed=1.5)  # type: ignore[arg-type]
    assert RunOptions(max_memory="8G").memory_limit == RunOptions(max_memory="8G").max_memory


def test_backends_are_chosen_by_name(prepared: Any) -> None:
    assert storage_module.choose_backend("local") is LOCAL
    with pytest.raises(UsageError, match="unknown backend 'disk'; expected local or ray"):
        Executor(prepared, placement=Placement("disk"))
    with pytest.raises(ValueError, match="module:attribute"):
        storage_module.register_backend("disk", "nowhere")
    storage_module.register_backend("mine", "tpuemb_cfg.executor.local:LOCAL")
    try:
        executor = Executor(prepared, RunOptions(engine="numpy"), Placement("mine"))
        assert type(executor.storage).__name__ == "LocalStorage"
    finally:
        del storage_module.BACKENDS["mine"]


def test_settings_a_backend_would_ignore_are_refused(prepared: Any) -> None:
    with pytest.raises(UsageError, match=r"shards= not used by backend='local'"):
        Executor(prepared, placement=storage_module.placement(shards=2))
    with pytest.raises(UsageError, match=r"shards= and ray_address= not used"):
        Executor(prepared, placement=storage_module.placement(shards=2, ray_address="x:1"))
    with pytest.raises(UsageError, match=r"colour= not used by backend='ray'"):
        storage_module.placement("ray", colour="blue")
    with pytest.raises(UsageError, match=r"RayOptions: options of another backend, not used "
                       r"by backend='local'"):
        Executor(prepared, placement=Placement("local", RayOptions(shards=2)))
    with pytest.raises(UsageError, match="check_memory=False: not used by backend='ray'"):
        Executor(prepared, RunOptions(check_memory=False), Placement("ray"))
    with pytest.raises(UsageError, match="storage= makes the tables of backend='local'"):
        PublicExecutor(message(), backend="ray", storage=lambda plan, arrays, engine: None)
    with pytest.raises(UsageError, match="shards= not used"):
        PublicExecutor(message(), shards=2)


def test_the_executor_core_names_no_backend() -> None:
    """No ``backend == "ray"`` branch, no ``LocalStorage`` test, no backend import."""
    for module in (core, replay):
        path = Path(module.__file__ or "")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        strings = {n.value for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        imports = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert "ray" not in strings, path
        assert "LocalStorage" not in names, path
        assert not [m for m in imports if "backends" in m or "ray" in m], path


def test_routes_are_chosen_once(prepared: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    route = core.Executor._route

    def counted(self: core.Executor, table: Any) -> core.StepRoute:
        calls.append(table.name)
        return route(self, table)

    monkeypatch.setattr(core.Executor, "_route", counted)
    executor = Executor(prepared)
    batch = [{"ids": np.array([1, 2, 3, 9]), "grad": np.ones((4, 2), np.float32)}]
    for _ in range(3):
        executor.step(batch)
    assert calls == ["t"]


def test_replay_checks_each_batch_once(prepared: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[int] = []
    original = core.check_batch

    def counting(batch: Any, plan: Any, step: int, *args: Any, **kwargs: Any) -> Any:
        checked.append(step)
        return original(batch, plan, step, *args, **kwargs)

    monkeypatch.setattr(core, "check_batch", counting)
    batches = {}
    for step in range(3):
        batches[f"s{step}/f0/ids"] = np.array([step, 1, 2, 9], np.int64)
        batches[f"s{step}/f0/grad"] = np.full((4, 2), 0.5, np.float32)
    out = replay.replay(prepared, batches, options=RunOptions(engine="numpy"))
    assert checked == [0, 1, 2]
    assert sorted(k for k in out if k.endswith("activations")) == [
        f"s{s}/f0/activations" for s in range(3)]


def test_one_host_layout() -> None:
    ids = np.arange(10, dtype=np.int64)
    for mod in (False, True):
        layout = TableLayout(10, 4, mod)
        np.testing.assert_array_equal(layout.host_of(ids), host_of(ids, 10, 4, mod))
