"""An executor that answers from the log, like `engine.executors.fake.FakeExecutor` over history.

Rules of this file:
- A hook is "the same hook" when its `HookIdentity` is equal (type, command/url/prompt,
  callable, matcher, `if`, timeout, source, …): `HookIdentity.key()` is the fast path, a
  field-by-field comparison the fallback (an identity stored by an older engine, which
  hashes to another key, still matches when its fields do).
- The answer is the RawResult the recorded HookRun was decoded from, rebuilt from the
  raw observations the run keeps (exit code, stdout, stderr, HTTP status, model
  exchange, python return value). Decoding it again gives the recorded verdict: an
  executor-side failure (``error_kind`` with no answer: a timeout, a spawn failure) is
  told apart from a decode-side one (a non-zero exit, a schema error) by decoding.
- Nothing is executed, awaited or read here: `answer` is a plain function, so the
  replay driver calls it inline; `run` exists to satisfy the `Executor` protocol.
- Every lookup is counted (`hits`, `misses`) so tests and reports can prove that reuse
  never executed an unchanged hook.

Example:
    >>> from engine.hook_verdict import example_invocation
    >>> from engine.records import HookRun
    >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> run = HookRun(hook=inv.identity, hook_id=inv.identity.key(), outcome="deny",
    ...     exit_code=2, stderr="no", message="no", decision="deny")
    >>> rec = RecordedExecutor([run])
    >>> rec.answer(inv).exit_code, rec.answer(inv), (rec.hits, rec.misses)
    (2, None, (1, 1))
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from engine.decode import decode
from engine.effects import Invocation, RawResult
from engine.records import HookIdentity, HookRun, Profile

__all__ = ["RecordedExecutor", "identity_key", "to_raw"]


# HookIdentity.key() hashes the identity; plans reuse identity objects, so memoise by id().
_KEYS: dict[int, tuple[HookIdentity, str]] = {}
_KEYS_LIMIT = 65536


def identity_key(identity: HookIdentity) -> str:
    """`identity.key()`, memoised for identity objects the planner keeps alive.

    >>> i = HookIdentity(type="python", source="user", callable="m:f")
    >>> identity_key(i) == i.key()
    True
    """
    hit = _KEYS.get(id(identity))
    if hit is not None and hit[0] is identity:
        return hit[1]
    key = identity.key()
    if len(_KEYS) >= _KEYS_LIMIT:
        _KEYS.clear()
    _KEYS[id(identity)] = (identity, key)
    return key


def _observed(run: HookRun, kind: str) -> RawResult:
    """The run's raw observations, as an executor that got an answer reported them."""
    return RawResult(
        exit_code=run.exit_code,
        stdout=run.stdout,
        stderr=run.stderr,
        stdout_bytes=run.stdout_bytes,
        stderr_bytes=run.stderr_bytes,
        truncated=run.truncated,
        http_status=run.http_status,
        duration_ms=run.duration_ms,
        output=run.output if kind == "python" else None,
        llm=run.llm,
        pending=run.pending,
    )


def to_raw(run: HookRun, inv: Invocation, *, profile: Profile = "current") -> RawResult:
    """Rebuild the RawResult a recorded HookRun was decoded from.

    A run without ``error_kind`` got an answer: its observations are the RawResult. A
    run with one either got no answer (the executor set ``error_kind``; the message is
    then the executor's ``error``) or an answer the decoder rejected (a non-zero exit,
    a schema error): decoding the observations tells which.

    >>> from engine.hook_verdict import example_invocation
    >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> run = HookRun(hook=inv.identity, hook_id=inv.identity.key(), outcome="error",
    ...     error_kind="timeout", message="timed out after 1 s")
    >>> to_raw(run, inv).error_kind
    'timeout'
    """
    raw = _observed(run, inv.identity.type)
    if run.error_kind is None or run.pending:
        return raw
    again = decode(inv, raw, profile=profile)
    if (again.error_kind, again.outcome, again.message) == (
        run.error_kind,
        run.outcome,
        run.message,
    ):
        return raw  # the decoder, not the executor, found the error
    # the executor found it: the same observations with its error, and no answer
    return msgspec.structs.replace(raw, error_kind=run.error_kind, error=run.message, output=None)


class RecordedExecutor:
    """Answers the hooks that ran for one recorded event with what they answered then.

    Several runs with the same identity are handed out in recorded order. `hits` and
    `misses` count the lookups; `reused` lists the hook ids answered from the log.
    """

    __slots__ = ("_by_key", "_runs", "hits", "misses", "profile", "reused")

    def __init__(self, runs: Sequence[HookRun], *, profile: Profile = "current") -> None:
        self._runs = list(runs)
        self._by_key: dict[str, list[int]] = {}
        for i, run in enumerate(self._runs):
            self._by_key.setdefault(run.hook_id, []).append(i)
        self.profile: Profile = profile
        self.hits = 0
        self.misses = 0
        self.reused: list[str] = []

    def find(self, identity: HookIdentity) -> HookRun | None:
        """The next unused recorded run of this hook, or None."""
        slots = self._by_key.get(identity_key(identity))
        if not slots:
            for key, candidates in self._by_key.items():  # an identity hashed by another version
                if candidates and self._runs[candidates[0]].hook == identity:
                    slots = self._by_key[key]
                    break
        if not slots:
            return None
        return self._runs[slots.pop(0)]

    def answer(self, inv: Invocation) -> RawResult | None:
        """The recorded answer for this invocation, or None when the hook did not run then.

        >>> RecordedExecutor([]).answer.__doc__ is not None
        True
        """
        run = self.find(inv.identity)
        if run is None:
            self.misses += 1
            return None
        self.hits += 1
        self.reused.append(run.hook_id)
        return to_raw(run, inv, profile=self.profile)

    async def run(self, inv: Invocation) -> RawResult:
        """The `Executor` protocol: the recorded answer; LookupError for an unrecorded hook."""
        found = self.answer(inv)
        if found is None:
            raise LookupError(
                f"RecordedExecutor: hook {inv.identity.type} {identity_key(inv.identity)} "
                f"({inv.name}) did not run for this event"
            )
        return found
