"""What a run is asked to do: :class:`RunRequest`, one frozen record of every mode's inputs.

A request names its mode by what it holds: ``batches`` (a B.npz to replay), ``workers`` (or
any other multi-worker field: several workers on synthetic data), else one worker on synthetic
data; a SparseCore spec as the source makes any of them a SparseCore run
(``tpuemb_cfg.session.source_kind``). The paths it holds are the files the run reads (B.npz,
I.npz, the checkpoint it resumes) and those its caller will write (O.npz, the folder of a
synthetic run's files, the plot, the saved batches): the run layer reads the first and only
names the second, which it anchors to the folder the run started in (``Run.where``) before a
spec's code can change it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuemb_cfg.base.errors import InputError, shown
from tpuemb_cfg.executor.options import RunOptions
from tpuemb_cfg.executor.storage import placement
from tpuemb_cfg.executor.workload import parse_ids, parse_sequence_lengths
from tpuemb_cfg.sim.options import SyntheticOptions

__all__ = ["BAG_SIZES", "TABLES", "RunRequest"]

#: What a synthetic run's tables file holds (``RunRequest.tables``).
TABLES = ("all", "touched", "none")
#: How many ids a synthetic bag holds (``RunRequest.bag_sizes``).
BAG_SIZES = ("auto", "fixed", "uniform")
#: The fields of a multi-worker run.
WORKER_FIELDS = ("workers", "replicas_to_aggregate", "max_staleness", "init_tokens", "delay")


@dataclass(frozen=True)
class RunRequest:
    """Every input of a run but its configuration (``open_run``'s ``source``).

    Data: ``steps`` synthetic steps, or the recorded steps of ``batches`` (B.npz, the replay
    contract) from the tables and slots of ``init`` (I.npz); ``seed``; ``combiners``
    (``--combiner`` values: ``NAME`` or ``F=NAME``); ``bag_sizes``, ``ids``,
    ``sequence_lengths``, ``learning_rate`` (None: a spec's schedules, else 0.1), ``schedules``
    and their file ``schedules_source``.
    How: ``engine``, ``max_memory`` (bytes or a size; None: 80% of the available memory),
    ``strict_finite``. Where the tables live: ``backend`` and its settings ``shards``,
    ``ray_address``, ``runtime_env`` (parsed), ``ship``.
    Several workers: ``workers``, ``replicas_to_aggregate``, ``max_staleness``,
    ``init_tokens``, ``delay``. A SparseCore spec: ``compare_dropping``,
    ``allow_id_dropping`` (None: the configuration's).
    Outputs (named, never written by the run layer): ``out`` (O.npz of a replay), ``out_dir``,
    ``tables`` (what the tables file holds: all, touched, none), ``plot`` (its file: the run
    keeps what a plot draws), ``save_batches`` (its file: the run hands every step's batch to
    ``on_batch``); ``checkpoint`` (where checkpoints go; ``checkpoint_every`` steps) and
    ``resume`` (continue from it).
    """

    steps: int = 100
    batches: str | None = None
    init: str | None = None
    seed: int = 0
    combiners: tuple[str, ...] = ()
    bag_sizes: str = "auto"
    ids: Any = "zipf:1.1"
    sequence_lengths: Any = "full"
    learning_rate: float | None = None
    schedules: Sequence[Any] = ()
    schedules_source: str | None = None
    engine: str = "numba"
    max_memory: int | str | None = None
    strict_finite: bool = False
    backend: str = "local"
    shards: int | None = None
    ray_address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    ship: bool = True
    workers: int | None = None
    replicas_to_aggregate: int | None = None
    max_staleness: int | None = None
    init_tokens: int | None = None
    delay: str | None = None
    compare_dropping: bool = False
    allow_id_dropping: bool | None = None
    out: str | None = None
    out_dir: str | None = None
    tables: str = "touched"
    plot: str | None = None
    save_batches: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    _records: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:

        object.__setattr__(self, "combiners", tuple(self.combiners))
        # The library's records, made (and their values checked) once.
        records = (
            RunOptions(seed=self.seed, engine=self.engine, max_memory=self.max_memory,
                       strict_finite=self.strict_finite),
            placement(self.backend, shards=self.shards, ray_address=self.ray_address,
                      runtime_env=self.runtime_env, ship=None if self.ship else False),
            SyntheticOptions(learning_rate=self.learning_rate, schedules=self.schedules,
                             schedules_source=self.schedules_source,
                             ids=parse_ids(self.ids),
                             sequence_lengths=parse_sequence_lengths(self.sequence_lengths)),
        )
        object.__setattr__(self, "_records", records)
        self._check()

    def _check(self) -> None:
        """The values no mode can run, refused with ``InputError`` naming the field."""
        self._check_values()
        if (self.resume or self.checkpoint_every is not None) and self.checkpoint is None:
            raise InputError("RunRequest: resume and checkpoint_every need checkpoint (the "
                             "path of the checkpoint file)")
        if self.batches is not None:
            given = [name for name in WORKER_FIELDS if getattr(self, name) is not None]
            if given:
                raise InputError(f"RunRequest: {', '.join(given)} apply to synthetic runs, not "
                                 "to a replay of batches")
            if self.resume or self.checkpoint_every is not None or self.save_batches:
                raise InputError("RunRequest: resume, checkpoint_every and save_batches apply "
                                 "to synthetic runs, not to a replay of batches")
        elif self.init is not None and (self.resume or self.several is not None):
            raise InputError("RunRequest init: a resumed run continues from its checkpoint and "
                             "a multi-worker run starts from its initializers; init (the "
                             "tables and slots to start from) applies to one replay or one "
                             "synthetic run")
        if self.several is not None and (self.resume or self.checkpoint_every is not None
                                         or self.save_batches is not None):
            raise InputError("RunRequest: resume, checkpoint_every and save_batches cannot be "
                             "combined with a multi-worker run")
        if self.save_batches is not None and self.resume:
            raise InputError("RunRequest: save_batches cannot be combined with resume (the "
                             "steps before the checkpoint are not in this process)")

    def _check_values(self) -> None:
        """Each field's own range, as the command's options have it."""
        def wrong(name: str, value: object, expected: str) -> InputError:
            return InputError(f"RunRequest {name}={value!r}: expected {expected}")

        def whole(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        if not whole(self.steps) or self.steps < 1:
            raise wrong("steps", self.steps, "a whole number of steps, at least 1")
        if self.tables not in TABLES:
            raise wrong("tables", self.tables, " or ".join(TABLES))
        if self.bag_sizes not in BAG_SIZES:
            raise wrong("bag_sizes", self.bag_sizes, " or ".join(BAG_SIZES))
        if self.checkpoint_every is not None and (not whole(self.checkpoint_every)
                                                  or self.checkpoint_every < 1):
            raise wrong("checkpoint_every", self.checkpoint_every, "at least 1 step")
        if self.max_staleness is not None and (not whole(self.max_staleness)
                                               or self.max_staleness < 0):
            raise wrong("max_staleness", self.max_staleness, "0 or more")
        if not all(isinstance(name, str) for name in self.combiners):
            bad = next(name for name in self.combiners if not isinstance(name, str))
            raise InputError(f"RunRequest combiners: expected combiner names (sum, mean, "
                             f"sqrtn), found {shown(bad)}")
        for name in ("workers", "replicas_to_aggregate"):  # as --workers/--replicas-to-aggregate
            value = getattr(self, name)
            if value is not None and (not whole(value) or value < 1):
                raise wrong(name, value, "a whole number, at least 1")

    @property
    def options(self) -> Any:
        """The run's ``executor.options.RunOptions``."""
        return self._records[0]

    @property
    def placement(self) -> Any:
        """Where the tables live: the ``executor.options.Placement``."""
        return self._records[1]

    @property
    def data(self) -> Any:
        """What a synthetic run draws: the ``sim.options.SyntheticOptions``."""
        return self._records[2]

    @property
    def several(self) -> dict[str, Any] | None:
        """A multi-worker run's ``WorkerOptions`` values (None: not a multi-worker run)."""
        values = {name: getattr(self, name) for name in WORKER_FIELDS}
        if all(value is None for value in values.values()):
            return None
        return {**values, "workers": values["workers"] or 1,
                "init_tokens": -1 if values["init_tokens"] is None else values["init_tokens"]}

    @property
    def mode(self) -> str:
        """``replay``, ``workers`` or ``synthetic`` (of a legacy configuration)."""
        if self.batches is not None:
            return "replay"
        return "workers" if self.several is not None else "synthetic"
