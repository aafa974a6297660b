"""Drive a decision flow with real executors: the only event loop in the engine.

Rules of this file:
- All I/O of an evaluation happens through executors chosen by hook type; the
  decision itself is `engine.flow`'s, so live and replayed decisions share code.
- All matched hooks run in parallel, each with its own timeout. When every matched
  hook is a python hook, the fast path calls them inline: no tasks, no JSON.
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
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from engine.effects import Executor, Invocation, RawResult, RunHooks
from engine.events import ALL_TYPES
from engine.executors.python import PythonExecutor
from engine.flow import Evaluation, Flow, decide
from engine.payload import parse_payload
from engine.records import ENGINE_VERSION, HookEvent, Outcome
from engine.settings import PythonHook
from engine.sources import Effective

__all__ = ["Engine", "MissingExecutor", "parse_payload"]

Posture = Literal["compat", "enforcing"]
Profile = Literal["current", "legacy"]


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


class Engine:
    """Evaluates HookEvents against an Effective configuration.

    `executors` maps a hook type to its executor; the command and python
    executors are created by default.
    """

    def __init__(
        self,
        executors: Mapping[str, Executor] | None = None,
        *,
        profile: Profile = "current",
        posture: Posture | None = None,
        home: str | None = None,
        trusted: bool = True,
    ) -> None:
        self.python = PythonExecutor()
        table: dict[str, Executor] = {"python": self.python}
        given = executors or {}
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
        self.missing = MissingExecutor()
        self.profile: Profile = profile
        self.posture = posture
        self.home = home or str(Path.home())
        self.trusted = trusted
        # (session_id, hook_id) of skill `once` hooks that already ran successfully.
        self.once_done: set[tuple[str, str]] = set()
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

    def posture_for(self, event: str, eff: Effective) -> Posture:
        """The CLI/constructor posture wins; else the settings' per-event posture."""
        if self.posture is not None:
            return self.posture
        p = eff.posture.get(event) or eff.posture.get("*") or "compat"
        return "enforcing" if p == "enforcing" else "compat"

    def _quick(self, invocations: Sequence[Invocation]) -> list[RawResult] | None:
        """Answers for an all-sync-python batch, computed inline; None otherwise.

        Nothing runs unless every hook can be answered here, so no hook runs twice.
        """
        if not all(
            isinstance(inv.hook, PythonHook) and self.python.is_sync(inv) for inv in invocations
        ):
            return None
        answers = [self.python.call_sync(inv) for inv in invocations]
        return [a for a in answers if a is not None]

    async def run_hooks(self, invocations: Sequence[Invocation]) -> list[RawResult]:
        """Run invocations in parallel (inline when all are sync python hooks)."""
        quick = self._quick(invocations)
        if quick is not None:
            return quick
        for inv in invocations:
            env_file = inv.env.get("CLAUDE_ENV_FILE")
            if env_file:
                Path(env_file).parent.mkdir(parents=True, exist_ok=True)
        coros = [self.executors.get(inv.hook.type, self.missing).run(inv) for inv in invocations]
        if len(coros) == 1:
            return [await coros[0]]
        return list(await asyncio.gather(*coros))

    def _flow(
        self, event: str, payload: Mapping[str, Any], input_json: bytes, eff: Effective
    ) -> Flow:
        return decide(
            event,
            payload,
            input_json,
            eff,
            posture=self.posture_for(event, eff),
            profile=self.profile,
            trusted=self.trusted,
            home=self.home,
            sessionend_budget_ms=self.sessionend_budget_ms,
            once_done=self.once_done,
        )

    async def _drive(self, flow: Flow, effect: RunHooks) -> Evaluation:
        """Answer the flow's effects with executors until it returns its Evaluation."""
        try:
            while True:
                effect = flow.send(await self.run_hooks(effect.invocations))
        except StopIteration as done:
            evaluation: Evaluation = done.value
            return evaluation

    async def evaluate_payload(
        self, event: str, payload: Mapping[str, Any], input_json: bytes, eff: Effective
    ) -> Evaluation:
        """Run the decision flow for one payload and return the whole Evaluation."""
        flow = self._flow(event, payload, input_json, eff)
        try:
            effect = next(flow)
        except StopIteration as done:
            evaluation: Evaluation = done.value
            return evaluation
        return await self._drive(flow, effect)

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

        Returns the Outcome at once when no hook matched or every matched hook is a
        sync python hook; otherwise a coroutine to await. Workers use this to keep
        the common case free of task overhead.

        The payload goes through `parse_payload` (bounded, one reading, typed) unless the
        caller passes the result of that parse; InvalidEvent says why it cannot be used.
        """
        if payload is None:
            payload = parse_payload(event.payload, f"event {event.id}")
        flow = self._flow(event.event, payload, event.payload.encode(), eff)
        try:
            effect = next(flow)
            quick = self._quick(effect.invocations)
            if quick is not None:
                effect = flow.send(quick)
        except StopIteration as done:
            return to_outcome(event, done.value, eff, replay_id=replay_id, once_done=self.once_done)
        return self._finish_async(event, flow, effect, eff, replay_id)

    async def _finish_async(
        self,
        event: HookEvent,
        flow: Flow,
        effect: RunHooks,
        eff: Effective,
        replay_id: str | None,
    ) -> Outcome:
        evaluation = await self._drive(flow, effect)
        return to_outcome(event, evaluation, eff, replay_id=replay_id, once_done=self.once_done)


def to_outcome(
    event: HookEvent,
    ev: Evaluation,
    eff: Effective,
    *,
    replay_id: str | None = None,
    once_done: set[tuple[str, str]] | None = None,
) -> Outcome:
    """Build the Outcome record of an Evaluation (hash fields are set by the log).

    When `once_done` is given, skill hooks with ``once`` that succeeded are added to
    it, so later events of the session no longer run them.
    """
    if once_done is not None:
        if len(once_done) > 100_000:
            once_done.clear()  # bounded memory; a once hook may then run once more
        for inv, run in zip(ev.plan.invocations, ev.runs, strict=True):
            if inv.hook.once and inv.source == "skill" and run.outcome != "error":
                once_done.add((event.session_id, run.hook_id))
    d = ev.decision
    return Outcome(
        event=event,
        settings_id=eff.settings_id,
        engine_version=ENGINE_VERSION,
        posture=ev.posture,
        profile=ev.profile,
        blocked=d.blocked,
        decision=d.decision,
        reason=d.reason,
        updated_input=d.updated_input,
        additional_context=list(d.additional_context),
        system_messages=list(d.system_messages),
        continue_=d.continue_,
        stop_reason=d.stop_reason,
        specific=dict(d.specific),
        runs=list(ev.runs),
        errors=list(d.errors),
        replay_id=replay_id,
    )
