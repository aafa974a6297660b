"""Backfill: the hook events an agent's session files show, rebuilt and marked as backfilled;
here the walk over files and the tool calls of a Claude Code transcript.

Claude Code keeps each session's transcript (`~/.claude/projects/<project>/<session>.jsonl`):
every assistant `tool_use` block (id, tool, input) and the user entry with its `tool_result`,
which says whether the call was refused (`permissionDecision.decision` "reject",
`toolDenialKind`) or ran. A call can run with no decision in the log: an http hook that cannot
reach serve is a non-blocking error in Claude Code, so is a command hook that cannot start or
that Claude Code stops at its timeout. Backfill turns each tool call into the PreToolUse
input Claude Code would have sent, so the worker records the policy's verdict on it
(`source` "backfill", no reply subject: `decided_by` "observed"), and
`hookaudit query unchecked` lists the calls that ran with no live decision.

Rules of this file:
- A transcript is untrusted input. A line over `MAX_LINE` bytes, a line that is not a JSON
  object, an entry or block of the wrong shape is counted in `Scan.skipped` and passed over;
  nothing raises but `OSError` from reading the file, which the CLI reports in one line.
- The event id is derived from (session id, tool_use id): a UUIDv7 with the call's
  millisecond timestamp and hash bits, so a transcript backfilled twice gives the same ids,
  which JetStream's duplicate window and the log's dedup rule drop.
- The payload holds what Claude Code's PreToolUse input holds (hook_event_name, session_id,
  transcript_path, cwd, permission_mode and prompt_id of the prompt before the call, effort,
  tool_name, tool_input, tool_use_id; agent_id and agent_type for a subagent's call; tested
  field by field against the inputs the real binary sent, tests/fixtures/claude_code) plus
  `hookaudit_backfill`: the transcript, its line, and `ran` (true: a
  result that is no refusal; false: refused; null: no result in the transcript).
- A subagent's transcript is `<project>/<session>/subagents/agent-<id>.jsonl`. Claude Code
  reports its calls with the session's own transcript as `transcript_path`, the agent's type
  from `agent-<id>.meta.json` beside it, and the permission mode of the session's prompt that
  started the agent (its user entries carry none): `scan_path` reads those two files, each
  bounded and untrusted like the transcript. A subagent's own subagent (meta `spawnDepth` 2)
  lies flat in the same folder and is read the same way.
- Pure but for reading the files: publishing is `ingest.cli_backfill`'s.

Example:
    >>> scan = scan_lines(['{"type":"assistant","sessionId":"s","timestamp":"2026-01-02T03:04:05Z",'
    ...     '"cwd":"/p","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Bash",'
    ...     '"input":{"command":"ls"}}]}}'], "t.jsonl")
    >>> [(c.tool_name, c.ran) for c in scan.calls]
    [('Bash', None)]

Longer than 400 lines: one reading of one transcript (its calls, their results, its prompts
and turns, a subagent's context) in one loop; what each rebuilt event holds is
`ingest.backfill_events`'s.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from engine.records import HookEvent, new_event
from engine.userfiles import open_regular
from ingest.backfill_events import (
    Turn,
    assistant_text,
    command_args,
    compaction,
    post_event,
    prompt_event,
    session_end,
    session_start,
    stop_event,
    subagent_start,
    subagent_stop,
)
from ingest.backfill_events import (
    parse_time as _when,
)
from ingest.backfill_events import (
    str_or_none as _str,
)

__all__ = [
    "MAX_LINE",
    "Call",
    "Scan",
    "Subagent",
    "backfill_id",
    "scan_lines",
    "scan_path",
    "subagent_of",
    "transcripts",
]

MAX_LINE = 16 * 1024 * 1024  # a transcript line (one message) above this is skipped
MAX_CALLS = 1_000_000  # per scan: a transcript is bounded, not trusted
MAX_META = 1 << 20  # a subagent's meta file above this is not read
MAX_PROMPTS = 100_000  # prompt -> permission mode entries kept from a parent transcript
_dec = msgspec.json.Decoder()


@dataclass
class Call:
    """One tool call of a transcript."""

    session_id: str
    tool_use_id: str
    tool_name: str
    tool_input: dict[str, Any]
    ts: datetime
    cwd: str | None
    permission_mode: str | None
    agent_id: str | None
    transcript: str
    line: int
    ran: bool | None = None
    prompt_id: str | None = None
    effort: str | None = None
    agent_type: str | None = None
    transcript_path: str | None = None  # what Claude Code reports, when not `transcript`

    def payload(self) -> dict[str, Any]:
        p: dict[str, Any] = {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path or self.transcript,
            "cwd": self.cwd,
            "permission_mode": self.permission_mode,
            "hook_event_name": "PreToolUse",
            "tool_name": self.tool_name,
            "tool_input": self.tool_input,
            "tool_use_id": self.tool_use_id,
            "prompt_id": self.prompt_id,
            "effort": {"level": self.effort} if self.effort is not None else None,
        }
        if self.agent_id is not None:
            p["agent_id"] = self.agent_id
            p["agent_type"] = self.agent_type
        p["hookaudit_backfill"] = {
            "transcript": self.transcript,
            "line": self.line,
            "ran": self.ran,
        }
        return {k: v for k, v in p.items() if v is not None}

    def event(self, *, host: str | None = None, user: str | None = None) -> HookEvent:
        return new_event(
            self.payload(),
            source="backfill",
            host=host,
            user=user,
            ts=self.ts,
            event_id=backfill_id(self.session_id, self.tool_use_id, self.ts),
        )


@dataclass
class Scan:
    """What one or more transcripts hold: their tool calls, and what was passed over."""

    calls: list[Call] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)  # prompts and results (backfill_events)
    lines: int = 0
    skipped: int = 0  # lines or blocks that are not what Claude Code writes
    results: int = 0


def backfill_id(session_id: str, tool_use_id: str, ts: datetime) -> str:
    """A UUIDv7 of `ts`'s milliseconds whose other bits hash (session id, tool_use id).

    >>> t = datetime(2026, 1, 2, tzinfo=UTC)
    >>> backfill_id("s", "toolu_1", t) == backfill_id("s", "toolu_1", t)
    True
    >>> backfill_id("s", "toolu_1", t)[14]
    '7'
    """
    ms = int(ts.timestamp() * 1000) & ((1 << 48) - 1)
    digest = hashlib.sha256(f"backfill\0{session_id}\0{tool_use_id}".encode()).digest()
    rand = int.from_bytes(digest[:10], "big")
    value = ms << 80 | 0x7 << 76 | ((rand >> 62) & 0xFFF) << 64 | 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def transcripts(paths: Iterable[Path]) -> Iterator[Path]:
    """The `.jsonl` files named, and those under the directories named, sorted."""
    for p in paths:
        if p.is_dir():
            # Claude Code's transcripts (not the log's segments: those are ingest.log's)
            yield from sorted(q for q in p.rglob("*") if q.suffix == ".jsonl" and q.is_file())
        else:
            yield p


@dataclass(frozen=True)
class Subagent:
    """What a subagent's calls take from outside its own transcript."""

    transcript_path: str  # the session's transcript, as Claude Code reports it
    agent_type: str | None
    modes: dict[str, str]  # the session's prompt id -> permission mode


