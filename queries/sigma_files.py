"""Reading a directory of Sigma rules: bounded, regular files inside it, each on its own.

Rules of this file:
- Every `*.yml`/`*.yaml` under the directory is read through `engine.userfiles` (regular
  files only, opened without blocking: a FIFO hung `detect`, a symlink to /dev/zero grew to
  GBs) up to `MAX_RULE_BYTES`; a path that leads outside the directory (a symlink, or a
  path through one) is not read.
- A file or a rule that cannot be read, parsed or converted to SQL is one line naming it in
  the refused list, and the others are kept: one bad rule does not stop a detection run.

Example:
    >>> rs, refused = load_dir(Path("infra/sigma"))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["MAX_RULE_BYTES", "load_dir"]

MAX_RULE_BYTES = 1 << 20  # a Sigma rule file above 1 MiB is refused (rules are ~1 KiB)


def _rule_files(rules_dir: Path, refused: list[str]) -> list[Path]:
    root = rules_dir.resolve()
    out = []
    for p in sorted(rules_dir.rglob("*")):
        if p.suffix not in (".yml", ".yaml"):
            continue
        try:
            real = p.resolve(strict=True)
        except (OSError, RuntimeError) as e:  # a dangling or looping symlink
            refused.append(f"{p}: cannot resolve: {getattr(e, 'strerror', None) or e}")
            continue
        if real != root and root not in real.parents:
            refused.append(f"{p}: leads outside {rules_dir} (to {real}): not read")
            continue
        if not real.is_dir():
            out.append(p)
    return out


def load_dir(rules_dir: Path) -> tuple[Any, list[str]]:
    """(the rule set of every rule that can run, a line for each file or rule that cannot).
    Raises RuleError when the directory holds no rule file at all."""
    from engine.userfiles import read_regular
    from queries.sigma import RuleError
    from queries.sigma_correlation import load_rule_set
    from queries.sigma_correlation_duckdb import correlation_sql
    from queries.sigma_duckdb import rule_sql

    refused: list[str] = []
    files = _rule_files(rules_dir, refused)
    if not files and not refused:
        raise RuleError(f"{rules_dir}: no Sigma rules (*.yml, *.yaml)")
    texts = []
    for f in files:
        try:
            texts.append((read_regular(f, MAX_RULE_BYTES).decode("utf-8"), str(f)))
        except OSError as e:
            refused.append(f"{f}: {e.strerror or e}")
        except UnicodeDecodeError as e:
            refused.append(f"{f}: not UTF-8 (byte {e.start})")
    rs = load_rule_set(texts, errors=refused)
    rules, correlations = [], []
    for r in rs.rules:  # every rule converts to SQL before anything runs
        try:
            rule_sql(r)
            rules.append(r)
        except Exception as e:  # pySigma's own errors and NotImplementedError
            refused.append(_rule_error(r.path, r.title, e))
    for c in rs.correlations:
        try:
            correlation_sql(c, "sigma_events")
            correlations.append(c)
        except Exception as e:
            refused.append(_rule_error(c.path, c.title, e))
    return replace(rs, rules=rules, correlations=correlations), refused


def _rule_error(path: str, title: str, e: BaseException) -> str:
    from queries.sigma import RuleError

    if isinstance(e, RuleError):
        return str(e)
    why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    return f"{path}: {title}: cannot run: {why}"
