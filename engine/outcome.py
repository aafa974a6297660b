"""The Outcome record of an Evaluation: the decision, the runs, and the rules that decided it.

Rules of this file: pure; the hash fields are set by the log, not here. Besides the
aggregation's own rules, an outcome names the managed HTTP ceiling where it refused what
Claude Code would allow (``managed-http-url-ceiling``, ``managed-http-env-ceiling``).

Example:
    >>> to_outcome.__name__
    'to_outcome'
"""

from __future__ import annotations

from engine.executors.headers import refused_by_policy
from engine.executors.urls import url_allowed
from engine.flow import Evaluation
from engine.records import ENGINE_VERSION, HookEvent, Outcome
from engine.sources import Effective

__all__ = ["to_outcome"]


def to_outcome(
    event: HookEvent, ev: Evaluation, eff: Effective, *, replay_id: str | None = None
) -> Outcome:
    """Build the Outcome record of an Evaluation (hash fields are set by the log)."""
    d = ev.decision
    return Outcome(  # positionally, in field order (see `Outcome`): 7x faster than keywords
        event,
        eff.settings_id,
        ENGINE_VERSION,
        ev.posture,
        ev.profile,
        d.blocked,
        d.decision,
        d.reason,
        d.updated_input,
        list(d.additional_context),
        list(d.system_messages),
        d.continue_,
        d.stop_reason,
        dict(d.specific),
        list(ev.runs),
        list(d.errors),
        [*d.rules, *_ceiling_rules(ev, eff)],
        replay_id,
    )


def _ceiling_rules(ev: Evaluation, eff: Effective) -> list[str]:
    """The managed HTTP ceiling's rules, where it refused what Claude Code would allow."""
    if eff.uncapped_http_urls is None and eff.uncapped_http_env is None:
        return []
    out: list[str] = []
    for run in ev.runs:
        if run.hook.type != "http":
            continue
        if (
            eff.uncapped_http_urls is not None
            and run.error_kind == "url_not_allowed"
            and run.hook.url is not None
            and url_allowed(run.hook.url, eff.uncapped_http_urls)
        ):
            out.append("managed-http-url-ceiling")
        if eff.uncapped_http_env is not None and any(
            var in eff.uncapped_http_env for var in refused_by_policy(run.stderr)
        ):
            out.append("managed-http-env-ceiling")
    return list(dict.fromkeys(out))
