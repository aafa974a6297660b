"""Sigma rules over hookaudit's history: read by pySigma, in the form the DuckDB backend runs.

Rules of this file:
- Pure: rules (YAML text) in, `Rule`s out. No file or log access here. The rules run as SQL
  (`queries.sigma_duckdb`); the tests hold that SQL against a plain Python reading of the
  semantics below (`tests/support/sigma_reference.py`).
- The log source mapping (``product: coding_agent`` or one agent) turns each outcome into the flat event
  a Sigma rule sees; `FIELDS` documents it. Categories: ``process_creation`` (Bash),
  ``file_event`` (Write, Edit, MultiEdit, NotebookEdit), ``file_access`` (Read), ``proxy``
  or ``web`` (WebFetch), ``mcp`` (``mcp__SERVER__TOOL``); a rule with a category sees the
  PreToolUse event of those tools only (one per tool call), one without sees every event.
- Sigma semantics: string values match case-insensitively, ``*`` and ``?`` are wildcards
  (pySigma has already applied modifiers and escapes), ``re`` is case-sensitive unless its
  ``i`` flag is set, a field the event lacks matches nothing (so ``not`` of it is true), and
  ``null`` matches a missing or empty field. Keywords (no field) match any field's value.
- ``cased``: case-sensitive; ``exists``: the field is present (empty counts); ``gt``/``gte``/
  ``lt``/``lte``: a field whose text is a `NUMBER`, else false; ``fieldref`` (and ``|startswith``
  etc.): two fields' values, case-insensitively, false when either is missing.

Example:
    >>> [(r.title, r.tools) for r in load_rules(CURL_SH, "curl.yml")]
    [('Pipe from curl to a shell', ('Bash',))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from sigma.collection import SigmaCollection
from sigma.conditions import (
    ConditionOR,
)
from sigma.exceptions import SigmaError
from sigma.policy import SigmaPolicy
from sigma.policy.regex_engine import RE2RegexEngine
from sigma.rule import SigmaRule

from queries.sigma_logsource import CATEGORIES, FIELDS, PRODUCTS

__all__ = [
    "CATEGORIES",
    "FIELDS",
    "NUMBER",
    "Rule",
    "RuleError",
    "load_rules",
    "parse_file",
    "rule_of",
]


CURL_SH = """\
title: Pipe from curl to a shell
id: 7b1f0c52-3c5e-4d7e-9a51-8f0c1d2e3a41
status: test
level: high
logsource: {product: claude_code, category: process_creation}
detection:
  fetch: {CommandLine|contains: ['curl ', 'wget ']}
  shell: {CommandLine|re: '\\|\\s*(ba|z|da)?sh\\b'}
  condition: fetch and shell
"""


class RuleError(ValueError):
    """A rule file that pySigma cannot read, or a rule for another product."""


@dataclass(frozen=True)
class Rule:
    title: str
    id: str
    level: str
    path: str
    tools: tuple[str, ...] | None  # None: every event
    condition: Any  # pySigma's parsed condition tree
    sigma: SigmaRule | None = None  # the rule as pySigma read it (for the DuckDB backend)
    agents: tuple[str, ...] | None = None  # the agents its product names; None: every agent


class _QuietRE2(RE2RegexEngine):
    """pySigma's RE2 check of a rule's regexes without RE2's own log line on stderr, and
    with the reason as text (the binding gives bytes)."""

    def compile(self, pattern: str, flags: int = 0) -> Any:
        import re2  # type: ignore[import-untyped]

        inline = "".join(c for f, c in ((re.I, "i"), (re.M, "m"), (re.S, "s")) if flags & f)
        opts = re2.Options()
        opts.log_errors = False
        try:
            return re2.compile(f"(?{inline}){pattern}" if inline else pattern, options=opts)
        except re2.error as e:
            why = e.args[0] if e.args else ""
            raise re2.error(
                why.decode(errors="replace") if isinstance(why, bytes) else why
            ) from None


_POLICY = SigmaPolicy(regex_engine=_QuietRE2())


def parse_file(text: str, path: str, *, resolve: bool = True) -> SigmaCollection:
    """pySigma's collection of one YAML file; `resolve=False` leaves correlation references
    for a collection of several files. Raises RuleError naming the file."""
    try:
        return SigmaCollection.from_yaml(text, resolve_references=resolve, policy=_POLICY)
    except SigmaError as e:
        raise RuleError(f"{path}: {e}") from e
    except (yaml.YAMLError, AttributeError, TypeError, ValueError, KeyError, RecursionError) as e:
        raise RuleError(f"{path}: not a Sigma rule: {_why(e)}") from e


def _why(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def rule_of(r: SigmaRule, path: str) -> Rule | None:
    """Our form of pySigma's rule `r` read from `path`; None for another product's rule."""
    try:
        ls = r.logsource
        if ls.product is not None and ls.product not in PRODUCTS:
            return None  # another product's rule: not ours to match
        agents = PRODUCTS[ls.product] if ls.product is not None else None
        tools = None
        if ls.category is not None:
            if ls.category not in CATEGORIES:
                raise RuleError(
                    f"{path}: {r.title}: logsource category {ls.category!r}: expected one "
                    f"of {', '.join(CATEGORIES)} (or none)"
                )
            tools = CATEGORIES[ls.category]
        conds = [c.parse() for c in r.detection.parsed_condition]
        cond = conds[0] if len(conds) == 1 else ConditionOR(conds)
        level = r.level.name.lower() if r.level else "medium"
        return Rule(r.title, str(r.id or ""), level, path, tools, cond, r, agents)
    except RuleError:
        raise
    except SigmaError as e:
        raise RuleError(f"{path}: {e}") from e
    except (AttributeError, TypeError, ValueError, KeyError, RecursionError) as e:
        # pySigma lets a malformed document through as a Python error of its own
        raise RuleError(f"{path}: not a Sigma rule: {_why(e)}") from e


def load_rules(text: str, path: str) -> list[Rule]:
    """The (plain) rules of one YAML file (one or several documents); its correlation rules
    are left to `queries.sigma_correlation.load_rule_set`. Raises RuleError naming it."""
    coll = parse_file(text, path, resolve=False)
    out = []
    for r in coll.rules:
        if isinstance(r, SigmaRule):
            rule = rule_of(r, path)
            if rule is not None:
                out.append(rule)
    return out


#: The text a comparison modifier (gt, gte, lt, lte) reads as a number; the DuckDB backend
#: uses the same pattern, so both agree on what "12", " 12", "1e3" or "0x10" are.
NUMBER = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?"
