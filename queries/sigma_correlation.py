"""Sigma correlation rules as pySigma parses them, and their meaning.

Rules of this file:
- Pure: rule files (YAML text) and flat events in, correlation hits out. The DuckDB form is
  `queries.sigma_correlation_duckdb`; the differential test holds it against a plain
  Python reading of the rules below (`tests/support/sigma_reference.py`).
- Types: ``event_count``, ``value_count``, ``temporal``, ``temporal_ordered``; conditions
  ``gt``, ``gte``, ``lt``, ``lte``, ``eq``, ``neq`` (``temporal`` also takes pySigma's
  expression form, e.g. ``a and not b``). ``value_sum`` and the other metric types, and
  correlations of correlations, are refused with a one-line error naming the file.
- The window. Each event a referenced rule matches (with every ``group-by`` field present)
  is an *anchor*; its window is the events of its group whose time lies in
  ``[anchor time - timespan, anchor time]``, both ends included (an event exactly
  `timespan` before counts). The condition is tested on every anchor's window and each one
  where it holds is a hit, named by (correlation, anchor event, group). A sliding window,
  not fixed buckets: a burst across a bucket edge is still found.
- The count: ``event_count`` the distinct events of the window; ``value_count`` the distinct
  values of the condition's ``field`` (an event without it adds none); ``temporal`` how many
  of the referenced rules matched in the window; ``temporal_ordered`` the length of the
  longest prefix of the rule list matched at strictly increasing times (so the default
  condition, ``gte`` the number of rules, means all of them, in order).
- ``group-by``: events are grouped by the exact text of those fields (``aliases`` name the
  field per rule); an event lacking one of them (or where it is empty) takes no part. A group-by or value field
  outside the ``claude_code`` mapping is an error, since it would never group anything.
- ``generate: false`` (Sigma's default) keeps the referenced rules' own matches out of the
  output, as pySigma does; ``generate: true`` keeps them.

Example:
    >>> rs = load_rule_set([(DENIALS, "denials.yml")])
    >>> [c.title for c in rs.correlations], [r.title for r in rs.rules]
    (['Repeated denials in a session'], [])
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sigma.collection import SigmaCollection
from sigma.correlations import (
    CorrelationConditionAND,
    CorrelationConditionNOT,
    CorrelationConditionOR,
    SigmaCorrelationCondition,
    SigmaCorrelationRule,
    SigmaCorrelationType,
    SigmaExtendedCorrelationCondition,
    SigmaRuleReference,
)
from sigma.exceptions import SigmaError
from sigma.rule import SigmaRule

from queries.sigma import FIELDS, Rule, RuleError, parse_file, rule_of

__all__ = [
    "OPS",
    "Correlation",
    "RuleSet",
    "load_rule_set",
]

DENIALS = """\
title: denied command
name: denied_command
logsource: {product: claude_code, category: process_creation}
detection:
  s: {Decision: deny}
  condition: s
---
title: Repeated denials in a session
correlation:
  type: event_count
  rules: denied_command
  group-by: SessionId
  timespan: 10m
  condition: {gte: 3}
