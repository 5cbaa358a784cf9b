"""The rule registry: what a rule is, what it reports, and what it sees.

A rule is a plain function ``func(ctx: Context) -> Iterable[Diagnostic]`` registered with the
:func:`rule` decorator under a stable id (``TAG002``), a default severity and a one-line summary.
Its docstring is the long explanation that ``tpuemb explain ID`` prints, so write it for a user,
in the sections every built-in rule has (as ruff documents its rules): ``## What it does``,
``## Why is this bad?`` (where TensorFlow fails), ``## Example``, ``## Use instead`` (the fix),
then the catalogue section it enforces (``Spec: validation-rules.md section 2.1``).

A rule reads the configuration (``ctx.config``) and the quantities derived from it once per
validation (``ctx.derived``, see :mod:`tpuemb_cfg.model.derived`), and yields one diagnostic per
finding through :meth:`Context.diag`, which fills in the rule's id and severity. Rules never raise
on odd input: every other defect of the configuration may be present at the same time (a
``table_id`` out of range, a missing ``optimization_parameters``, an undeclared enum number). The
validator still guards each rule, turning an unexpected exception into an internal-error diagnostic
so that one broken rule never hides the findings of the others.

Registering your own rule::

    from tpuemb_cfg.rules import rule

    @rule("X001", "warning", "table names must be lower case")
    def lower_case_names(ctx):
        '''Table names are used as checkpoint keys; ...'''
        for i, table, path in ctx.tables():
            if table.name != table.name.lower():
                yield ctx.diag(f"{path}.name", f"{ctx.table_label(i)}: name is not lower case")

The function is registered on import; ``tpuemb_cfg.validate`` and ``tpuemb validate`` then run it
like a built-in rule (selection, suppression and output formats included).

A rule registered with ``target="sparsecore"`` reads a SparseCore configuration instead
(:class:`SparseCoreContext`: the API-neutral ``SparseCoreConfig`` and its ``Stacking``); the
validator runs each rule only on the kind of configuration it targets, with the same selection,
suppression and output formats. ``tpuemb plan``'s findings are rules too (``target="plan"``,
:mod:`tpuemb_cfg.rules.plan`): they read one fact the planner measured (:class:`PlanContext`),
and ``tpuemb explain``, ``tpuemb rules`` and the SARIF rule entries read them from the same
registry (:func:`all_rules`).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tpuemb_cfg.model import SEVERITY_RANK, Diagnostic, Severity
from tpuemb_cfg.model.derived import derive
from tpuemb_cfg.sparsecore.feed import stack

if TYPE_CHECKING:
    from tpuemb_cfg.model.derived import Derived
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stacking

    TableDescriptor = TPUEmbeddingConfiguration.TableDescriptor

_ID_RE = re.compile(r"^[A-Z][A-Z_]*[0-9]{3}$")

#: What a rule reads: a ``TPUEmbeddingConfiguration`` (:class:`Context`), a
#: SparseCore configuration (:class:`SparseCoreContext`), one fact ``tpuemb plan`` measured
#: (:class:`PlanContext`, :mod:`tpuemb_cfg.rules.plan`), or one difference ``tpuemb diff``
#: found between two configurations (:class:`DiffContext`, :mod:`tpuemb_cfg.rules.diff`).
Target = Literal["configuration", "sparsecore", "plan", "diff"]
TARGETS: tuple[Target, ...] = ("configuration", "sparsecore", "plan", "diff")


if TYPE_CHECKING:
    RuleFunc = Callable[[Any], Iterable[Diagnostic]]  # a Context or a SparseCoreContext
else:
    RuleFunc = Callable


@dataclass(frozen=True)
class Rule:
    """A registered rule. ``explanation`` is the function's docstring (``tpuemb explain``)."""

    id: str
    severity: Severity
    summary: str
    explanation: str
    on_request: bool
    func: RuleFunc = field(repr=False, compare=False)
    target: Target = "configuration"

    @property
    def family(self) -> str:
        """The id without its number (``TAG`` for ``TAG002``)."""
        return self.id.rstrip("0123456789")


#: Every registered rule by id (built-in families register on import of :mod:`tpuemb_cfg.rules`).
RULES: dict[str, Rule] = {}


def all_rules(target: Target | None = None) -> list[Rule]:
    """Every registered rule (validate's, SparseCore's and ``tpuemb plan``'s), in id order;
    only those of ``target`` when given. What ``tpuemb rules``, ``tpuemb explain`` and the
    documentation read."""
    return [RULES[rule_id] for rule_id in sorted(RULES)
            if target is None or RULES[rule_id].target == target]

_F = TypeVar("_F", bound=Callable[..., Iterable[Diagnostic]])


def rule(
    id: str, severity: Severity, summary: str, *, on_request: bool = False,
    target: Target = "configuration",
) -> Callable[[_F], _F]:
    """Register the decorated function as rule ``id``.

    ``target``: what the rule reads (``"sparsecore"``: a :class:`SparseCoreContext`;
    ``"plan"``: a :class:`PlanContext`; ``"diff"``: a :class:`DiffContext`).

    ``on_request`` rules (derived facts such as the tag table) run only when selected explicitly or
    when derived data is asked for (``--show-derived``), so that a correct configuration produces
    no output. Registering an id twice raises ``ValueError`` (ids are stable and unique).
    """
    if not _ID_RE.match(id):
        raise ValueError(
            f"rule id {id!r} must be upper-case letters followed by three digits, e.g. 'TAG002'"
        )
    if target not in TARGETS:
        raise ValueError(f"rule {id}: target must be one of {', '.join(TARGETS)}, not {target!r}")
    if severity not in SEVERITY_RANK:
        raise ValueError(
            f"rule {id}: severity must be one of error, warning, info, not {severity!r}"
        )

    def register(func: _F) -> _F:
        if id in RULES:
            raise ValueError(f"rule {id} is already registered (by {RULES[id].func.__module__})")
        RULES[id] = Rule(
            id=id,
            severity=severity,
            summary=summary,
            explanation=inspect.cleandoc(func.__doc__ or summary),
            on_request=on_request,
            func=func,
            target=target,
        )
        return func

    return register