def subagent_of(path: Path) -> Subagent | None:
    """`path`'s session context when it is a subagent's transcript, else None.

    >>> subagent_of(Path("/p/s1/subagents/agent-a1.jsonl")).transcript_path
    '/p/s1.jsonl'
    """
    if path.parent.name != "subagents" or not path.name.startswith("agent-"):
        return None
    session_dir = path.parent.parent
    parent = session_dir.with_name(session_dir.name + ".jsonl")
    return Subagent(str(parent), _agent_type(path.with_suffix(".meta.json")), _modes(parent))


def _agent_type(meta: Path) -> str | None:
    try:
        with open_regular(meta) as f:
            doc = _dec.decode(f.read(MAX_META + 1))
    except (OSError, msgspec.DecodeError, UnicodeError, RecursionError):
        return None
    t = doc.get("agentType") if isinstance(doc, dict) else None
    return t if isinstance(t, str) and len(t) <= 256 else None


def _modes(parent: Path) -> dict[str, str]:
    try:
        st = parent.stat()
    except OSError:
        return {}
    return _modes_cached(str(parent), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)  # the subagents of one session share their parent's
def _modes_cached(parent: str, _mtime: int, _size: int) -> dict[str, str]:
    modes: dict[str, str] = {}
    try:
        with open_regular(parent) as f:
            for line in _bounded_lines(f, Scan()):
                if b'"permissionMode"' not in line or len(modes) >= MAX_PROMPTS:
                    continue
                try:
                    entry = _dec.decode(line)
                except (msgspec.DecodeError, UnicodeError, RecursionError):
                    continue
                if isinstance(entry, dict) and entry.get("type") == "user":
                    pid, mode = _str(entry.get("promptId")), _str(entry.get("permissionMode"))
                    if pid and mode:
                        modes.setdefault(pid, mode)
    except OSError:
        return {}
    return modes


