"""A fake executor that answers from a function or a table, like httpx's MockTransport.

Rules of this file:
- Real code, not a test helper: tests, ``--dry-run`` and examples use it.
- It never spawns, connects or sleeps. With a plain function or a table it answers
  without suspending, so it can be driven without an event loop.
- Every invocation it receives is recorded, in call order, in ``invocations``.
- A table is keyed by what identifies the hook to a person: the command of a command
  hook, the url of an http hook, the callable of a python hook, the prompt of a
  prompt/agent hook. A key it does not know is a bug in the caller's setup: it raises
  LookupError, unless a ``default`` answer was given.

Example:
    >>> import asyncio
    >>> from engine.records import HookIdentity
    >>> fake = FakeExecutor({"./check.sh": RawResult(exit_code=2, stderr="no")})
    >>> inv = Invocation(index=0, event="PreToolUse", hook=None,
    ...     identity=HookIdentity(type="command", source="project", command="./check.sh"),
    ...     source="project", matcher="Bash", timeout=60, payload={}, input_json=b"{}", cwd="/")
    >>> asyncio.run(fake.run(inv)).exit_code, [i.index for i in fake.invocations]
    (2, [0])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping

from engine.effects import Invocation, RawResult

__all__ = ["FakeExecutor", "Responder"]

Responder = Callable[[Invocation], RawResult | Awaitable[RawResult]]


class FakeExecutor:
    """Answers each hook with a RawResult chosen by a function or a table.

    Example:
        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> fake = FakeExecutor(lambda inv: RawResult(exit_code=0, stdout=inv.event))
        >>> inv = Invocation(index=0, event="Stop", hook=None,
        ...     identity=HookIdentity(type="command", source="user", command="true"),
        ...     source="user", matcher=None, timeout=1, payload={}, input_json=b"{}", cwd="/")
        >>> asyncio.run(fake.run(inv)).stdout, len(fake.invocations)
        ('Stop', 1)
    """

    def __init__(
        self,
        answers: Responder | Mapping[str, RawResult],
        *,
        default: RawResult | None = None,
    ) -> None:
        self._answers = answers
        self._default = default
        self.invocations: list[Invocation] = []

    @staticmethod
    def answer_key(inv: Invocation) -> str | None:
        """The table key of an invocation's hook: command, url, callable or prompt.

        >>> from engine.records import HookIdentity
        >>> ident = HookIdentity(type="http", source="user", url="http://x/h")
        >>> FakeExecutor.answer_key(Invocation(index=0, event="Stop", hook=None, identity=ident,
        ...     source="user", matcher=None, timeout=1, payload={}, input_json=b"{}", cwd="/"))
        'http://x/h'
        """
        i = inv.identity
        return i.command or i.url or i.callable or i.prompt

    async def run(self, inv: Invocation) -> RawResult:
        """Record the invocation and return its canned answer.

        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> fake = FakeExecutor({}, default=RawResult(exit_code=0))
        >>> inv = Invocation(index=0, event="Stop", hook=None,
        ...     identity=HookIdentity(type="command", source="user", command="x"),
        ...     source="user", matcher=None, timeout=1, payload={}, input_json=b"{}", cwd="/")
        >>> asyncio.run(fake.run(inv)).exit_code
        0
        """
        self.invocations.append(inv)
        answers = self._answers
        if isinstance(answers, Mapping):
            key = self.answer_key(inv)
            found = answers.get(key) if key is not None else None
            if found is not None:
                return found
            if self._default is not None:
                return self._default
            known = ", ".join(repr(k) for k in answers) or "none"
            raise LookupError(
                f"FakeExecutor: no answer for hook {key!r} ({inv.name}); known keys: {known}"
            )
        answer = answers(inv)
        if inspect.isawaitable(answer):
            return await answer
        return answer
