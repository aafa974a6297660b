"""The replay report: one JSON object with a stable schema, and the digest of its inputs.

Schema ``hookaudit.replay/1`` (`hookaudit replay --format json`; also kept in
``<data-dir>/replays/<replay_id>.json``). Keys are only ever added:

    schema                    "hookaudit.replay/1"
    replay_id                 UUIDv7 of this run; stored outcomes carry it
    created                   ISO 8601 UTC time the report was made
    digest                    "sha256:<hex>" over `inputs`: equal inputs give equal digests
    inputs                    selection, events (count, first, last), chains (per worker: seq
                              and hash of the last selected record, which commits to every
                              record before it), read (segments read and the sha256 over
                              each one's name and the sha256 of every byte of it read:
                              an edited record changes it, re-hashed or not),
                              candidate/baseline settings ids and python
                              hook code hashes, engine_version, policy (reuse, exec, llm,
                              posture)
    candidate                 {settings_id, files}
    baseline                  {kind: "recorded"} or {kind: "settings", settings_id, files}
    policy                    {reuse, exec, llm, posture, store}
    selected                  events selected from the log
    events                    events evaluated (selected - not_evaluated)
    not_evaluated             events with a hook the policy did not let run
    changed                   evaluated events whose decision differs, counterfactual excluded
    unchanged                 evaluated events that are neither changed nor counterfactual
    counterfactual            events after the first behavioural change of their session
    counterfactual_changed    of those, the ones whose decision differs
    sessions                  {total, changed}
    transitions               {"<baseline>-><candidate>": count} for `changed` events;
                              classes: deny, stop, ask, defer, allow, none (see replay.diff)
    counterfactual_transitions  the same for counterfactual events
    kinds                     {kind: count} for `changed` events (decision, reason,
                              updated_input, context_added, context_removed, specific,
                              system_message, errors_added, errors_removed)
    by_hook                   {hook_id: {label, type, source, matcher, if, ran, reused,
                              executed, not_evaluated, errors, changed,
                              counterfactual_changed, transitions, side}}; hook_id "engine"
                              is a change no hook's verdict explains (posture, engine
                              version); side: "removed" (not in the candidate settings),
                              "added" (not in the baseline settings), "kept", or
                              "candidate" (in the candidate; baseline recorded)
    by_user                   {user: {events, changed, counterfactual_changed}}
    timeline                  {bucket: "hour"|"day", points: [{start, events, changed,
                              transitions}]}
    top_commands              [{label, changed, transitions}] (20 most changed)
    hooks                     {reused, executed, not_evaluated}: hook answers by origin
    llm                       {hook_id: {asked, samples, unstable, minority, flip_rate}}
                              with --llm samples=N, else {}
    sandbox                   network isolation used by --exec sandbox (null: none needed)
    spawned                   hooks started in the sandbox helper
    stored                    {worker, outcomes, summary}: the log chain the replayed outcomes
                              went to (view `replays`), how many, and this report's file
    changes                   changed and counterfactual events, by time: {event_id, ts,
                              session_id, user, host, event, tool_name, label, baseline,
                              candidate, transition, kinds, hooks, counterfactual,
                              baseline_reason, candidate_reason} (at most `max_rows`)
    changes_truncated         whether `changes` was cut at `max_rows`
    seconds, events_per_second
    fail_on                   {rules, matched}: added by `hookaudit replay` (its --fail-on)

Example:
    >>> fail_on({"transitions": {"none->deny": 2}, "changed": 2}, ["new-allow", "new-deny"])
    ['new-deny']
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.records import ENGINE_VERSION
from engine.settings import PythonHook
from engine.sources import Effective
from replay.diff import ENGINE_HOOK
from replay.tally import HOUR_US, Row

if TYPE_CHECKING:
    from replay.request import JobResult, Request

__all__ = ["FAIL_RULES", "SCHEMA", "build", "digest", "fail_on"]

SCHEMA = "hookaudit.replay/1"
FAIL_RULES = ("new-deny", "new-allow", "any")
_DENYING = {"deny", "stop"}
_PASSING = {"allow", "none"}


def _iso(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat().replace("+00:00", "Z")


def code_hashes(eff: Effective | None) -> dict[str, str]:
    """sha256 of each python hook's source file: its code is not in the settings_id.

    >>> code_hashes(None)
    {}
    """
    out: dict[str, str] = {}
    if eff is None:
        return out
    for entries in eff.entries.values():
        for e in entries:
            if not isinstance(e.hook, PythonHook):
                continue
            module = e.hook.callable.rpartition(":")[0]
            path: str | None = module if module.endswith(".py") else None
            if path is None:
                try:
                    spec = importlib.util.find_spec(module)
                except (ImportError, ValueError):
                    spec = None
                path = spec.origin if spec is not None else None
            try:
                out[module] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "?"
            except OSError:
                out[module] = "?"
    return dict(sorted(out.items()))


def digest(inputs: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of a report's inputs.

    >>> digest({"a": 1}) == digest({"a": 1})
    True
    """
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def read_digest(read: Mapping[str, str]) -> dict[str, Any]:
    """What the replay read: how many segments, and the sha256 over each one's name and the
    sha256 of all its bytes as read (so an edited record, even one whose hash was left as it
    was, changes the digest).

    >>> read_digest({})["segments"]
    0
    """
    lines = "".join(f"{name} {sha}\n" for name, sha in sorted(read.items()))
    return {"segments": len(read), "sha256": hashlib.sha256(lines.encode()).hexdigest()}