class _Reporter:
    """What every context has: the project options, the running rule and :meth:`diag`."""

    options: Mapping[str, Any]
    current_rule: Rule | None

    def diag(
        self,
        field_path: str,
        message: str,
        *,
        hint: str | None = None,
        severity: Severity | None = None,
    ) -> Diagnostic:
        """A diagnostic of the running rule at ``field_path`` (severity defaults to the rule's)."""
        current = self.current_rule
        rule_id = current.id if current is not None else "UNKNOWN000"
        sev: Severity = severity or (current.severity if current is not None else "error")
        # A rule gives most of its findings the same hint: one copy of it, not one per finding
        # (a million findings would otherwise hold a million equal strings).
        return Diagnostic(
            rule=rule_id, severity=sev, message=message, field_path=field_path,
            hint=sys.intern(hint) if hint is not None else None,
        )


class Context(_Reporter):
    """What a rule sees: the configuration, its derived quantities, and helpers.

    ``options`` carries project settings a rule may read (``memory_budget_bytes``: an int per-host
    budget or ``None``; see :mod:`tpuemb_cfg.validation.settings`). One context is shared by all
    rules of one validation; the validator sets ``current_rule`` before running each rule.
    """

    def __init__(
        self,
        config: TPUEmbeddingConfiguration,
        derived: Derived | None = None,
        *,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if derived is None:
            derived = derive(config)
        self.config = config
        self.derived = derived
        self.options = dict(options or {})
        self.current_rule = None
        # the repeated field itself: a table's message object lives while a rule reads it,
        # not for the whole validation
        self._tables = config.table_descriptor

    def tables(self) -> Iterator[tuple[int, TableDescriptor, str]]:
        """``(index, table, "table_descriptor[i]")`` for every table, in order."""
        for i, table in enumerate(self._tables):
            yield i, table, f"table_descriptor[{i}]"

    def table(self, i: int) -> TableDescriptor | None:
        """Table ``i``, or ``None`` when ``i`` is out of range."""
        if 0 <= i < len(self._tables):
            return self._tables[i]
        return None

    def table_label(self, i: int) -> str:
        """``table_descriptor[2] 'ads'`` (no name when it is empty or ``i`` is out of range)."""
        table = self.table(i)
        if table is None or not table.name:
            return f"table_descriptor[{i}]"
        return f"table_descriptor[{i}] {table.name!r}"


class SparseCoreContext(_Reporter):
    """What a ``target="sparsecore"`` rule sees: the configuration, its stacking and options.

    ``stacking`` is what ``tpuemb_cfg.sparsecore.feed.stack(config)`` returns, computed on first
    use (or given); ``None`` when the configuration cannot be stacked (``stacking_error`` then
    says why), so a rule that needs it yields nothing instead of raising.
    """

    def __init__(
        self,
        config: SparseCoreConfig,
        stacking: Stacking | None = None,
        *,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.options = dict(options or {})
        self.current_rule = None
        self._stacking = stacking
        self.stacking_error: str | None = None

    @property
    def stacking(self) -> Stacking | None:
        """The stacks both references would build from :attr:`config` (computed once)."""
        if self._stacking is None and self.stacking_error is None:
            try:
                self._stacking = stack(self.config)
            except (ValueError, ArithmeticError, KeyError) as exc:
                self.stacking_error = f"{type(exc).__name__}: {exc}"
        return self._stacking


class PlanContext(_Reporter):
    """What a ``target="plan"`` rule sees: one ``fact`` the planner measured (a record of
    :mod:`tpuemb_cfg.rules.plan`); the rule yields a finding when the fact is one."""

    def __init__(self, fact: object, *, options: Mapping[str, Any] | None = None) -> None:
        self.fact = fact
        self.options = dict(options or {})
        self.current_rule = None


class DiffContext(PlanContext):
    """What a ``target="diff"`` rule sees: one ``fact`` ``tpuemb diff`` found between two
    configurations (a record of :mod:`tpuemb_cfg.rules.diff` or
    :mod:`tpuemb_cfg.rules.checkpoint`); the rule yields a finding when the fact is one."""


def run_on_facts(rules: Iterable[Rule], facts: Iterable[object],
                 context: Callable[..., PlanContext] = PlanContext, *,
                 options: Mapping[str, Any] | None = None) -> list[Diagnostic]:
    """Every rule of ``rules`` on each fact in turn, each fact in a ``context(fact,
    options=...)``: the findings in the order of the facts (``tpuemb plan``'s and ``tpuemb
    diff``'s rules, which read one measured or compared fact at a time)."""
    chosen = list(rules)
    out: list[Diagnostic] = []
    for fact in facts:
        ctx = context(fact, options=options)
        for found in chosen:
            ctx.current_rule = found
            out.extend(found.func(ctx))
    return out
