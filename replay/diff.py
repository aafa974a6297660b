"""Compare two decisions for one event, say what changed and which hooks changed it.

Rules of this file:
- Pure: data in, data out. `compare` reads two decisions (a stored `BaseRecord` or an
  engine `Decision`: the same field names), `attribute` reads two lists of HookRuns.
- A decision has one **class**: ``deny`` (blocked, or a deny permission decision),
  ``stop`` (``continue: false``), ``ask``, ``defer``, ``allow`` (an explicit allow) or
  ``none`` (no hook decided: the agent's normal flow goes on). A class change is a
  **transition** ``"<baseline>-><candidate>"``, e.g. ``"none->deny"``.
- Every difference has a **kind**: ``decision`` (the class), ``reason``,
  ``updated_input``, ``context_added``, ``context_removed``, ``specific`` (event-specific
  outputs), ``system_message``, ``errors_added``, ``errors_removed``. The first six reach
  the agent: they are **behavioural**. System messages and non-blocking errors are shown
  to the user only.
- Attribution compares per-hook verdicts by `hook_id`: a hook is responsible when its
  verdict (outcome, decision, message, error kind, output) differs between the two
  sides, a hook that did not run counting as a silent one. Among those, the hooks whose
  verdict explains the new class are named; when no hook's verdict differs (a posture or
  engine change) the pseudo hook ``"engine"`` is.

Example:
    >>> from engine.aggregate import Decision
    >>> c = compare(Decision(), Decision(blocked=True, decision="deny", reason="no"))
    >>> c.transition, c.kinds, c.behavioural
    ('none->deny', ('decision',), True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec

from engine.errors import InvalidEvent
from engine.payload import stored_payload
from engine.records import HookEvent, HookRun

__all__ = [
    "BEHAVIOURAL",
    "CLASSES",
    "ENGINE_HOOK",
    "Change",
    "DecisionLike",
    "RunLike",
    "attribute",
    "compare",
    "decision_class",
    "event_label",
]

CLASSES = ("deny", "stop", "ask", "defer", "allow", "none")
BEHAVIOURAL = frozenset(
    {"decision", "reason", "updated_input", "context_added", "context_removed", "specific"}
)
ENGINE_HOOK = "engine"
_DENYING = frozenset({"deny", "stop"})


class DecisionLike(Protocol):
    """What `compare` reads: `BaseRecord` (stored) and `engine.aggregate.Decision` (fresh)."""

    @property
    def blocked(self) -> bool: ...
    @property
    def decision(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def updated_input(self) -> dict[str, Any] | None: ...
    @property
    def additional_context(self) -> list[str]: ...
    @property
    def system_messages(self) -> list[str]: ...
    @property
    def continue_(self) -> bool: ...
    @property
    def specific(self) -> dict[str, Any]: ...
    @property
    def errors(self) -> list[str]: ...


def decision_class(d: DecisionLike) -> str:
    """The class of a decision (see the module rules).

    >>> from engine.aggregate import Decision
    >>> decision_class(Decision(decision="ask")), decision_class(Decision(continue_=False))
    ('ask', 'stop')
    """
    if d.blocked or d.decision == "deny":
        return "deny"
    if not d.continue_:
        return "stop"
    if d.decision in ("ask", "defer", "allow"):
        return d.decision
    return "none"


class Change(msgspec.Struct, frozen=True, gc=False):
    """How the candidate decision differs from the baseline for one event (a Struct:
    one is made per changed event)."""

    baseline: str
    candidate: str
    kinds: tuple[str, ...]

    @property
    def transition(self) -> str | None:
        """``"none->deny"`` when the class changed, else None."""
        return f"{self.baseline}->{self.candidate}" if self.baseline != self.candidate else None

    @property
    def behavioural(self) -> bool:
        """Whether the agent would have seen something else (see the module rules)."""
        return not BEHAVIOURAL.isdisjoint(self.kinds)


def compare(base: DecisionLike, cand: DecisionLike) -> Change | None:
    """The difference between two decisions for the same event; None when they agree.

    >>> from engine.aggregate import Decision
    >>> compare(Decision(additional_context=["a"]), Decision(additional_context=["b"])).kinds
    ('context_added', 'context_removed')
    """
    if (
        base.blocked == cand.blocked
        and base.decision == cand.decision
        and base.continue_ == cand.continue_
        and base.reason == cand.reason
        and base.updated_input == cand.updated_input
        and base.additional_context == cand.additional_context
        and base.system_messages == cand.system_messages
        and base.errors == cand.errors
        and base.specific == cand.specific
    ):
        return None
    b, c = decision_class(base), decision_class(cand)
    kinds: list[str] = []
    if b != c:
        kinds.append("decision")
    elif base.reason != cand.reason:
        kinds.append("reason")
    if base.updated_input != cand.updated_input:
        kinds.append("updated_input")
    if base.additional_context != cand.additional_context:
        kinds += _list_change(base.additional_context, cand.additional_context, "context")
    if base.specific != cand.specific:
        kinds.append("specific")
    if base.system_messages != cand.system_messages:
        kinds.append("system_message")
    if base.errors != cand.errors:
        kinds += _list_change(base.errors, cand.errors, "errors")
    if not kinds:  # a difference no kind names (stop_reason only): report it as the decision's
        kinds.append("reason")
    return Change(b, c, tuple(dict.fromkeys(kinds)))


def _list_change(before: Sequence[str], after: Sequence[str], name: str) -> list[str]:
    """``<name>_added`` / ``<name>_removed`` for two different lists of texts."""
    added = any(t not in before for t in after)
    removed = any(t not in after for t in before)
    if not added and not removed:  # the same texts in another order or number
        added = removed = True
    return [k for k, on in ((f"{name}_added", added), (f"{name}_removed", removed)) if on]


class RunLike(Protocol):
    """What `attribute` reads of a hook run: a `HookRun`, or `replay.select.RunVerdict`
    (a stored run decoded without its hook identity)."""

    @property
    def hook_id(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def decision(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def output(self) -> dict[str, Any] | None: ...


_SILENT: tuple[object, ...] = ("noop", None, None, None, None)


def _verdict(run: RunLike | None) -> tuple[object, ...]:
    if run is None or (run.outcome == "noop" and run.output is None and run.message is None):
        return _SILENT
    return (run.outcome, run.decision, run.message, run.error_kind, run.output)


def _explains(run: RunLike | None, cls: str) -> bool:
    """Whether a hook's verdict on one side can produce that side's decision class."""
    if run is None:
        return False
    if cls in _DENYING:
        return run.outcome == "deny" or run.decision == "deny" or run.outcome == "error"
    if cls in ("ask", "defer", "allow"):
        return run.decision == cls or run.outcome == "allow"
    return False


def attribute(
    base_runs: Sequence[RunLike], cand_runs: Sequence[RunLike], change: Change
) -> tuple[str, ...]:
    """The hook ids responsible for a change, in candidate then baseline order.

    >>> from engine.records import HookIdentity
    >>> i = HookIdentity(type="command", source="project", command="deny.sh")
    >>> r = HookRun(hook=i, hook_id="h1", outcome="deny", decision="deny", message="no")
    >>> attribute([], [r], Change("none", "deny", ("decision",)))
    ('h1',)
    """
    base_by: dict[str, RunLike] = {r.hook_id: r for r in base_runs}
    cand_by: dict[str, RunLike] = {r.hook_id: r for r in cand_runs}
    order = list(dict.fromkeys([*cand_by, *base_by]))
    differing = [h for h in order if _verdict(base_by.get(h)) != _verdict(cand_by.get(h))]
    if not differing:
        return (ENGINE_HOOK,)
    if change.baseline != change.candidate:
        named = [
            h
            for h in differing
            if _explains(cand_by.get(h), change.candidate)
            or _explains(base_by.get(h), change.baseline)
        ]
        if named:
            return tuple(named)
    return tuple(differing)


def hook_meta(run: HookRun) -> dict[str, Any]:
    """What a report shows about a hook: its label, type, source, matcher and `if`."""
    i = run.hook
    label = (
        i.command
        or i.url
        or i.callable
        or i.prompt
        or (f"{i.server}:{i.tool}" if i.server or i.tool else i.type)
    )
    return {
        "label": label if len(label) <= 120 else label[:117] + "...",
        "type": i.type,
        "source": i.source,
        "matcher": i.matcher,
        "if": i.if_,
    }


def _first_str(d: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = d.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def event_label(
    event: HookEvent, payload: Mapping[str, Any] | None = None, limit: int = 120
) -> str:
    """A short description of what the agent was doing: ``Bash: rm -rf /``.

    >>> from engine.records import new_event
    >>> event_label(new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash",
    ...     "tool_input": {"command": "ls"}}))
    'Bash: ls'
    """
    if payload is None:
        try:
            payload = stored_payload(event.payload)
        except InvalidEvent:  # a label never fails: an unreadable payload has no detail
            payload = {}
    text: str | None = None
    if event.tool_name:
        ti = payload.get("tool_input")
        detail = (
            _first_str(ti, "command", "file_path", "notebook_path", "url", "pattern", "query")
            if isinstance(ti, Mapping)
            else None
        )
        text = f"{event.tool_name}: {detail}" if detail else event.tool_name
    elif event.event == "UserPromptSubmit":
        prompt = payload.get("prompt")
        text = f"prompt: {prompt}" if isinstance(prompt, str) else event.event
    else:
        text = event.event
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