"""

KINDS = ("event_count", "value_count", "temporal", "temporal_ordered")
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "eq": operator.eq,
    "neq": operator.ne,
}


@dataclass(frozen=True)
class Correlation:
    """One correlation rule, its references resolved to our rules."""

    title: str
    id: str
    level: str
    path: str
    kind: str  # one of KINDS
    rules: tuple[Rule, ...]  # the referenced rules, in the rule's order
    group_by: tuple[str, ...]  # the names the rule groups by (aliases included)
    fields: tuple[tuple[str, ...], ...]  # per referenced rule: the event field of each name
    value_fields: tuple[str | None, ...]  # per referenced rule: value_count's field
    span_us: int
    timespan: str
    op: str  # a key of OPS
    count: int | float
    expression: Any = None  # temporal only: pySigma's tree, its leaves rule indexes (int)


@dataclass(frozen=True)
class RuleSet:
    """The rules of a directory: the plain rules whose matches are output, and correlations."""

    rules: list[Rule]
    correlations: list[Correlation]


def _known(field: str) -> bool:
    if field.startswith("tool_input."):
        return len(field) > len("tool_input.")
    return field in FIELDS


def _names(r: SigmaRule) -> set[str]:
    return {n for n in (r.name, str(r.id) if r.id else None) if n}


def _expression(node: Any, index: dict[str, int]) -> Any:
    if isinstance(node, SigmaRuleReference):
        return index[node.reference]
    for cls in (CorrelationConditionAND, CorrelationConditionOR, CorrelationConditionNOT):
        if isinstance(node, cls):
            return cls([_expression(a, index) for a in node.args])
    raise RuleError(f"unsupported correlation condition element {type(node).__name__}")


def _correlation(c: SigmaCorrelationRule, path: str, ours: dict[int, Rule | None]) -> Any:
    """Our form of `c` (references resolved); None when it correlates another product."""
    where = f"{path}: {c.title}"
    kind = c.type.name.lower() if isinstance(c.type, SigmaCorrelationType) else str(c.type)
    if kind not in KINDS:
        raise RuleError(f"{where}: {kind} correlations are not supported ({', '.join(KINDS)})")
    refs = c.referenced_rules
    if any(isinstance(ref.rule, SigmaCorrelationRule) for ref in refs):
        raise RuleError(f"{where}: a correlation of correlation rules is not supported")
    rules = [ours.get(id(ref.rule)) for ref in refs]
    if any(r is None for r in rules):
        return None
    group_by = tuple(c.group_by or ())
    aliases = {a.alias: {m.reference: f for m, f in a.mapping.items()} for a in c.aliases}

    def field_for(name: str, ref: SigmaRuleReference) -> str:
        mapping = aliases.get(name)
        if mapping is not None:
            names = _names(ref.rule) | {ref.reference}  # type: ignore[arg-type]
            hit = [f for n, f in mapping.items() if n in names]
            if not hit:
                raise RuleError(f"{where}: alias {name!r} names no field for {ref.reference!r}")
            name = hit[0]
        if not _known(name):
            raise RuleError(
                f"{where}: field {name!r} is not in the log source mapping "
                "(see queries/sigma.py FIELDS)"
            )
        return name

    fields = tuple(tuple(field_for(g, ref) for g in group_by) for ref in refs)
    cond = c.condition
    expression = None
    if isinstance(cond, SigmaExtendedCorrelationCondition):
        if kind != "temporal":
            raise RuleError(f"{where}: an expression condition is only for temporal")
        index = {ref.reference: k for k, ref in enumerate(refs)}
        expression = _expression(cond.parsed, index)
        op, count = "gte", 1.0
        value_fields: tuple[str | None, ...] = tuple(None for _ in refs)
    elif isinstance(cond, SigmaCorrelationCondition):
        op, count = cond.op.name.lower(), cond.count
        value_fields = tuple(None for _ in refs)
        if kind == "value_count":
            if not isinstance(cond.fieldref, str):
                raise RuleError(f"{where}: value_count: the condition's field must be one name")
            value_fields = tuple(field_for(cond.fieldref, ref) for ref in refs)
    else:
        raise RuleError(f"{where}: no correlation condition")
    if op not in OPS:
        raise RuleError(f"{where}: condition {op!r}: expected one of {', '.join(OPS)}")
    level = c.level.name.lower() if c.level else "medium"
    return Correlation(
        title=c.title,
        id=str(c.id or ""),
        level=level,
        path=path,
        kind=kind,
        rules=tuple(r for r in rules if r is not None),
        group_by=group_by,
        fields=fields,
        value_fields=value_fields,
        span_us=int(c.timespan.seconds) * 1_000_000,
        timespan=c.timespan.spec,
        op=op,
        count=count,
        expression=expression,
    )


def load_rule_set(files: Iterable[tuple[str, str]], *, errors: list[str] | None = None) -> RuleSet:
    """The rules and correlations of several files ((text, path) pairs); a correlation may
    name (by ``name`` or ``id``) a rule of any of them. Raises RuleError naming the file;
    with `errors`, a file, rule or correlation that cannot be read is one line appended
    there instead and the others are kept.

    Example:
        >>> rs = load_rule_set([(DENIALS, "d.yml")])
        >>> c = rs.correlations[0]
        >>> c.kind, c.group_by, c.span_us, c.op, c.count
        ('event_count', ('SessionId',), 600000000, 'gte', 3)
    """

    def refuse(e: RuleError) -> None:
        if errors is None:
            raise e
        errors.append(str(e))

    paths: dict[int, str] = {}
    named: dict[str, list[str]] = {}  # name or id -> the files that define it
    colls = []
    for text, path in files:
        try:
            coll = parse_file(text, path, resolve=False)
        except RuleError as e:
            refuse(e)
            continue
        colls.append(coll)
        for r in coll.rules:
            paths[id(r)] = path
            for n in (r.name, str(r.id) if r.id else None):
                if n:
                    named.setdefault(n, []).append(path)
    merged = SigmaCollection.merge(colls, resolve_references=False)
    ours: dict[int, Rule | None] = {}
    for r in merged.rules:
        if isinstance(r, SigmaRule):
            try:
                ours[id(r)] = rule_of(r, paths[id(r)])
            except RuleError as e:
                refuse(e)
                ours[id(r)] = None
    correlations = []
    for r in merged.rules:
        if not isinstance(r, SigmaCorrelationRule):
            continue
        path = paths[id(r)]
        try:
            r.resolve_rule_references(merged)
            for ref in r.referenced_rules:
                if len(named.get(ref.reference, ())) > 1:
                    raise RuleError(
                        f"{path}: {r.title}: rule {ref.reference!r} is defined more than once "
                        f"({', '.join(named[ref.reference])})"
                    )
            c = _correlation(r, path, ours)
        except RuleError as e:
            refuse(e)
            continue
        except SigmaError as e:
            refuse(RuleError(f"{path}: {r.title}: {e}"))
            continue
        except (AttributeError, TypeError, ValueError, KeyError, RecursionError) as e:
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            refuse(RuleError(f"{path}: {r.title}: not a Sigma correlation: {why}"))
            continue
        if c is not None:
            correlations.append(c)
    rules = []
    for r in merged.rules:
        if isinstance(r, SigmaRule):
            rule = ours[id(r)]
            if rule is not None and r._output:
                rules.append(rule)
            r._output = True  # pySigma's backends convert nothing of a rule without output
    return RuleSet(rules, correlations)
