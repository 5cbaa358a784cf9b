"""The simulator's public entry points that take any configuration (``tpuemb_cfg.simulate``).

``Executor(config, ...)``, ``replay(config, batches, ...)``, ``SyntheticRun(config, ...)`` and
``MultiWorkerRun(config, ...)`` accept what
``tpuemb_cfg.session.prepare`` takes - a path (text, binary, JSON; a ``.py``/``.toml`` spec),
bytes, tpuemb's or TensorFlow's message, a compiled spec, or a ``Prepared`` - with keyword
arguments for every option. They prepare the configuration (parse, validate, plan: once) and
hand it, with the option records ``RunOptions`` and ``Placement`` (and for the simulated runs
``SyntheticOptions``, ``WorkerOptions``: ``tpuemb_cfg.sim.options``), to the run layer's
``tpuemb_cfg.executor.Executor`` / ``replay`` and ``tpuemb_cfg.sim``'s ``SyntheticRun`` /
``MultiWorkerRun``, which take only a ``Prepared``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from .executor import core
from .executor.engines import Engine, get_engine
from .executor.local import StorageFactory, custom_backend
from .executor.options import Placement, RunOptions
from .executor.plan import Plan
from .executor.replay import replay as replay_prepared
from .executor.storage import LocalStorage, choose_backend
from .executor.storage import placement as make_placement
from .executor.workload import IdDistribution, SequenceLengths
from .run import Run, RunRequest, RunResult, open_run
from .session import prepare
from .sim import multiworker, synthetic
from .sim.options import DelayModel, SyntheticOptions, WorkerOptions
from .sim.schedules import Schedule

if TYPE_CHECKING:
    from .run import Run, RunRequest, RunResult, open_run

__all__ = ["Executor", "MultiWorkerRun", "Run", "RunRequest", "RunResult", "SyntheticRun",
           "open_run", "replay"]

Combiners = str | Sequence[str] | Mapping[int, str] | None


def _placement(backend: str, shards: int | None, ray_address: str | None,
               storage: StorageFactory) -> Placement:
    """The ``Placement`` of the keyword arguments (an unknown backend refused first);
    ``storage=`` only with the local backend."""
    choose_backend(backend)
    if storage is not LocalStorage:
        if backend != "local":
            raise UsageError(f"storage= makes the tables of backend='local'; with "
                             f"backend={backend!r} it would be ignored: remove one of the two")
        return make_placement(custom_backend(storage), shards=shards, ray_address=ray_address)
    return make_placement(backend, shards=shards, ray_address=ray_address)


class Executor(core.Executor):
    """``tpuemb_cfg.executor.Executor`` of any configuration ``prepare`` takes.

    ``config``: a path, bytes, a message, a compiled spec or a ``Prepared``; ``combiners``: one
    name for every feature, a list with one per feature, or ``{feature_index: name}`` (default:
    a compiled spec's, else ``mean``); ``validate_config=False`` skips validation (the caller
    validated it already; a configuration the validator reports errors for raises
    ``InputError`` otherwise). ``seed``, ``engine``, ``max_memory``, ``check_memory``,
    ``report``, ``strict_finite``: the ``RunOptions``; ``backend`` (``local``, ``ray``), ``shards``,
    ``ray_address``: the ``Placement``; ``storage``: makes the ``Storage`` of the tables and
    slots from the plan, the initial arrays and the engine (default ``LocalStorage``; local
    backend only). ``initial_state``, ``state_source``, ``strict``: as for the base class.
    """

    def __init__(  # noqa: PLR0913 - the public keyword arguments, one per option
        self,
        config: Any,
        *,
        combiners: Combiners = None,
        initial_state: Mapping[str, Any] | None = None,
        seed: int = 0,
        max_memory: int | str | None = None,
        check_memory: bool = True,
        state_source: str | None = None,
        strict: bool = False,
        validate_config: bool = True,
        engine: str | Engine = "numba",
        report: bool = True,
        storage: Callable[[Plan, dict[str, np.ndarray], Engine], Any] = LocalStorage,
        backend: str = "local",
        ray_address: str | None = None,
        shards: int | None = None,
        strict_finite: bool = False,
    ) -> None:
        placement = _placement(backend, shards, ray_address, storage)
        options = RunOptions(seed=seed, max_memory=max_memory, check_memory=check_memory,
                             report=report, strict_finite=strict_finite)
        options = replace(options, engine=get_engine(engine))
        super().__init__(prepare(config, combiners=combiners, check=validate_config), options,
                         placement, initial_state=initial_state, state_source=state_source,
                         strict=strict)


def replay(  # noqa: PLR0913 - the public keyword arguments, one per option
    config: Any,
    batches: Mapping[str, Any],
    init: Mapping[str, Any] | None = None,
    *,
    combiners: Combiners = None,
    seed: int = 0,
    batches_source: str | None = None,
    init_source: str | None = None,
    max_memory: int | str | None = None,
    validate_config: bool = True,
    on_step: Callable[[int, Mapping[str, core.TableReport]], None] | None = None,
    engine: str = "numba",
    backend: str = "local",
    ray_address: str | None = None,
    shards: int | None = None,
    strict_finite: bool = False,
) -> dict[str, np.ndarray]:
    """``tpuemb_cfg.executor.replay`` of any configuration ``prepare`` takes (``combiners``
    re-plan a ``Prepared``; ``validate_config=False`` skips validation), with its options as
    keyword arguments (``RunOptions``: ``seed``, ``max_memory``, ``engine``, ``strict_finite``;
    ``Placement``: ``backend``, ``shards``, ``ray_address``)."""
    return replay_prepared(
        prepare(config, combiners=combiners, check=validate_config), batches, init,
        options=RunOptions(seed=seed, engine=engine, max_memory=max_memory,
                           strict_finite=strict_finite),
        placement=make_placement(backend, shards=shards, ray_address=ray_address),
        sources=(batches_source, init_source), on_step=on_step,
    )


class SyntheticRun(synthetic.SyntheticRun):
    """``tpuemb_cfg.sim.synthetic.SyntheticRun`` of any configuration ``prepare`` takes.

    ``config``, ``combiners``, ``validate_config``: as for :class:`Executor`; ``seed``,
    ``engine``, ``max_memory``, ``strict_finite``: the ``RunOptions``; ``backend``,
    ``ray_address``, ``shards``: the ``Placement``; ``learning_rate``, ``schedules``
    (``spec_path``: their spec file, for errors), ``ids``, ``sequence_lengths``: the
    ``SyntheticOptions``.
    """

    def __init__(  # noqa: PLR0913 - the public keyword arguments, one per option
        self,
        config: Any,
        *,
        seed: int = 0,
        combiners: Combiners = None,
        learning_rate: float | None = None,
        schedules: Sequence[Schedule] = (),
        spec_path: str | None = None,
        max_memory: int | str | None = None,
        validate_config: bool = True,
        engine: str = "numba",
        backend: str = "local",
        ray_address: str | None = None,
        shards: int | None = None,
        ids: str | IdDistribution | None = None,
        sequence_lengths: str | SequenceLengths | None = None,
        strict_finite: bool = False,
    ) -> None:
        data = SyntheticOptions(learning_rate, schedules, spec_path, ids, sequence_lengths)
        options = RunOptions(seed=seed, engine=engine, max_memory=max_memory,
                             strict_finite=strict_finite)
        super().__init__(prepare(config, combiners=combiners, check=validate_config), options,
                         make_placement(backend, shards=shards, ray_address=ray_address), data=data)


class MultiWorkerRun(multiworker.MultiWorkerRun):
    """``tpuemb_cfg.sim.multiworker.MultiWorkerRun`` of any configuration ``prepare`` takes.

    ``workers``, ``replicas_to_aggregate``, ``max_staleness``, ``init_tokens``, ``delay``: the
    ``WorkerOptions``; the other arguments as for :class:`SyntheticRun`.
    """

    def __init__(  # noqa: PLR0913 - the public keyword arguments, one per option
        self,
        config: Any,
        *,
        workers: int = 1,
        replicas_to_aggregate: int | None = None,
        max_staleness: int | None = None,
        init_tokens: int = -1,
        delay: DelayModel | str | None = None,
        seed: int = 0,
        combiners: Combiners = None,
        learning_rate: float | None = None,
        schedules: Sequence[Schedule] = (),
        max_memory: int | str | None = None,
        validate_config: bool = True,
        spec_path: str | None = None,
        engine: str = "numba",
        backend: str = "local",
        ray_address: str | None = None,
        shards: int | None = None,
        ids: str | IdDistribution | None = None,
        sequence_lengths: str | SequenceLengths | None = None,
        strict_finite: bool = False,
    ) -> None:
        several = WorkerOptions(workers, replicas_to_aggregate, max_staleness, init_tokens, delay)
        prepared = prepare(config, combiners=combiners, check=validate_config)
        data = SyntheticOptions(learning_rate, schedules, spec_path, ids, sequence_lengths)
        options = RunOptions(seed=seed, engine=engine, max_memory=max_memory,
                             strict_finite=strict_finite)
        placement = make_placement(backend, shards=shards, ray_address=ray_address)
        super().__init__(prepared, options, placement, data=data, workers=several)

