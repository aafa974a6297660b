"""Show a replay report: a terminal summary (rich) and a self-contained HTML page.

Rules of this file:
- Input is the report object of `replay.report.build` only: what the terminal and the
  page show is exactly what `--format json` prints.
- The HTML page needs nothing but itself: CSS, JavaScript and SVG charts are inline, the
  report is embedded as JSON, no network request is ever made. Its script fills in the
  numbers and draws the charts (flips over time, per hook, per user) when it loads.

Example:
    >>> html = to_html({"replay_id": "r1", "changes": []})
    >>> html.startswith("<!doctype html>") and "r1" in html
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from replay.diff import CLASSES

__all__ = ["print_summary", "to_html", "unique_labels"]

_MARK = "/*REPORT_JSON*/null"


def to_html(report: Mapping[str, Any], *, max_rows: int = 500) -> str:
    """The report as one HTML page (template ``replay/templates/report.html``)."""
    data = dict(report)
    data["changes"] = list(report.get("changes", []))[:max_rows]
    # labels no two hooks share, for the charts and the changed-events table
    data["hook_labels"] = unique_labels(report.get("by_hook") or {}, 40)
    template = resources.files("replay").joinpath("templates/report.html").read_text("utf-8")
    text = json.dumps(data, sort_keys=True, ensure_ascii=True)
    # Inside <script>, "</script" ends the element and "<!--" starts a comment state:
    # escape <, > and & (only ever inside JSON strings, where \u003c is the same text).
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return template.replace(_MARK, text).replace("{{replay_id}}", str(report.get("replay_id")))


def _matrix(transitions: Mapping[str, int]) -> Table | None:
    pairs = {tuple(k.split("->", 1)): v for k, v in transitions.items()}
    if not pairs:
        return None
    rows = [c for c in CLASSES if any(b == c for b, _ in pairs)]
    cols = [c for c in CLASSES if any(a == c for _, a in pairs)]
    t = Table(title="transitions (baseline → candidate)", box=box.SIMPLE_HEAVY)
    t.add_column("baseline \\ candidate", style="bold")
    for c in cols:
        t.add_column(c, justify="right", style="red" if c in ("deny", "stop") else None)
    for r in rows:
        t.add_row(r, *(str(pairs.get((r, c), "")) if r != c else "·" for c in cols))
    return t


def _short(text: object, n: int) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _hook_text(h: Mapping[str, Any]) -> str:
    text = " ".join(str(h.get("label")).split())
    return text.rsplit("/", 1)[-1] if h.get("type") == "python" else text


def unique_labels(hooks: Mapping[str, Mapping[str, Any]], width: int = 34) -> dict[str, str]:
    """A label of at most `width` characters per hook, never the same for two hooks.

    Two hooks whose texts cut to the same label (the same command behind two `if` rules,
    two long commands alike at the start) are told apart by their `if` rule or matcher,
    else by their id.

    Example:
        >>> unique_labels({"a": {"label": "echo no", "if": "Bash(curl *)"},
        ...                "b": {"label": "echo no", "if": "Bash(wget *)"}})
        {'a': 'echo no [Bash(curl *)]', 'b': 'echo no [Bash(wget *)]'}
    """
    short = {hid: _short(_hook_text(h), width) for hid, h in hooks.items()}
    seen: dict[str, list[str]] = {}
    for hid, label in short.items():
        seen.setdefault(label, []).append(hid)
    out = dict(short)
    for group in (g for g in seen.values() if len(g) > 1):
        for hid in group:
            h = hooks[hid]
            ctx = str(h.get("if") or h.get("matcher") or hid[:6])
            ctx = _short(ctx, max(6, width // 2))
            out[hid] = f"{_short(_hook_text(h), max(4, width - len(ctx) - 3))} [{ctx}]"
        labels = [out[hid] for hid in group]
        if len(set(labels)) < len(labels):  # the context did not tell them apart
            for hid in group:
                out[hid] = f"{_short(_hook_text(hooks[hid]), width - 9)} [{hid[:6]}]"
    return out


def _hooks(by_hook: Mapping[str, Mapping[str, Any]], limit: int = 15) -> Table | None:
    busy = sorted(
        by_hook.items(),
        key=lambda kv: (-kv[1]["changed"], -kv[1]["ran"], str(kv[1].get("label"))),
    )[:limit]
    if not busy:
        return None
    labels = unique_labels(dict(busy))
    cols = [("ran", "ran"), ("reused", "reused"), ("executed", "exec")]
    cols += [(k, n) for k, n in (("not_evaluated", "n/e"), ("errors", "err"))
             if any(h[k] for _, h in busy)]  # fmt: skip
    cols.append(("changed", "chg"))
    sides = any(h.get("side") in ("removed", "added") for _, h in busy)
    t = Table(title="hooks", box=box.SIMPLE_HEAVY, pad_edge=False)
    t.add_column("hook", no_wrap=True, overflow="ellipsis", max_width=36)
    t.add_column("type", no_wrap=True, max_width=7)
    if sides:
        t.add_column("settings", no_wrap=True)
    for _, name in cols:
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("transitions", overflow="fold")
    t.caption = "exec: executed · n/e: not evaluated · err: errors · chg: changed decisions"
    if sides:
        t.caption += " · removed: only in the baseline · added: only in the candidate"
    for hid, h in busy:
        trans = ", ".join(f"{k} {v}" for k, v in h.get("transitions", {}).items())
        side = [str(h.get("side") if h.get("side") in ("removed", "added") else "")]
        t.add_row(
            Text(labels[hid]),
            str(h.get("type")),
            *(side if sides else []),
            *(str(h[k]) for k, _ in cols),
            trans,
        )
    return t


def _commands(top: list[Mapping[str, Any]], limit: int = 10) -> Table | None:
    if not top:
        return None
    t = Table(title="top changed commands", box=box.SIMPLE_HEAVY)
    t.add_column("what the agent did", overflow="fold")
    t.add_column("changed", justify="right")
    t.add_column("transitions")
    for c in top[:limit]:
        trans = ", ".join(f"{k} {v}" for k, v in c["transitions"].items())
        t.add_row(_short(c["label"], 70), str(c["changed"]), trans)
    return t


def _users(by_user: Mapping[str, Mapping[str, int]], limit: int = 10) -> Table | None:
    rows = [(u, c) for u, c in by_user.items() if c.get("changed")][:limit]
    if not rows:
        return None
    t = Table(title="users", box=box.SIMPLE_HEAVY)
    for name in ("user", "events", "changed", "counterfactual"):
        t.add_column(name, justify="left" if name == "user" else "right")
    for u, c in rows:
        t.add_row(u, str(c["events"]), str(c["changed"]), str(c["counterfactual_changed"]))
    return t


def print_summary(report: Mapping[str, Any], console: Console | None = None) -> None:
    """Print the terminal summary: counts, transition matrix, commands, hooks, users."""
    out = console or Console()
    changed = report["changed"]
    style = "bold red" if changed else "bold green"
    out.print(
        f"[bold]replay[/bold] {report['replay_id']}  "
        f"[dim]{report['digest']}[/dim]\n"
        f"{report['events']} events evaluated ({report['selected']} selected, "
        f"{report['not_evaluated']} not evaluated) · [{style}]{changed} changed[/{style}] · "
        f"{report['counterfactual']} counterfactual "
        f"({report['counterfactual_changed']} of them changed) · "
        f"sessions {report['sessions']['changed']}/{report['sessions']['total']} changed"
    )
    hooks = report.get("hooks", {})
    out.print(
        f"[dim]hooks: {hooks.get('reused', 0)} answers reused from the log, "
        f"{hooks.get('executed', 0)} executed, {hooks.get('not_evaluated', 0)} not evaluated"
        + (f"; sandbox network: {report['sandbox']}" if report.get("sandbox") else "")
        + "[/dim]"
    )
    kinds = report.get("kinds", {})
    if kinds:
        out.print("kinds: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
    for table in (
        _matrix(report.get("transitions", {})),
        _commands(report.get("top_commands", [])),
        _hooks(report.get("by_hook", {})),
        _users(report.get("by_user", {})),
    ):
        if table is not None:
            out.print(table)
    stored = report.get("stored") or {}
    if stored.get("outcomes"):
        out.print(
            f"[dim]stored {stored['outcomes']} outcomes on log chain {stored['worker']!r}"
            f" (view: replays WHERE replay_id = '{report['replay_id']}')"
            + (f"; report {stored['summary']}" if stored.get("summary") else "")
            + "[/dim]"
        )
    out.print(f"[dim]{report['seconds']} s, {report.get('events_per_second')} events/s[/dim]")
