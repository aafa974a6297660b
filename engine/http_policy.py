"""The merge of the HTTP hook policy: `allowedHttpHookUrls` and `httpHookAllowedEnvVars`.

Split from `engine.sources` at its seam: which URLs and header variables every scope's
settings allow together. `http_policy` is hookaudit's merge (a managed list is a ceiling, a
deliberate deviation, README "Deviations from Claude Code"); `claude_http_policy` is Claude
Code's (a union of every scope), kept so an outcome can say where the ceiling refused.
Pure: sources in, lists out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from engine.executors.ssrf import narrow_patterns

if TYPE_CHECKING:
    from engine.sources import Source

__all__ = ["claude_http_policy", "http_policy"]


def _union(lists: Iterable[list[str] | None]) -> list[str] | None:
    out: list[str] | None = None
    for values in lists:
        if values is not None:
            out = list(dict.fromkeys([*(out or []), *values]))
    return out


def http_policy(sources: Sequence[Source]) -> tuple[list[str] | None, list[str] | None]:
    """`allowedHttpHookUrls` and `httpHookAllowedEnvVars` after merging (pure).

    Without a managed list, the lists of every scope are a union, as in Claude Code. A
    managed list is a ceiling (a deliberate, stricter deviation: in Claude Code a
    repository's project settings could widen it): the other scopes' union can only
    narrow it, a URL pattern surviving only where it lies within the other side
    (`narrow_patterns`), an env var only when both sides name it.

    >>> from engine.settings import parse_settings
    >>> from engine.sources import Source
    >>> m = Source("managed", "m.json", parse_settings(
    ...     {"allowedHttpHookUrls": ["https://*.corp.example/*"]}, "m.json"), "/")
    >>> p = Source("project", "p.json", parse_settings(
    ...     {"allowedHttpHookUrls": ["https://evil.example/*"]}, "p.json"), "/p")
    >>> http_policy([m, p])
    ([], None)
    """
    managed = [s for s in sources if s.scope == "managed"]
    others = [s for s in sources if s.scope != "managed"]
    urls = _union(s.settings.allowedHttpHookUrls for s in others)
    env = _union(s.settings.httpHookAllowedEnvVars for s in others)
    url_cap = _union(s.settings.allowedHttpHookUrls for s in managed)
    env_cap = _union(s.settings.httpHookAllowedEnvVars for s in managed)
    if url_cap is not None:
        urls = url_cap if urls is None else narrow_patterns(url_cap, urls)
    if env_cap is not None:
        env = env_cap if env is None else [v for v in env if v in env_cap]
    return urls, env


def claude_http_policy(
    sources: Sequence[Source],
) -> tuple[list[str] | None, list[str] | None]:
    """The two lists as Claude Code 2.1.332 merges them: a union of every scope, managed
    included (what `http_policy`'s ceiling deviates from).

    >>> from engine.settings import parse_settings
    >>> from engine.sources import Source
    >>> m = Source("managed", "m.json", parse_settings({"allowedHttpHookUrls": ["https://a/*"]},
    ...     "m.json"), "/")
    >>> p = Source("project", "p.json", parse_settings({"allowedHttpHookUrls": ["https://b/*"]},
    ...     "p.json"), "/p")
    >>> claude_http_policy([m, p])
    (['https://a/*', 'https://b/*'], None)
    """
    urls = _union(s.settings.allowedHttpHookUrls for s in sources)
    env = _union(s.settings.httpHookAllowedEnvVars for s in sources)
    return urls, env