def scan_path(path: Path, scan: Scan | None = None) -> Scan:
    """Read one transcript (OSError propagates: the caller names the file)."""
    scan = scan or Scan()
    with open_regular(path) as f:  # a FIFO or a device (/dev/zero) is refused, not read
        scan_lines(_bounded_lines(f, scan), str(path), scan, subagent=subagent_of(path))
    return scan


def _bounded_lines(f: Any, scan: Scan) -> Iterator[bytes]:
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:  # the rest of an overlong line: skip to its end
            scan.skipped += 1
            while line and not line.endswith(b"\n"):
                line = f.readline(MAX_LINE + 1)
            yield b""
            continue
        yield line


def scan_lines(
    lines: Iterable[str | bytes],
    transcript: str,
    scan: Scan | None = None,
    *,
    subagent: Subagent | None = None,
) -> Scan:
    """The tool calls of a transcript's lines, each marked with whether it ran; `subagent`:
    the session context of a subagent's transcript (`subagent_of`)."""
    scan = scan or Scan()
    by_id: dict[tuple[str, str], Call] = {}
    prompt: dict[str, tuple[str | None, str | None]] = {}  # session -> (promptId, mode)
    started: set[str] = set()  # sessions whose SessionStart is rebuilt
    turns: dict[str, Turn] = {}  # session -> the turn so far (its last assistant text)
    where: dict[str, tuple[str | None, Any]] = {}  # session -> (last cwd, last time)
    # an interactive session's (entrypoint "cli") SessionStart names its model, which the
    # first API request says: session -> (its SessionStart, whether interactive, model)
    opened: dict[str, list[Any]] = {}
    compactions: list[tuple[dict[str, Any], int, dict[str, Any]]] = []  # boundary, line, summary
    boundary: dict[
        str, tuple[dict[str, Any], int]
    ] = {}  # session -> a boundary awaiting its summary
    compact_args: dict[str, str] = {}  # prompt id -> what /compact was given
    ended: dict[str, tuple[Any, ...]] = {}  # session -> its last cost-state, and where it stood
    for n, line in enumerate(lines, start=1):
        scan.lines += 1
        if not line or not line.strip():
            continue
        try:
            entry = _dec.decode(line)
        except (msgspec.DecodeError, UnicodeError, RecursionError):
            scan.skipped += 1
            continue
        if not isinstance(entry, dict):
            scan.skipped += 1
            continue
        kind = entry.get("type")
        session = _str(entry.get("sessionId")) or ""
        if session:
            was_cwd, was_ts = where.get(session, (None, None))
            where[session] = (
                _str(entry.get("cwd")) or was_cwd,
                _when(entry.get("timestamp")) or was_ts,
            )
        if kind == "cost-state" and subagent is None and session:
            # written at a session's end, and at each /compact too: the last one is the end
            ended[session] = (entry, n, *where[session], prompt.get(session, (None, None))[0])
            continue
        if session and session not in started:
            begun = (
                session_start(entry, transcript, n)
                if subagent is None
                else subagent_start(entry, subagent, n)
            )
            if begun is not None:
                started.add(session)
                _keep(scan, begun)
                if subagent is None:
                    opened[session] = [begun, False, None]
        if session in opened:
            _session_model(opened[session], entry, kind)
        if kind == "system" and entry.get("subtype") == "compact_boundary" and subagent is None:
            boundary[session] = (entry, n)
        if kind == "user" and entry.get("isCompactSummary") is True and session in boundary:
            compactions.append((*boundary.pop(session), entry))
        if kind == "user" and _str(entry.get("promptId")):
            args = command_args(entry)
            if args is not None and "<command-name>/compact<" in str(entry.get("message")):
                compact_args[str(entry["promptId"])] = args
        if kind == "assistant":
            _calls(entry, transcript, n, scan, by_id, prompt.get(session, (None, None)), subagent)
            text = assistant_text(entry)
            if text is not None:
                was_turn = turns.get(session)
                ctx = prompt.get(session, (None, None))
                cont = was_turn.continued if was_turn else False
                turns[session] = Turn(entry, text, n, ctx[0], ctx[1], cont)
        elif kind == "user":
            was = prompt.get(session, (None, None))
            prompt[session] = (
                _str(entry.get("promptId")) or was[0],
                _str(entry.get("permissionMode")) or was[1],
            )
            said = (
                prompt_event(entry, transcript, n, prompt[session][1]) if subagent is None else None
            )
            turn = turns.get(session)
            if (
                turn is not None
                and turn.text
                and (said is not None or entry.get("rowSource") == "hook")
            ):
                # the turn ended: a new prompt, or a Stop (SubagentStop) hook's block sent it on
                _keep(
                    scan,
                    stop_event(turn, transcript)
                    if subagent is None
                    else subagent_stop(turn, subagent, transcript),
                )
                if said is None:  # sent on by the Stop hook: the next Stop says so
                    turns[session] = Turn({}, "", 0, turn.prompt_id, turn.mode, continued=True)
                else:
                    del turns[session]
            _keep(scan, said)
            _results(entry, scan, by_id, n)
    for b, at, summary in compactions:  # once every /compact's arguments are known
        state = opened.get(_str(b.get("sessionId")) or "")
        args = compact_args.get(_str(summary.get("promptId")) or "")
        for ev in compaction(b, summary, transcript, at, args=args,
                             model=state[2] if state and state[1] else None):  # fmt: skip
            _keep(scan, ev)
    for session, (entry, at, cwd, last, prompt_id) in ended.items():
        state = opened.get(session)
        # an interactive session ends on a command its transcript does not keep (/exit):
        # the prompt id of the end is not known there
        known = None if state is not None and state[1] else prompt_id
        _keep(scan, session_end(entry, transcript, at, cwd=cwd, prompt_id=known, last=last))
    for turn in turns.values():  # the last turn of each session (or the subagent's end)
        if turn.text:
            end = (
                stop_event(turn, transcript)
                if subagent is None
                else subagent_stop(turn, subagent, transcript)
            )
            _keep(scan, end)
    return scan


