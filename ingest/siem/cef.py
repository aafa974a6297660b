"""CEF (ArcSight Common Event Format, revision 25) lines of an outcome.

Rules of this file:
- Pure: a `View` in, one line of text out, never containing CR or LF.
- Header fields escape ``\\`` and ``|`` (and have CR/LF replaced by a space: the header
  cannot hold a line break); extension values escape ``\\``, ``=``, CR (``\\r``) and LF
  (``\\n``). Keys are fixed names, never taken from input.
- Each value is cut to the length the CEF key dictionary gives it, before escaping.
- Severity is the shared 0-10 scale of `view.severity`.

Example:
    >>> escape_header("a|b\\\\c"), escape_ext("k=v\\nx")
    ('a\\\\|b\\\\\\\\c', 'k\\\\=v\\\\nx')
"""

from __future__ import annotations

from engine.records import ENGINE_VERSION
from ingest.siem.view import View, file_name, severity

__all__ = ["escape_ext", "escape_header", "to_cef"]

_HEADER = str.maketrans({"\\": "\\\\", "|": "\\|", "\r": " ", "\n": " "})
_EXT = str.maketrans({"\\": "\\\\", "=": "\\=", "\r": "\\r", "\n": "\\n"})

# CEF key -> maximum length (characters) from the CEF key dictionary.
_LIMITS = {
    "msg": 1023,
    "request": 1023,
    "filePath": 1023,
    "fname": 1023,
    "suser": 1023,
    "shost": 1023,
    "act": 63,
    "outcome": 63,
    "cat": 1023,
    "externalId": 40,
    "reason": 1023,
}
_CS_LIMIT = 4000


def escape_header(value: str) -> str:
    """A CEF header field: ``\\`` and ``|`` escaped, line breaks made spaces."""
    return value.translate(_HEADER)


def escape_ext(value: str) -> str:
    """A CEF extension value: ``\\``, ``=``, CR and LF escaped."""
    return value.translate(_EXT)


def _cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def to_cef(v: View) -> str:
    """The CEF line of one outcome (no syslog header: the transport adds its own)."""
    sev = severity(v.decision, v.blocked, bool(v.errors))
    subject = v.tool or v.event
    action = "blocked" if v.blocked else v.decision
    header = [
        "CEF:0",
        "hookaudit",
        "hookaudit",
        ENGINE_VERSION,
        _cut(f"{v.event}:{action}", 1023),
        _cut(f"{subject} {action}", 512),
        str(sev),
    ]
    ext: list[tuple[str, str]] = [
        ("rt", str(v.time_ms)),
        ("externalId", v.event_id),
        ("cat", v.kind),
        ("act", action),
        ("outcome", "failure" if v.blocked else "success"),
        ("suser", v.user),
        ("shost", v.host),
        ("cn1", str(v.seq)),
        ("cn1Label", "streamSequence"),
        ("cs1", v.session_id),
        ("cs1Label", "sessionId"),
        ("cs3", v.settings_id),
        ("cs3Label", "settingsId"),
    ]
    if v.tool:
        ext += [("cs2", v.tool), ("cs2Label", "tool")]
    if v.rules:
        ext += [("cs4", v.rules[0]), ("cs4Label", "rule")]
    if v.command is not None:
        ext += [("cs5", v.command), ("cs5Label", "commandLine")]
    if v.tool_use_id:
        ext += [("cs6", v.tool_use_id), ("cs6Label", "toolUseId")]
    if v.file_path:
        ext += [("filePath", v.file_path), ("fname", file_name(v.file_path))]
    if v.url:
        ext += [("request", v.url)]
    if v.reason:
        ext += [("reason", v.reason), ("msg", v.reason)]
    fields = " ".join(f"{k}={escape_ext(_cut(val, _LIMITS.get(k, _CS_LIMIT)))}" for k, val in ext)
    return "|".join(escape_header(h) for h in header) + "|" + fields
