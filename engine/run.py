"""Drive a decision with executors: the one driver of every entry point.

The worker, `hookaudit eval`, serve (through the worker) and replay all evaluate here, so
their decisions cannot drift apart.

Rules of this file:
- The decision is `engine.flow`'s: `drive` calls its two halves (`engine.plan.plan`, then
  `engine.flow.finish` with the hooks' answers), which saves a generator per event.
- Each planned hook is answered by an *answerer* (`Answerer`): a RawResult now (a sync
  python hook, an answer recorded in the log), an awaitable (an executor running it), or
  None: the hook may not run here, and the event gets no decision (`NotEvaluated`). The
  default answerer runs python hooks inline and the others with the executor of their
  type; replay passes its policy (reuse, sandbox, deny) as another answerer.
- When every answer is known at once the decision is made without the event loop (the
  fast path: no task, no coroutine); otherwise all pending answers run in parallel,
  each executor holding its hook's timeout.
- The posture and profile of an evaluation come from `context`, and the ``once`` state
  (skill hooks that already ran successfully in a session) is the engine's `once_done`,
  updated by `drive` itself: no entry point resolves either on its own.
- A hook type with no executor is answered `error/no_executor` (the enforcing
  posture then denies at PreToolUse; compat lets the action proceed).

Example:
    >>> import asyncio
    >>> from engine.records import new_event
    >>> from engine.sources import merge
    >>> ev = new_event({"hook_event_name": "Stop", "session_id": "s"})
    >>> asyncio.run(Engine().evaluate(ev, merge([]))).blocked
    False
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.effects import Executor, Invocation, RawResult
from engine.events import ALL_TYPES
from engine.executors.python import PythonExecutor
from engine.flow import Evaluation, finish
from engine.outcome import to_outcome
from engine.payload import parse_payload
from engine.plan import Plan, plan
from engine.records import HookEvent, Outcome, Posture, Profile
from engine.settings import PythonHook
from engine.sources import Effective

__all__ = [
    "Answer",
    "Answerer",
    "Engine",
    "MissingExecutor",
    "NotEvaluated",
    "ensure_env_dir",
    "parse_payload",
]

# A hook's answer: now, later, or None (it may not run here: the event gets no decision).
Answer = RawResult | Awaitable[RawResult] | None
Answerer = Callable[[Invocation], Answer]
_ONCE_LIMIT = 100_000  # (session, hook) pairs kept; past it the set is cleared


class NotEvaluated:
    """An event one of whose hooks the answerer did not let run: it has no decision."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: list[str]) -> None:
        self.hooks = hooks  # the hook ids that were refused


class MissingExecutor:
    """Answers every hook of a type nobody can run here."""

    def __init__(self, kind: str = "no_executor") -> None:
        self.kind = kind

    async def run(self, inv: Invocation) -> RawResult:
        known = inv.hook.type in ALL_TYPES
        message = (
            f"no executor for {inv.hook.type!r} hooks in this process"
            if known
            else f"unknown hook type {inv.hook.type!r}"
        )
        return RawResult(
            error_kind=self.kind if known else "unknown_type", error=message, stderr=message
        )


def ensure_env_dir(inv: Invocation) -> None:
    """Create the directory of the hook's ``CLAUDE_ENV_FILE`` (Claude Code does, before hooks)."""
    env_file = inv.env.get("CLAUDE_ENV_FILE")
    if env_file:
        Path(env_file).parent.mkdir(parents=True, exist_ok=True)


def _close(answers: Sequence[Answer]) -> None:
    for a in answers:
        if asyncio.iscoroutine(a):
            a.close()