def _inputs(req: Request, r: JobResult, cand: Effective, base: Effective | None) -> dict[str, Any]:
    return {
        "selection": req.selection.describe(),
        "events": {
            "count": r.summary.selected,
            "first": _iso(r.first_us),
            "last": _iso(r.last_us),
        },
        "chains": {w: {"seq": p.seq, "hash": p.hash} for w, p in sorted(r.chains.items())},
        "read": read_digest(r.read),
        "candidate": {"settings_id": cand.settings_id, "code": code_hashes(cand)},
        "baseline": (
            "recorded"
            if base is None
            else {"settings_id": base.settings_id, "code": code_hashes(base)}
        ),
        "engine_version": ENGINE_VERSION,
        "policy": req.policy.describe(),
    }


def _timeline(hours: Mapping[int, Counter[str]]) -> dict[str, Any]:
    if not hours:
        return {"bucket": "hour", "points": []}
    span = max(hours) - min(hours)
    size = 1 if span <= 72 else 24
    buckets: dict[int, Counter[str]] = {}
    for hour, c in hours.items():
        buckets.setdefault(hour - hour % size, Counter()).update(c)
    points = []
    for start in sorted(buckets):
        c = buckets[start]
        trans = {k: v for k, v in sorted(c.items()) if "->" in k or k == "other"}
        points.append(
            {
                "start": _iso(start * HOUR_US),
                "events": c["events"],
                "changed": c["changed"],
                "transitions": trans,
            }
        )
    return {"bucket": "hour" if size == 1 else "day", "points": points}


def _top_commands(labels: dict[str, Counter[str]], n: int = 20) -> list[dict[str, Any]]:
    counts = {label: sum(c.values()) for label, c in labels.items()}
    return [
        {"label": label, "changed": c, "transitions": dict(sorted(labels[label].items()))}
        for label, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    ]


def _row(r: Row) -> dict[str, Any]:
    return {
        "event_id": r.event_id,
        "ts": _iso(r.ts_us),
        "session_id": r.session_id,
        "user": r.user,
        "host": r.host,
        "event": r.event,
        "tool_name": r.tool_name,
        "label": r.label,
        "baseline": r.baseline,
        "candidate": r.candidate,
        "transition": r.transition,
        "kinds": list(r.kinds),
        "hooks": list(r.hooks),
        "counterfactual": r.counterfactual,
        "baseline_reason": r.baseline_reason,
        "candidate_reason": r.candidate_reason,
    }


def _hook_ids(eff: Effective | None) -> frozenset[str] | None:
    from engine.plan import identity_of

    if eff is None:
        return None
    return frozenset(identity_of(e).key() for entries in eff.entries.values() for e in entries)


def _side(hid: str, candidate: frozenset[str], baseline: frozenset[str] | None) -> str:
    """How a hook changed: "removed" (not in the candidate settings: it ran only in the
    baseline), "added" (not in the baseline settings), "kept" (in both), or "candidate"
    (in the candidate; the recorded baseline has no settings to compare with).
    """
    if hid == ENGINE_HOOK:
        return "kept"
    if hid not in candidate:
        return "removed"
    if baseline is None:
        return "candidate"
    return "added" if hid not in baseline else "kept"