def _session_model(state: list[Any], entry: dict[str, Any], kind: object) -> None:
    """Fill in an interactive session's model on its SessionStart (`state`: that event,
    whether the session is interactive, its model) as the entries say them."""
    if entry.get("entrypoint") == "cli":
        state[1] = True
    if kind == "api-request" and state[2] is None:
        params = entry.get("params")
        model = params.get("model") if isinstance(params, dict) else None
        if isinstance(model, str):
            state[2] = model
    begun = state[0]
    if state[1] and state[2] and "model" not in begun.payload:
        note = begun.payload.pop("hookaudit_backfill")
        begun.payload["model"] = state[2]
        begun.payload["hookaudit_backfill"] = note


def _keep(scan: Scan, event: Any) -> None:
    if event is not None and len(scan.events) < MAX_CALLS:
        scan.events.append(event)


def _blocks(entry: dict[str, Any]) -> list[Any]:
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, list) else []


def _calls(
    entry: dict[str, Any],
    transcript: str,
    n: int,
    scan: Scan,
    by_id: dict[tuple[str, str], Call],
    prompt: tuple[str | None, str | None],
    sub: Subagent | None = None,
) -> None:
    session, ts = _str(entry.get("sessionId")), _when(entry.get("timestamp"))
    for b in _blocks(entry):
        if not isinstance(b, dict) or b.get("type") != "tool_use":
            continue
        uid, name, inp = _str(b.get("id")), _str(b.get("name")), b.get("input")
        if not (session and ts and uid and name) or not isinstance(inp, dict):
            scan.skipped += 1
            continue
        if (session, uid) in by_id or len(scan.calls) >= MAX_CALLS:
            continue  # the same block again (a resumed session re-writes its history)
        agent = _str(entry.get("agentId")) if entry.get("isSidechain") is True else None
        mode = _str(entry.get("permissionMode")) or prompt[1]
        if mode is None and sub is not None and prompt[0] is not None:
            mode = sub.modes.get(prompt[0])
        call = Call(session, uid, name, inp, ts, _str(entry.get("cwd")), mode, agent,
                    transcript, n, prompt_id=prompt[0], effort=_str(entry.get("effort")),
                    agent_type=sub.agent_type if sub and agent else None,
                    transcript_path=sub.transcript_path if sub else None)  # fmt: skip
        by_id[(session, uid)] = call
        scan.calls.append(call)


def _results(
    entry: dict[str, Any], scan: Scan, by_id: dict[tuple[str, str], Call], n: int = 0
) -> None:
    session = _str(entry.get("sessionId"))
    for b in _blocks(entry):
        if not isinstance(b, dict) or b.get("type") != "tool_result":
            continue
        call = by_id.get((session or "", _str(b.get("tool_use_id")) or ""))
        if call is None:
            continue
        scan.results += 1
        decision = entry.get("permissionDecision")
        content = b.get("content")
        refused = (
            entry.get("toolDenialKind") is not None
            or (isinstance(decision, dict) and decision.get("decision") == "reject")
            # refused before it ran: a hook's or a permission's error, invalid input
            or (isinstance(content, str) and content.startswith("<tool_use_error>"))
        )
        call.ran = not refused
        if not refused and len(scan.events) < MAX_CALLS:
            post = post_event(entry, b, call, n)
            if post is not None:
                scan.events.append(post)
