"""The docs' SIEM field reference, generated: what each format (OCSF, CEF, ECS) sends for
one sample denial, field by field, from the formatters themselves.

The sample is a Claude Code `Bash` call that the shipped policy denies, with fixed ids,
times and durations, so the page is the same on every run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["formats_page", "sample_outcome"]

_WHEN = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def sample_outcome() -> Any:
    """A PreToolUse Bash call the shipped policy denies, as the worker would record it."""
    import asyncio
    from pathlib import Path

    import msgspec

    from engine.records import new_event
    from engine.run import Engine
    from engine.sources import load_sources

    payload = {
        "session_id": "6f1c2b9e-0d4a-4c55-9a3e-2f6d1e8b7c10",
        "transcript_path": "/home/dev/.claude/projects/-srv-app/6f1c2b9e.jsonl",
        "cwd": "/srv/app",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf /srv/backups", "description": "clean up"},
        "tool_use_id": "toolu_01ABCDEF",
    }
    event = new_event(
        payload,
        host="build-01",
        user="dev",
        event_id="019c9a00-0000-7000-8000-000000000001",
        ts=_WHEN,
    )
    policy = Path(__file__).resolve().parent.parent / "infra" / "policies" / "security.json"
    eff = load_sources([("project", str(policy))])
    outcome = asyncio.run(Engine(profile="current").evaluate(event, eff))
    runs = [msgspec.structs.replace(r, duration_ms=4.0) for r in outcome.runs]
    # the settings' hash names the policy file's path: a fixed one, so any checkout writes
    # the same page
    return msgspec.structs.replace(
        outcome, runs=runs, worker="w1", seq=42, appended=_WHEN, hash="0" * 64,
        prev_hash="0" * 64, settings_id="5e771265ab5e771d",
    )  # fmt: skip


def _flatten(doc: Any, prefix: str = "") -> list[tuple[str, str]]:
    import json

    if isinstance(doc, dict):
        out: list[tuple[str, str]] = []
        for k, v in doc.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        out = []
        for i, v in enumerate(doc):
            out += _flatten(v, f"{prefix}[{i}]")
        return out
    return [(prefix, json.dumps(doc, ensure_ascii=False))]


def _cef_fields(text: str) -> list[tuple[str, str]]:
    """The header fields and extension keys of one CEF line."""
    import re

    head = text.split("CEF:", 1)[1]
    parts = re.split(r"(?<!\\)\|", head, maxsplit=7)
    names = ["version", "device vendor", "device product", "device version",
             "signature id", "name", "severity"]  # fmt: skip
    out = [(n, p) for n, p in zip(names, parts[:7], strict=False)]
    ext = parts[7] if len(parts) > 7 else ""
    keys = list(re.finditer(r"(?:^| )([A-Za-z0-9_.]+)=", ext))
    for k, m in enumerate(keys):
        end = keys[k + 1].start() if k + 1 < len(keys) else len(ext)
        out.append((m[1], ext[m.end() : end]))
    return out


def _cell(text: str) -> str:
    text = text if len(text) <= 160 else text[:157] + "…"
    return text.replace("|", "\\|").replace("\n", " ")


def formats_page(generated: str) -> str:
    """The page: the sample, then one table per format."""
    from ingest.siem.formats import format_view
    from ingest.siem.view import build_view

    view = build_view(sample_outcome(), seq=42)
    out = [
        generated,
        "# SIEM formats, field by field\n\n"
        "What `hookaudit siem --format ocsf|cef|ecs` sends for one sample outcome: a Claude Code "
        "`Bash` call of `rm -rf /srv/backups` that the shipped policy "
        "(`infra/policies/security.json`) denies. The tables are made by the formatters "
        "themselves, so they are what a receiver gets. Redaction applies before formatting "
        "(secrets become keyed tokens); values are bounded. The [SIEM guide](../guides/siem.md) "
        "says what each field means and how transports deliver them.\n",
    ]
    for fmt, title in (("ocsf", "OCSF 1.8"), ("ecs", "ECS"), ("cef", "CEF")):
        records = format_view(fmt, view)
        out.append(f"\n## {title}\n")
        for k, rec in enumerate(records):
            if len(records) > 1:
                kind = (rec.doc or {}).get("class_name", f"record {k + 1}")
                out.append(f"\n### {kind}\n")
            rows = _flatten(rec.doc) if rec.doc is not None else _cef_fields(rec.text)
            out.append("\n| field | sample value |\n|---|---|\n")
            out += [f"| `{name}` | {_cell(value)} |\n" for name, value in rows]
    # the shipped policy's hooks are named by their path: relative to the checkout here
    from pathlib import Path

    return "".join(out).replace(str(Path(__file__).resolve().parent.parent) + "/", "")
