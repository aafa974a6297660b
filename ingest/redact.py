"""Redaction before anything leaves: secrets replaced by a keyed HMAC token.

Rules of this file:
- Pure: text in, text out. The key is given by the caller (the CLI keeps one per data dir).
- A secret becomes ``[REDACTED:<rule>:<hmac>]`` where ``<hmac>`` is the first 16 hex digits
  of HMAC-SHA256(key, secret): the same secret gives the same token everywhere the key is
  the same, so a SOC can still see that two commands used one credential, and without the
  key a short password cannot be guessed back from its token.
- A pattern with a capturing group redacts the first group only (the secret after
  ``--password=``); one without redacts the whole match.
- The well-known token formats below are on unless the caller turns them off.

Example:
    >>> r = Redactor(key=b"k")
    >>> r.text("id AKIAABCDEFGHIJKLMNOP")[:28]
    'id [REDACTED:aws_access_key:'
    >>> r.text("a AKIAABCDEFGHIJKLMNOP")[2:] == r.text("b AKIAABCDEFGHIJKLMNOP")[2:]
    True
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import ahocorasick_rs
import msgspec

from engine.records import Outcome

__all__ = ["DEFAULT_PATTERNS", "Redactor", "parse_pattern", "redact_outcome"]

DEFAULT_PATTERNS: dict[str, str] = {
    "private_key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "slack_token": r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "openai_key": r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "stripe_key": r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "bearer": r"(?i)\b(?:authorization:\s*)?bearer\s+([A-Za-z0-9._~+/-]{12,}=*)",
    "url_password": r"://[^/\s:@]+:([^@\s/\[][^@\s/]*)@",
    "password_arg": (
        r"(?i)(?:--?(?:password|passwd|token|api[-_]?key|secret|client[-_]secret)[= ]"
        r"|\b(?:password|passwd|pwd|secret|token|api[-_]?key|aws_secret_access_key)\s*[=:]\s*)"
        r"['\"]?([^\s'\"&;\[][^\s'\"&;]{3,})"
    ),
}


def parse_pattern(spec: str) -> tuple[str, str]:
    """``NAME=REGEX`` -> (name, regex), checked; raises ValueError naming what is wrong.

    Example:
        >>> parse_pattern("ticket=TKT-[0-9]{6}")
        ('ticket', 'TKT-[0-9]{6}')
    """
    name, sep, regex = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", name):
        raise ValueError(
            f"redaction pattern {spec[:40]!r}: expected NAME=REGEX, NAME [A-Za-z0-9_-]"
        )
    try:
        compiled = re.compile(regex)
    except re.error as e:
        raise ValueError(f"redaction pattern {name}: invalid regex: {e}") from e
    if compiled.match(""):
        raise ValueError(f"redaction pattern {name}: matches the empty string")
    return name, regex


# Literal strings one of which every match of a built-in pattern contains (lower case for
# the case-insensitive ones): a rule's regex runs only on text holding one, which keeps a
# secret-free string at a few substring tests instead of a dozen regex scans.
_NEEDLES: dict[str, tuple[tuple[str, ...], bool]] = {
    "private_key": (("PRIVATE KEY-----",), False),
    "aws_access_key": (("AKIA", "ASIA"), False),
    "github_token": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    "slack_token": (("xox",), False),
    "anthropic_key": (("sk-ant-",), False),
    "openai_key": (("sk-",), False),
    "google_api_key": (("AIza",), False),
    "stripe_key": (("k_live_", "k_test_"), False),
    "jwt": (("eyJ",), False),
    "bearer": (("bearer",), True),
    "url_password": (("@",), False),
    "password_arg": (("pass", "pwd", "secret", "token", "api"), True),
}


def _minimal(needles: set[str]) -> tuple[str, ...]:
    """`needles` without those holding another one ("sk-ant-" holds "sk-")."""
    return tuple(sorted(n for n in needles if not any(m != n and m in n for m in needles)))


@dataclass(frozen=True)
class _Rule:
    name: str
    regex: re.Pattern[str]
    needles: tuple[str, ...] | None  # None: always run (an operator's own pattern)
    lower: bool

    def may_apply(self, text: str, lowered: str) -> bool:
        if self.needles is None:
            return True
        hay = lowered if self.lower else text
        return any(n in hay for n in self.needles)


@dataclass
class Redactor:
    """Replaces secrets in text by HMAC tokens (see the module docstring)."""

    key: bytes
    patterns: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PATTERNS))
    _rules: list[_Rule] = field(init=False, repr=False)
    _opaque: bool = field(init=False, repr=False)
    _exact: tuple[str, ...] = field(init=False, repr=False)
    _folded: tuple[str, ...] = field(init=False, repr=False)
    _any: ahocorasick_rs.AhoCorasick | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rules = []
        for name, p in self.patterns.items():
            needles, lower = _NEEDLES.get(name, (None, False))
            if DEFAULT_PATTERNS.get(name) != p:  # a redefined built-in name: no shortcut
                needles, lower = None, False
            self._rules.append(_Rule(name, re.compile(p), needles, lower))
        # All rules' literals, the exact ones apart from the case-folded ones, and one
        # automaton over all of them lower-cased: `clear` is then one pass over the text
        # (an exact literal in a text is, lower-cased, in the lower-cased text), and the
        # literals are tested one by one only when the automaton found one.
        self._exact = _minimal(
            {n for r in self._rules if r.needles and not r.lower for n in r.needles}
        )
        self._folded = _minimal(
            {n for r in self._rules if r.needles and r.lower for n in r.needles}
        )
        # (Sound because every built-in literal is ASCII: test_siem_formats holds them to it.)
        every = sorted({n.lower() for n in (*self._exact, *self._folded)})
        self._any = ahocorasick_rs.AhoCorasick(every) if every else None
        self._opaque = any(r.needles is None for r in self._rules)

    @classmethod
    def default(cls) -> Redactor:
        """The well-known patterns with a random key (tokens compare equal in this process).

        Example:
            >>> Redactor.default().text("no secret here")
            'no secret here'
        """
        global _DEFAULT
        if _DEFAULT is None:  # compiled once: a view is built per outcome
            _DEFAULT = cls(key=_PROCESS_KEY)
        return _DEFAULT

    @classmethod
    def build(cls, key: bytes, extra: list[tuple[str, str]], *, defaults: bool = True) -> Redactor:
        """The default patterns (unless `defaults` is false) plus `extra` (name, regex).

        Example:
            >>> Redactor.build(b"k", [("t", "TKT-[0-9]+")], defaults=False).text("TKT-1")[:12]
            '[REDACTED:t:'
        """
        patterns = dict(DEFAULT_PATTERNS) if defaults else {}
        patterns.update(extra)
        return cls(key=key, patterns=patterns)

    def token(self, rule: str, secret: str) -> str:
        digest = hmac.new(self.key, secret.encode("utf-8", "replace"), hashlib.sha256)
        return f"[REDACTED:{rule}:{digest.hexdigest()[:16]}]"

    def clear(self, value: str) -> bool:
        """True when no rule can match anywhere in `value`: none of the built-in rules'
        literals occurs in it and there is no operator pattern (those have no literal).

        Example:
            >>> Redactor(key=b"k").clear("ls -la"), Redactor(key=b"k").clear("PASSWORD=x")
            (True, False)
        """
        if self._opaque:
            return False
        if self._any is None:
            return True
        lowered = value.lower()
        try:
            if not self._any.find_matches_as_indexes(lowered):
                return True  # no literal, in any case: the usual answer, in one pass
        except UnicodeError:  # a lone surrogate cannot be handed over as UTF-8
            pass
        return not (any(n in value for n in self._exact) or any(n in lowered for n in self._folded))

    def may_match(self, value: str) -> bool:
        """Whether `value` may hold a secret (one scan; False means no pattern matches).

        Example:
            >>> Redactor(key=b"k").may_match("ls -la")
            False
        """
        lowered = value.lower()
        return any(
            r.may_apply(value, lowered) and r.regex.search(value) is not None for r in self._rules
        )

    def text(self, value: str) -> str:
        """`value` with every secret replaced by its token."""
        lowered = value.lower()
        for rule in self._rules:
            if rule.may_apply(value, lowered):
                value = rule.regex.sub(functools.partial(self._replace, rule.name), value)
        return value

    def _replace(self, rule: str, m: re.Match[str]) -> str:
        whole = m.group(0)
        if m.re.groups == 0 or m.group(1) is None:
            return self.token(rule, whole)
        start, end = m.start(1) - m.start(0), m.end(1) - m.start(0)
        return whole[:start] + self.token(rule, m.group(1)) + whole[end:]


_PROCESS_KEY = secrets.token_bytes(32)
_DEFAULT: Redactor | None = None


def redact_outcome(o: Outcome, r: Redactor) -> Outcome:
    """`o` with every secret `r` finds replaced by its token, for a log that must not store
    them (``hookaudit worker --redact-log``): the agent's hook input (each JSON string, keys
    included, re-encoded; text that is not JSON as a whole), the reason, messages, errors, the
    updated input, the event-specific output and each hook's stdout, stderr, message and output. Ids, times, decisions
    and hook identities are kept, so dedup, chains and queries work as before. `o` itself is
    returned when nothing needs redacting (one literal scan).

    Example:
        >>> from engine.records import new_event
        >>> ev = new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash",
        ...     "tool_input": {"command": "export K=AKIAABCDEFGHIJKLMNOP"}})
        >>> out = redact_outcome(Outcome(event=ev, settings_id="s"), Redactor(key=b"k"))
        >>> "AKIA" in out.event.payload, "[REDACTED:aws_access_key:" in out.event.payload
        (False, True)
    """
    runs_text = [f"{h.stdout}\n{h.stderr}\n{h.message or ''}" for h in o.runs]
    outputs = [_json.encode(h.output).decode() for h in o.runs if h.output]
    every = [o.event.payload, o.reason or "", *o.system_messages, *o.additional_context]
    every += [*o.errors, *runs_text, *outputs, _json.encode(o.updated_input).decode()]
    every.append(_json.encode(o.specific).decode())
    if r.clear("\n".join(every)) and "\\u" not in o.event.payload:
        return o
    ev = o.event
    try:
        payload = _json.encode(_tree(_json_dec.decode(ev.payload), r)).decode()
    except (msgspec.DecodeError, UnicodeError, RecursionError):
        payload = r.text(ev.payload)
    runs = [
        msgspec.structs.replace(
            h,
            stdout=r.text(h.stdout),
            stderr=r.text(h.stderr),
            message=r.text(h.message) if h.message else h.message,
            output=_tree(h.output, r) if h.output else h.output,
        )
        for h in o.runs
    ]
    return msgspec.structs.replace(
        o,
        event=msgspec.structs.replace(ev, payload=payload),
        reason=r.text(o.reason) if o.reason else o.reason,
        system_messages=[r.text(m) for m in o.system_messages],
        additional_context=[r.text(m) for m in o.additional_context],
        errors=[r.text(e) for e in o.errors],
        updated_input=_tree(o.updated_input, r) if o.updated_input else o.updated_input,
        specific=_tree(o.specific, r),
        runs=runs,
    )


def _tree(value: Any, r: Redactor) -> Any:
    if isinstance(value, str):
        return r.text(value)
    if isinstance(value, dict):
        return {r.text(str(k)): _tree(v, r) for k, v in value.items()}
    if isinstance(value, list):
        return [_tree(v, r) for v in value]
    return value


_json = msgspec.json.Encoder()
_json_dec = msgspec.json.Decoder()
