"""CEF (ArcSight Common Event Format, revision 25) lines of an outcome.

Rules of this file:
- Pure: a `View` in, one line of text out, never containing CR or LF.
- Header fields escape ``\\`` and ``|`` (and have CR/LF replaced by a space: the header
  cannot hold a line break); extension values escape ``\\``, ``=``, CR (``\\r``) and LF
  (``\\n``). Keys are fixed names, never taken from input.
- Each value is cut to the length the CEF key dictionary gives it, before escaping.
- Severity is the shared 0-10 scale of `kinds.severity`.

Example:
    >>> escape_header("a|b\\\\c"), escape_ext("k=v\\nx")
    ('a\\\\|b\\\\\\\\c', 'k\\\\=v\\\\nx')
"""

from __future__ import annotations

from engine.records import ENGINE_VERSION
from ingest.siem.kinds import file_name, severity
from ingest.siem.view import View

__all__ = ["escape_ext", "escape_header", "to_cef"]

_HEADER = str.maketrans({"\\": "\\\\", "|": "\\|", "\r": " ", "\n": " "})
_EXT = str.maketrans({"\\": "\\\\", "=": "\\=", "\r": "\\r", "\n": "\\n"})

# Maximum lengths (characters) from the CEF key dictionary: 1023 for msg, request,
# filePath, fname, suser, shost, reason; 63 for act; 40 for externalId; 4000 for csN.
_CS_LIMIT = 4000


def escape_header(value: str) -> str:
    """A CEF header field: ``\\`` and ``|`` escaped, line breaks made spaces."""
    if "\\" in value or "|" in value or "\r" in value or "\n" in value:
        return value.translate(_HEADER)
    return value


def escape_ext(value: str) -> str:
    """A CEF extension value: ``\\``, ``=``, CR and LF escaped."""
    # Four substring tests are far cheaper than a translate through a dict, and most
    # values need no escape at all.
    if "\\" in value or "=" in value or "\r" in value or "\n" in value:
        return value.translate(_EXT)
    return value


def _cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _x(value: str, limit: int = _CS_LIMIT) -> str:
    """An extension value, cut then escaped (`escape_ext`'s test inline: eleven values an
    outcome, most of which need nothing)."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    if "\\" in value or "=" in value or "\r" in value or "\n" in value:
        return value.translate(_EXT)
    return value


_PREFIX = f"CEF:0|hookaudit|hookaudit|{escape_header(ENGINE_VERSION)}|"


def to_cef(v: View) -> str:
    """The CEF line of one outcome (no syslog header: the transport adds its own)."""
    sev = severity(v.decision, v.blocked, bool(v.errors))
    subject = v.tool or v.event
    # observed: nobody waited for the verdict and the call went ahead: a detection
    stopped = v.blocked and v.enforced
    action = "blocked" if stopped else "detected" if v.blocked else v.decision
    head = (
        f"{_PREFIX}{escape_header(_cut(f'{v.event}:{action}', 1023))}|"
        f"{escape_header(_cut(f'{subject} {action}', 512))}|{sev}|"
    )
    # Keys are fixed names: the line is one template, values escaped one by one.
    ext = (
        f"rt={v.time_ms} externalId={_x(v.event_id, 40)} cat={v.kind} act={_x(action, 63)} "
        f"outcome={'failure' if stopped else 'success'} suser={_x(v.user, 1023)} "
        f"shost={_x(v.host, 1023)} cn1={v.seq} cn1Label=streamSequence "
        f"cs1={_x(v.session_id)} cs1Label=sessionId cs3={_x(v.settings_id)} cs3Label=settingsId "
        f"flexString1={_x(v.decided_by, 63)} flexString1Label=decidedBy "
        f"flexString2={_x(v.agent, 63)} flexString2Label=agent"
    )
    if v.tool:
        ext += f" cs2={_x(v.tool)} cs2Label=tool"
    if v.rules:
        ext += f" cs4={_x(v.rules[0])} cs4Label=rule"
    if v.command is not None:
        ext += f" cs5={_x(v.command)} cs5Label=commandLine"
    if v.tool_use_id:
        ext += f" cs6={_x(v.tool_use_id)} cs6Label=toolUseId"
    if v.file_path:
        ext += f" filePath={_x(v.file_path, 1023)} fname={_x(file_name(v.file_path), 1023)}"
    if v.url:
        ext += f" request={_x(v.url, 1023)}"
    if v.reason:
        reason = _x(v.reason, 1023)
        ext += f" reason={reason} msg={reason}"
    return head + ext