def _by_hook(
    r: JobResult, candidate: Effective | None = None, baseline: Effective | None = None
) -> dict[str, Any]:
    cand, base = _hook_ids(candidate), _hook_ids(baseline)
    out: dict[str, Any] = {}
    for hid in sorted(r.summary.hooks):
        hs = r.summary.hooks[hid]
        meta = hs.meta or (
            {"label": "engine (posture, aggregation or engine version)", "type": "engine"}
            if hid == ENGINE_HOOK
            else {"label": hid, "type": "?"}
        )
        out[hid] = {
            **{k: meta.get(k) for k in ("label", "type", "source", "matcher", "if")},
            "ran": hs.ran,
            "reused": hs.reused,
            "executed": hs.executed,
            "not_evaluated": hs.not_evaluated,
            "errors": hs.errors,
            "changed": hs.changed,
            "counterfactual_changed": hs.counterfactual_changed,
            "transitions": dict(sorted(hs.transitions.items())),
        }
        if cand is not None:
            out[hid]["side"] = _side(hid, cand, base)
    return out


def build(
    req: Request,
    r: JobResult,
    *,
    candidate: Effective,
    baseline: Effective | None,
    seconds: float,
    stored: tuple[str | None, int],
    max_rows: int = 1000,
) -> dict[str, Any]:
    """The report of a finished replay (schema in the module docstring)."""
    s = r.summary
    inputs = _inputs(req, r, candidate, baseline)
    evaluated = s.events
    llm = {
        hid: {**dict(c), "flip_rate": round(c["unstable"] / c["asked"], 4) if c["asked"] else 0.0}
        for hid, c in sorted(s.llm.items())
    }
    users = {
        u: {k: c[k] for k in ("events", "changed", "counterfactual_changed")}
        for u, c in sorted(s.users.items(), key=lambda kv: (-kv[1]["changed"], kv[0]))
    }
    return {
        "schema": SCHEMA,
        "replay_id": req.replay_id,
        "created": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "digest": digest(inputs),
        "inputs": inputs,
        "candidate": {"settings_id": candidate.settings_id, "files": list(candidate.files)},
        "baseline": (
            {"kind": "recorded"}
            if baseline is None
            else {
                "kind": "settings",
                "settings_id": baseline.settings_id,
                "files": list(baseline.files),
            }
        ),
        "policy": {**req.policy.describe(), "store": req.policy.store},
        "selected": s.selected,
        "events": evaluated,
        "not_evaluated": s.not_evaluated,
        "changed": s.changed,
        "unchanged": evaluated - s.changed - s.counterfactual,
        "counterfactual": s.counterfactual,
        "counterfactual_changed": s.counterfactual_changed,
        "sessions": {"total": s.sessions, "changed": s.sessions_changed},
        "transitions": dict(sorted(s.transitions.items())),
        "counterfactual_transitions": dict(sorted(s.counterfactual_transitions.items())),
        "kinds": dict(sorted(s.kinds.items())),
        "by_hook": _by_hook(r, candidate, baseline),
        "by_user": users,
        "timeline": _timeline(s.hours),
        "top_commands": _top_commands(s.labels),
        "hooks": {k: s.answered[k] for k in ("reused", "executed", "not_evaluated")},
        "llm": llm,
        "sandbox": r.sandbox,
        "spawned": r.spawned,
        "stored": {"worker": stored[0], "outcomes": stored[1], "summary": None},
        "changes": [_row(row) for row in s.rows[:max_rows]],
        "changes_truncated": s.changed + s.counterfactual_changed > min(len(s.rows), max_rows),
        "seconds": round(seconds, 3),
        "events_per_second": round(s.selected / seconds, 1) if seconds > 0 else None,
    }


def fail_on(report: Mapping[str, Any], rules: Iterable[str]) -> list[str]:
    """The `--fail-on` rules a report matches (a CI gate exits 1 when any does).

    ``new-deny``: a changed event is denied (or stopped) now and was not before.
    ``new-allow``: a changed event passes now (allow, or no decision) and was denied,
    stopped, asked or deferred before, or is explicitly allowed now and was not before.
    ``any``: at least one changed event. Counterfactual events never match.

    >>> fail_on({"transitions": {"deny->none": 1}, "changed": 1}, ["new-allow", "any"])
    ['new-allow', 'any']
    """
    matched: list[str] = []
    pairs = [tuple(t.split("->", 1)) for t, n in report.get("transitions", {}).items() if n]
    for rule in rules:
        if rule == "new-deny":
            hit = any(b not in _DENYING and c in _DENYING for b, c in pairs)
        elif rule == "new-allow":
            hit = any(
                (b not in _PASSING and c in _PASSING) or (b != "allow" and c == "allow")
                for b, c in pairs
            )
        elif rule == "any":
            hit = bool(report.get("changed"))
        else:
            raise ValueError(f"--fail-on: unknown rule {rule!r} (one of {', '.join(FAIL_RULES)})")
        if hit:
            matched.append(rule)
    return matched
