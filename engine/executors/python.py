"""In-process Python hooks: ``{"type": "python", "callable": "pkg.module:function"}``.

Rules of this file:
- The callable receives the event payload (a dict) and returns the JSON output shape a
  command hook would print (a dict) or None. It may be sync or async.
- An exception, a wrong return type or a timeout is an *outcome* (error), never raised.
- Async callables are bounded by the hook timeout. A sync callable runs inline (the
  fast path: no thread, no task) and cannot be pre-empted; when it overruns its
  timeout the run is reported as a timeout error after it returns.

Example:
    >>> PythonExecutor.resolve("json:dumps").__name__
    'dumps'
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from engine.effects import Invocation, RawResult
from engine.settings import PythonHook

__all__ = ["PythonExecutor"]


class PythonExecutor:
    """Runs python hooks in this process."""

    def __init__(self) -> None:
        # spec -> (callable, whether it is an ``async def``): asked once, not per event.
        self._cache: dict[str, tuple[Callable[..., Any], bool]] = {}

    @staticmethod
    def resolve(spec: str) -> Callable[..., Any]:
        """Import ``module:function`` or ``/abs/file.py:function``.

        Raises ImportError/AttributeError/TypeError/OSError.
        """
        module_name, _, attr = spec.rpartition(":")
        obj: Any
        if module_name.endswith(".py"):
            obj = _load_file(module_name)
        else:
            obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{spec} is not callable")
        return obj  # type: ignore[no-any-return]

    def _get(self, spec: str) -> tuple[Callable[..., Any], bool]:
        hit = self._cache.get(spec)
        if hit is None:
            fn = self.resolve(spec)
            hit = self._cache[spec] = (fn, inspect.iscoroutinefunction(fn))
        return hit

    def is_sync(self, inv: Invocation) -> bool:
        """Whether `call_sync` will answer this hook (it is not an ``async def``).

        A callable that cannot be imported counts as sync: `call_sync` answers it with
        an error at once, without running anything.
        """
        hook = inv.hook
        assert isinstance(hook, PythonHook)
        try:
            _, is_async = self._get(hook.callable)
        except Exception:
            return True
        return not is_async

    def call_sync(self, inv: Invocation) -> RawResult | None:
        """Run a sync callable inline; None when the callable is async (use `run`)."""
        hook = inv.hook
        assert isinstance(hook, PythonHook)
        start = time.perf_counter()
        try:
            fn, is_async = self._get(hook.callable)
        except Exception as exc:  # import errors are the hook's failure, not ours
            return _error("python_import", f"{hook.callable}: {type(exc).__name__}: {exc}", start)
        if is_async:
            return None
        try:
            value = fn(inv.payload)
        except Exception as exc:
            return _error("python_exception", f"{type(exc).__name__}: {exc}", start)
        # None and plain dicts, the usual answers, are never awaitable: skip `inspect`.
        if value is not None and type(value) is not dict and inspect.isawaitable(value):
            # Calling it again through `run` would run its side effects twice.
            if inspect.iscoroutine(value):
                value.close()
            return _error(
                "python_bad_return",
                f"{hook.callable} returned an awaitable: declare async hooks with `async def`",
                start,
            )
        return _result(value, start, inv.timeout)

    async def run(self, inv: Invocation) -> RawResult:
        hook = inv.hook
        assert isinstance(hook, PythonHook)
        quick = self.call_sync(inv)
        if quick is not None:
            return quick
        start = time.perf_counter()
        fn, _ = self._get(hook.callable)
        try:
            value = await asyncio.wait_for(fn(inv.payload), timeout=inv.timeout)
        except TimeoutError:
            return _error("timeout", f"python hook timed out after {inv.timeout:g}s", start)
        except Exception as exc:
            return _error("python_exception", f"{type(exc).__name__}: {exc}", start)
        return _result(value, start, None)


def _load_file(path: str) -> ModuleType:
    """Load a policy module from a file without touching sys.path."""
    name = "hookaudit_policy_" + hashlib.sha256(path.encode()).hexdigest()[:12]
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _error(kind: str, message: str, start: float) -> RawResult:
    return RawResult(
        exit_code=None,
        error_kind=kind,
        error=message,
        stderr=message,
        duration_ms=(time.perf_counter() - start) * 1000,
    )


def _result(value: object, start: float, timeout: float | None) -> RawResult:
    elapsed = (time.perf_counter() - start) * 1000
    if timeout is not None and elapsed > timeout * 1000:
        return RawResult(
            error_kind="timeout",
            error=f"python hook ran {elapsed:.0f} ms, over its {timeout:g}s timeout",
            duration_ms=elapsed,
        )
    if value is None:
        return RawResult(exit_code=0, duration_ms=elapsed)
    if not isinstance(value, dict):
        return RawResult(
            error_kind="python_bad_return",
            error=f"python hook returned {type(value).__name__}, expected dict or None",
            duration_ms=elapsed,
        )
    return RawResult(exit_code=0, output=value, duration_ms=elapsed)
