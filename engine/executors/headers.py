"""Header interpolation for HTTP hooks: ``$VAR`` / ``${VAR}`` from allowed variables only.

Split from `engine.executors.ssrf`. A variable is substituted only when both the hook's
``allowedEnvVars`` and the policy allow it; others become empty. Names and values that
would split a header (CR, LF, NUL) are stripped; a header name that is not an HTTP token
is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["POLICY_LIST", "interpolate_headers", "refused_by_policy"]


# --------------------------------------------------------------------------- headers

#: How a warning names the policy list (the one `refused_by_policy` reads back).
POLICY_LIST = "the policy httpHookAllowedEnvVars"
_REFUSED = re.compile(r"\$([A-Z_][A-Z0-9_]*) is not in " + re.escape(POLICY_LIST) + ";")
_ENV_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_STRIP = str.maketrans("", "", "\r\n\x00")


def interpolate_headers(
    headers: Mapping[str, str],
    allowed_env_vars: Sequence[str] | None,
    policy_allowed: Sequence[str] | None,
    environ: Mapping[str, str],
) -> tuple[dict[str, str], list[str]]:
    """Expand ``$NAME``/``${NAME}`` in header values; return (headers, warnings).

    NAME must match ``[A-Z_][A-Z0-9_]*`` (``$name`` stays literal) and be in the hook's
    ``allowedEnvVars`` (intersected with ``httpHookAllowedEnvVars`` when that is set);
    an unlisted NAME becomes "" with a warning, an unset one becomes "". Expansion is one
    pass: a value containing ``$X`` is not expanded again. CR, LF and NUL are then removed
    from every value. Unlike Claude Code, which sends header names as written, a name that
    is not an RFC 9110 token is dropped with a warning.

    >>> interpolate_headers({"X": "${T}"}, ["T"], None, {"T": "a\\r\\nEvil: 1"})
    ({'X': 'aEvil: 1'}, [])
    """
    hook_allowed = set(allowed_env_vars or ())
    policy = None if policy_allowed is None else set(policy_allowed)
    out: dict[str, str] = {}
    warnings: list[str] = []
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            warnings.append(
                f"HTTP hook header name {name!r} is not a valid HTTP token; header dropped"
            )
            continue

        def expand(m: re.Match[str], name: str = name) -> str:
            var = m[1] or m[2]
            if var not in hook_allowed:
                where = "the hook's allowedEnvVars"
            elif policy is not None and var not in policy:
                where = POLICY_LIST
            else:
                return environ.get(var, "")
            warnings.append(
                f"HTTP hook header {name!r}: ${var} is not in {where}; replaced with an empty string"
            )
            return ""

        out[name] = _ENV_REF.sub(expand, value).translate(_STRIP)
    return out, warnings


def refused_by_policy(stderr: str) -> list[str]:
    """The variables a run's warnings (its stderr) say the policy list left empty.

    >>> _, w = interpolate_headers({"X": "$T"}, ["T"], [], {"T": "v"})
    >>> refused_by_policy("\\n".join(w))
    ['T']
    """
    return _REFUSED.findall(stderr)
