"""What `verify` finds: one `VerifyError` per problem, a `WorkerReport` per chain, the report.

Rules of this file: data only (msgspec Structs); `ingest.log.verifier` fills them.

Example:
    >>> VerifyError(file="f", line=2, record_seq=None, kind="edited", message="m").__str__()
    'f:2: m'
"""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.errors import LogCorrupt

__all__ = ["ErrorKind", "VerifyError", "VerifyReport", "WorkerReport"]

ErrorKind = Literal[
    "edited",
    "removed",
    "reordered",
    "truncated",
    "deleted",
    "hmac",
    "manifest",
    "corrupt",
    "anchor",
]


class VerifyError(msgspec.Struct, frozen=True, kw_only=True):
    """One problem: `file` is relative to `<data_dir>/log`; `line` is a line or Parquet row.

    kinds: edited (content changed), removed / reordered (chain or seq break), truncated
    (records missing at a segment's end, torn line), deleted (segment gone), hmac (a
    manifest line not signed by the key), manifest (listing inconsistent), corrupt
    (unreadable), anchor (the chain does not match a head anchored outside the host).
    """

    file: str
    line: int | None
    record_seq: int | None
    kind: ErrorKind
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        seq = "" if self.record_seq is None else f"record seq {self.record_seq}: "
        return f"{where}: {seq}{self.message}"


class WorkerReport(msgspec.Struct, kw_only=True):
    records: int = 0
    sealed: int = 0
    active: int = 0
    last_seq: int = 0
    head: str = ""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of `verify`; `first_error` is the first problem in chain order."""

    ok: bool
    records: int
    workers: dict[str, WorkerReport]
    errors: list[VerifyError]
    notes: list[str]
    hmac_checked: bool
    first_error: str | None

    def to_dict(self) -> dict[str, object]:
        """The report as plain JSON-ready data (for `hookaudit verify --format json`).

        Example:
            >>> verify(data_dir).to_dict()["ok"]
            True
        """
        data: dict[str, object] = msgspec.to_builtins(self)
        return data

    def raise_for_errors(self) -> None:
        """Raise LogCorrupt naming the first problem, if any.

        Example:
            >>> verify(data_dir).raise_for_errors()
        """
        if self.errors:
            e = self.errors[0]
            seq = "" if e.record_seq is None else f"record seq {e.record_seq}: "
            raise LogCorrupt(e.file, e.line, f"{seq}{e.message} ({len(self.errors)} problem(s))")