class Engine:
    """Evaluates events against an Effective configuration.

    `executors` maps a hook type to its executor; those not given are created here
    (command, http, prompt/agent, mcp_tool; python always). `profile=None` follows the
    profile an event was recorded with (replay), else ``current``.
    """

    def __init__(
        self,
        executors: Mapping[str, Executor] | None = None,
        *,
        profile: Profile | None = "current",
        posture: Posture | None = None,
        home: str | None = None,
        trusted: bool = True,
    ) -> None:
        given = executors or {}
        table: dict[str, Executor] = {"python": PythonExecutor()}
        if "command" not in given:
            from engine.executors.command import CommandExecutor

            table["command"] = CommandExecutor()
        if "http" not in given:
            from engine.executors.http import HttpExecutor

            table["http"] = HttpExecutor()
        if "prompt" not in given or "agent" not in given:
            from engine.executors.llm import LlmExecutor

            llm = LlmExecutor()
            table["prompt"] = llm
            table["agent"] = llm
        if "mcp_tool" not in given:
            from engine.executors.mcp import McpExecutor

            table["mcp_tool"] = McpExecutor()
        table.update(given)
        self.executors = table
        py = table["python"]
        self.python = py if isinstance(py, PythonExecutor) else None  # inline when ours
        self.missing = MissingExecutor()
        self.profile = profile
        self.posture = posture
        self.home = home or str(Path.home())
        self.trusted = trusted
        # (session_id, hook_id) of skill `once` hooks that already ran successfully.
        self.once_done: set[tuple[str, str]] = set()
        self._once_eff: Effective | None = None  # the settings `_once_any` was computed for
        self._once_any = False  # whether they have a skill `once` hook at all
        budget = os.environ.get("CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS")
        self.sessionend_budget_ms = float(budget) if budget and budget.isdigit() else None

    async def aclose(self) -> None:
        """Close every executor that holds resources (HTTP clients, background hooks)."""
        seen: set[int] = set()
        for ex in self.executors.values():
            close = getattr(ex, "aclose", None)
            if close is not None and id(ex) not in seen:
                seen.add(id(ex))
                await close()

    # ------------------------------------------------------------------ the one context
    def context(
        self,
        event: str,
        eff: Effective,
        *,
        recorded_posture: str | None = None,
        recorded_profile: str | None = None,
    ) -> tuple[Posture, Profile]:
        """The posture and profile one event is evaluated with, for every entry point.

        Posture: the engine's (CLI) posture; else the settings' for the event, else their
        ``*``; else the one the event was recorded with (replay); else compat. Profile:
        the engine's; else the recorded one; else current.

        >>> from engine.sources import merge
        >>> Engine(profile=None).context("Stop", merge([]), recorded_posture="enforcing",
        ...     recorded_profile="legacy")
        ('enforcing', 'legacy')
        """
        p = self.posture or eff.posture.get(event) or eff.posture.get("*") or recorded_posture
        posture: Posture = "enforcing" if p == "enforcing" else "compat"
        prof = self.profile or recorded_profile
        profile: Profile = "legacy" if prof == "legacy" else "current"
        return posture, profile

    def posture_for(self, event: str, eff: Effective) -> Posture:
        """The posture of a live event (`context` without a recorded one)."""
        return self.context(event, eff)[0]

    # ------------------------------------------------------------------ answers
    def answer(self, inv: Invocation) -> Answer:
        """The default answerer: python hooks inline (sync ones), the others by executor."""
        hook = inv.hook
        if self.python is not None and type(hook) is PythonHook:
            quick = self.python.call_sync(inv)
            return quick if quick is not None else self.python.run(inv)
        ensure_env_dir(inv)
        return self.executors.get(hook.type, self.missing).run(inv)

    # ------------------------------------------------------------------ the driver
    def drive(
        self,
        event: str,
        payload: Mapping[str, Any],
        input_json: bytes,
        eff: Effective,
        posture: Posture,
        profile: Profile,
        answer: Answerer | None = None,
        *,
        project_dir: str | None = None,
    ) -> Evaluation | NotEvaluated | Coroutine[Any, Any, Evaluation | NotEvaluated]:
        """Plan, answer every hook, decode and aggregate: the Evaluation at once when every
        answer is known now, else a coroutine that awaits the pending ones.

        `posture` and `profile` come from `context`; `answer` defaults to `Engine.answer`;
        `project_dir` is the event's recorded one (`HookEvent.project_dir`, see `plan`).
        """
        the_plan = plan(
            event,
            payload,
            input_json,
            eff,
            profile=profile,
            trusted=self.trusted,
            home=self.home,
            sessionend_budget_ms=self.sessionend_budget_ms,
            once_done=self.once_done,
            project_dir=project_dir,
        )
        invocations = the_plan.invocations
        if not invocations:
            return finish(event, payload, the_plan, (), posture=posture, profile=profile)
        answer = answer or self.answer
        answers = [answer(inv) for inv in invocations]
        inline = True
        for a in answers:
            if a is None:
                _close(answers)
                refused = [
                    inv.hook_id or inv.identity.key()
                    for inv, a in zip(invocations, answers, strict=True)
                    if a is None
                ]
                return NotEvaluated(refused)
            if type(a) is not RawResult:
                inline = False
        if inline:
            done = finish(event, payload, the_plan, answers, posture=posture, profile=profile)  # type: ignore[arg-type]
            if self._once_any or eff is not self._once_eff:  # no call when no once hook
                self._note_once(payload, eff, done)
            return done
        return self._pending(event, payload, eff, the_plan, answers, posture, profile)

    async def _pending(
        self,
        event: str,
        payload: Mapping[str, Any],
        eff: Effective,
        the_plan: Plan,
        answers: list[Any],
        posture: Posture,
        profile: Profile,
    ) -> Evaluation:
        pending = [i for i, a in enumerate(answers) if type(a) is not RawResult]
        if len(pending) == 1:  # the usual case: awaited here, without a task of its own
            answers[pending[0]] = await answers[pending[0]]
        else:
            got = await asyncio.gather(*(answers[i] for i in pending))
            for i, res in zip(pending, got, strict=True):
                answers[i] = res
        done = finish(event, payload, the_plan, answers, posture=posture, profile=profile)
        self._note_once(payload, eff, done)
        return done

    def _note_once(self, payload: Mapping[str, Any], eff: Effective, ev: Evaluation) -> None:
        """Remember the skill ``once`` hooks that succeeded: the session does not run them again."""
        if eff is not self._once_eff:  # other settings (a reload, the other side of a replay)
            self._once_eff = eff
            self._once_any = any(
                e.hook.once and e.scope == "skill" for es in eff.entries.values() for e in es
            )
        if not self._once_any:
            return
        session = payload.get("session_id")
        session = session if isinstance(session, str) else ""
        if len(self.once_done) > _ONCE_LIMIT:
            self.once_done.clear()  # bounded memory; a once hook may then run once more
        for inv, run in zip(ev.plan.invocations, ev.runs, strict=True):
            if inv.hook.once and inv.source == "skill" and run.outcome != "error":
                self.once_done.add((session, run.hook_id))

    async def evaluate_payload(
        self, event: str, payload: Mapping[str, Any], input_json: bytes, eff: Effective
    ) -> Evaluation:
        """Evaluate one payload with the default answerer and return the whole Evaluation."""
        posture, profile = self.context(event, eff)
        done = self.drive(event, payload, input_json, eff, posture, profile)
        if not isinstance(done, Evaluation | NotEvaluated):
            done = await done
        assert isinstance(done, Evaluation)  # the default answerer refuses nothing
        return done

    async def evaluate(
        self, event: HookEvent, eff: Effective, *, replay_id: str | None = None
    ) -> Outcome:
        """Evaluate one stored/received HookEvent and build its Outcome record."""
        started = self.start(event, eff, replay_id=replay_id)
        return started if isinstance(started, Outcome) else await started

    def start(
        self,
        event: HookEvent,
        eff: Effective,
        *,
        replay_id: str | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> Outcome | Coroutine[Any, Any, Outcome]:
        """Evaluate without the event loop when no hook needs I/O.

        Returns the Outcome at once when no hook matched or every matched hook answered
        inline (sync python hooks); otherwise a coroutine to await. Workers use this to
        keep the common case free of task overhead.

        The payload goes through `parse_payload` (bounded, one reading, typed) unless the
        caller passes the result of that parse; InvalidEvent says why it cannot be used.
        """
        if payload is None:
            try:
                raw = event.payload.encode()  # encoded once: parsed, then planned with
            except UnicodeEncodeError:
                parse_payload(event.payload, f"event {event.id}")  # says: not UTF-8
                raise
            payload = parse_payload(raw, f"event {event.id}")
        else:
            raw = event.payload.encode()
        name = event.event
        posture, profile = self.context(name, eff)
        done = self.drive(name, payload, raw, eff, posture, profile, project_dir=event.project_dir)
        if type(done) is Evaluation:
            return to_outcome(event, done, eff, replay_id=replay_id)
        return self._outcome_later(event, done, eff, replay_id)  # type: ignore[arg-type]

    async def _outcome_later(
        self,
        event: HookEvent,
        pending: Coroutine[Any, Any, Evaluation],
        eff: Effective,
        replay_id: str | None,
    ) -> Outcome:
        return to_outcome(event, await pending, eff, replay_id=replay_id)
