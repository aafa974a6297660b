"""Who answers each hook of a replayed event: the log, this process, the sandbox, or nobody.

Rules of this file:
- One table, applied hook by hook (`Answers.answer`, the answerer the replay job hands
  `engine.run.Engine.drive`: the engine's driver, so replay has no loop of its own):

  =========================  ===============================================================
  hook                       answered by
  =========================  ===============================================================
  python                     run in-process: deterministic, and its code is not part of its
                             identity, so a recorded answer could hide an edited policy
  command, http              the log (`RecordedExecutor`) when the same hook ran for the
                             event and ``reuse="unchanged"``; else by ``exec``: ``sandbox``
                             (commands in `SandboxExecutor`; http hooks, which send the event
                             away, are not evaluated), ``allow`` (the engine's executors, as
                             a worker runs them), ``deny`` (not evaluated)
  mcp_tool, unknown types    the log when reused, else as a worker answers them (no executor)
  prompt, agent              the log when ``llm="recorded"`` (a new prompt is not evaluated:
                             that needs ``live``); ``live`` asks the model again; with
                             ``samples=N`` it asks N times, keeps the majority verdict and
                             counts how often the samples disagree
  =========================  ===============================================================

- Each answer is recorded in ``how`` as (hook_id, "reused" | "executed" | "not_evaluated"),
  which the job turns into per-hook counts.
- Executors are created on first use and closed by `aclose`; given ones (tests, callers
  with their own model client) replace the default of their hook type.
- At most ``concurrency`` hooks run at once (per job) outside this process: the sandbox
  helper holds that limit itself (so that requests queue there and a busy job never
  leaves it idle); other executors wait here for a slot. Python hooks are not counted.

Example:
    >>> Policy().describe()
    {'reuse': 'unchanged', 'exec': 'sandbox', 'llm': 'recorded', 'posture': None}
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from engine.effects import Executor, Invocation, RawResult
from engine.executors.python import PythonExecutor
from engine.records import Posture, Profile
from engine.run import MissingExecutor, ensure_env_dir
from engine.sources import Effective
from engine.verdict import decode
from replay.recorded import RecordedExecutor, identity_key
from replay.select import Selected

if TYPE_CHECKING:
    from replay.sandbox import SandboxExecutor

__all__ = ["Answers", "How", "Policy"]

How = list[tuple[str, str]]  # (hook_id, "reused" | "executed" | "not_evaluated")
_LLM_TYPES = frozenset({"prompt", "agent"})
_EXEC_TYPES = frozenset({"command", "http"})


@dataclass(frozen=True, slots=True)
class Policy:
    """How hooks are answered (the module table) and what a replay stores."""

    reuse: Literal["unchanged", "none"] = "unchanged"
    exec: Literal["sandbox", "allow", "deny"] = "sandbox"
    llm: Literal["recorded", "live"] = "recorded"
    samples: int = 1
    posture: Posture | None = None
    store: Literal["changed", "all", "none"] = "changed"

    def describe(self) -> dict[str, Any]:
        """The policy as it enters the replay digest (``store`` does not change results)."""
        llm = f"samples={self.samples}" if self.samples > 1 else self.llm
        return {"reuse": self.reuse, "exec": self.exec, "llm": llm, "posture": self.posture}


class Answers:
    """Answers the hooks of replayed events according to a Policy."""

    def __init__(
        self,
        policy: Policy,
        *,
        workdir: str | None = None,
        executors: dict[str, Executor] | None = None,
        concurrency: int = 32,
        hidden: tuple[str, ...] = (),
    ) -> None:
        self.policy = policy
        self.hidden = hidden  # paths a sandboxed hook must not see (the data dir)
        self.workdir = workdir
        self.concurrency = max(1, concurrency)
        self._slots: asyncio.Semaphore | None = None
        self.python = PythonExecutor()
        self.missing = MissingExecutor()
        self.llm_stats: dict[str, Counter[str]] = {}
        self.sandbox: str | None = None
        self.spawned = 0
        self._given = dict(executors or {})
        self._executors: dict[str, Executor] = {}
        self._sandbox: SandboxExecutor | None = None
        self._warming: asyncio.Task[None] | None = None
        self._sel: Selected | None = None  # the event being answered (`begin`)
        self._how: How = []
        self._rec: RecordedExecutor | None = None

    def executor(self, kind: str) -> Executor:
        """The executor of a hook type (created on first use)."""
        ex = self._executors.get(kind)
        if ex is None:
            ex = self._executors[kind] = self._given.get(kind) or self._make(kind)
        return ex

    def _make(self, kind: str) -> Executor:
        if kind == "command" and self.policy.exec == "sandbox":
            from replay.sandbox import SandboxExecutor

            sandbox = self._sandbox = SandboxExecutor(
                concurrency=self.concurrency, hidden=self.hidden
            )
            return sandbox
        if kind == "command":
            from engine.executors.command import CommandExecutor

            return CommandExecutor(workdir=self.workdir)
        if kind == "http":
            from engine.executors.http import HttpExecutor

            return HttpExecutor()
        if kind == "agent":
            return self.executor("prompt")  # one model client for both
        if kind == "prompt":
            from engine.executors.llm import LlmExecutor

            return LlmExecutor()
        return self.missing

    def warm_up(self, *settings: Effective | None) -> None:
        """Start the sandbox helper in the background when the settings have command hooks
        that may run in it: its start (~0.15 s) then overlaps the job's first reads instead
        of holding back the first hooks. A replay whose command hooks are all answered from
        the log starts it for nothing."""
        if self.policy.exec != "sandbox" or self._warming is not None:
            return
        if not any(e is not None and _has_commands(e) for e in settings):
            return
        ex = self.executor("command")
        if ex is self._sandbox and self._sandbox is not None:
            self._warming = asyncio.get_running_loop().create_task(self._sandbox.warm_up())

    async def aclose(self) -> None:
        """Close the executors this object created; count the sandbox's spawns."""
        if self._warming is not None:
            await self._warming
        if self._sandbox is not None and self._sandbox.spawned:
            self.sandbox = self._sandbox.network  # reported only when hooks ran in it
        for ex in {id(e): e for e in self._executors.values()}.values():
            spawned = getattr(ex, "spawned", None)
            if isinstance(spawned, int):
                self.spawned += spawned
            if any(ex is g for g in self._given.values()):
                continue
            close: Callable[[], Coroutine[Any, Any, None]] | None = getattr(ex, "aclose", None)
            if close is not None:
                await close()
        self._executors.clear()

    def begin(self, sel: Selected, how: How) -> None:
        """Answer the hooks of this event next (the driver calls `answer` at once, inline)."""
        self._sel = sel
        self._how = how
        self._rec = None

    def answer(self, inv: Invocation) -> RawResult | Coroutine[Any, Any, RawResult] | None:
        """The answerer of `engine.run.Engine.drive`: an answer now, a coroutine that
        answers, or None: not evaluated.

        The event's RecordedExecutor is made on first need (it decodes the stored runs,
        which events answered without the log never pay for).
        """
        how = self._how
        kind = inv.identity.type
        hid = inv.hook_id or identity_key(inv.identity)
        if kind == "python":
            how.append((hid, "executed"))
            quick = self.python.call_sync(inv)
            return quick if quick is not None else self.python.run(inv)
        llm = kind in _LLM_TYPES
        if self.policy.llm == "recorded" if llm else self.policy.reuse == "unchanged":
            recorded = self._rec
            if recorded is None:
                sel = self._sel
                assert sel is not None, "Answers.begin first"
                profile: Profile = "legacy" if sel.base.profile == "legacy" else "current"
                recorded = self._rec = RecordedExecutor(sel.runs(), profile=profile)
            found = recorded.answer(inv)
            if found is not None:
                how.append((hid, "reused"))
                return found
            if llm:
                how.append((hid, "not_evaluated"))
                return None
        if llm:
            how.append((hid, "executed"))
            return self._limited(self._ask(inv))
        if kind not in _EXEC_TYPES:
            how.append((hid, "executed"))
            return self.missing.run(inv)
        if self.policy.exec == "deny" or (self.policy.exec == "sandbox" and kind == "http"):
            how.append((hid, "not_evaluated"))
            return None
        how.append((hid, "executed"))
        if self.policy.exec == "allow":
            ensure_env_dir(inv)  # as `engine.run.Engine.answer` does
        ex = self.executor(kind)
        return ex.run(inv) if ex is self._sandbox else self._limited(ex.run(inv))

    async def run(self, inv: Invocation) -> RawResult:
        """The `Executor` protocol: `answer`, awaited; LookupError when not evaluated."""
        got = self.answer(inv)
        if got is None:
            raise LookupError(f"replay policy: hook {inv.name} is not evaluated")
        return got if isinstance(got, RawResult) else await got

    async def _limited(self, answer: Coroutine[Any, Any, RawResult]) -> RawResult:
        """Await `answer` in one of the ``concurrency`` slots."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        async with self._slots:
            return await answer

    async def _ask(self, inv: Invocation) -> RawResult:
        """Ask an LLM hook once, or `samples` times and keep the majority verdict."""
        ex = self.executor(inv.identity.type)
        n = max(1, self.policy.samples)
        if n == 1:
            return await ex.run(inv)
        answers = await asyncio.gather(*(ex.run(inv) for _ in range(n)))
        verdicts = [decode(inv, a).outcome for a in answers]
        counts = Counter(verdicts)
        top = max(counts.values())
        winner = next(v for v in verdicts if counts[v] == top)  # ties: the earliest sample
        stats = self.llm_stats.setdefault(identity_key(inv.identity), Counter())
        stats["asked"] += 1
        stats["samples"] += n
        stats["unstable"] += len(counts) > 1
        stats["minority"] += n - top
        return answers[verdicts.index(winner)]


def _has_commands(eff: Effective) -> bool:
    return any(e.hook.type == "command" for entries in eff.entries.values() for e in entries)
