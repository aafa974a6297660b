"""Syslog transports: RFC 5424 messages over UDP (RFC 5426), TCP (RFC 6587 octet counting),
TLS (RFC 5425), and RELP (plain or TLS), the acknowledged one.

Rules of this file:
- `rfc5424` is pure: a `Formatted` record in, one message's bytes out. PRI uses facility 13
  (log audit); the severity follows the record's 0-10 scale. HOSTNAME and MSGID are cut to
  RFC 5424's lengths and to printable US-ASCII; the structured data element
  ``[hookaudit@32473 …]`` (32473 is the example enterprise number of RFC 5612) carries the
  event id, the stream sequence and the record uid with ``"``, ``\\`` and ``]`` escaped; the
  MSG is the record's text after a UTF-8 BOM.
- Over TCP and TLS a batch counts as accepted once it is written and drained out of the
  process (the transport's high-water mark is 1 byte): syslog has no acknowledgement, so a record in flight when the receiver dies can be lost by the receiver.
  Over UDP nothing is acknowledged at all; a message is cut to `max_datagram` bytes.
- RELP (``relp+tcp``, ``relp+tls``; librelp's protocol, rsyslog's ``imrelp``): each message
  is a numbered ``syslog`` command and counts as accepted only when the receiver's ``rsp``
  for its number says ``200``. A connection that breaks, or an answer that does not come
  within `timeout`, leaves the batch unaccepted (sent again after a back-off); any other
  status is the receiver not taking records now. So a receiver killed mid-stream loses
  nothing: what it had not acknowledged is sent again (a record it took but could not
  acknowledge may arrive twice; its ``uid`` tells).

Example:
    >>> frame(b"<110>1 - - - - - - x")
    b'20 <110>1 - - - - - - x'
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import ssl

from ingest.siem.formats import Formatted
from ingest.siem.kinds import iso_ms
from ingest.siem.sink import Delivery, Keepalive, SinkDown

__all__ = ["RelpSink", "SyslogSink", "frame", "relp_frame", "rfc5424"]

FACILITY = 13  # log audit
_NON_PRINT = re.compile(r"[^\x21-\x7e]")
_SD_ESCAPE = str.maketrans({'"': '\\"', "\\": "\\\\", "]": "\\]"})


@functools.lru_cache(maxsize=1024)  # hosts and event names repeat from record to record
def _ascii(value: str, limit: int) -> str:
    value = _NON_PRINT.sub("_", value)[:limit]
    return value or "-"


def _sd(value: str) -> str:
    if '"' in value or "\\" in value or "]" in value:
        return value.translate(_SD_ESCAPE)
    return value


def _syslog_severity(sev: int) -> int:
    return 4 if sev >= 7 else 5 if sev >= 4 else 6  # warning / notice / informational


def rfc5424(rec: Formatted, *, app: str = "hookaudit", bom: bool = True) -> bytes:
    """One RFC 5424 message (no framing) for `rec`."""
    pri = FACILITY * 8 + _syslog_severity(rec.severity)
    sd = f'[hookaudit@32473 eventId="{_sd(rec.event_id)}" seq="{rec.seq}" uid="{_sd(rec.uid)}"]'
    head = f"<{pri}>1 {iso_ms(rec.time_ms)} {_ascii(rec.host, 255)} {app} - "
    head += f"{_ascii(rec.event, 32)} {sd} "
    mark = b"\xef\xbb\xbf" if bom else b""
    return head.encode("ascii") + mark + rec.text.encode("utf-8", "replace")


def frame(message: bytes) -> bytes:
    """RFC 6587 octet counting: ``MSG-LEN SP SYSLOG-MSG``."""
    return b"%d %s" % (len(message), message)


class SyslogSink:
    """RFC 5424 over ``udp``, ``tcp`` or ``tls`` to one host and port."""

    def __init__(
        self,
        proto: str,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        max_datagram: int = 65000,
        timeout: float = 10.0,
        bom: bool = True,
    ) -> None:
        self.proto, self.host, self.port = proto, host, port
        self.name = f"syslog+{proto}://{host}:{port}"
        self.bom = bom
        self.tls = tls
        self.max_datagram = max_datagram
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._udp: asyncio.DatagramTransport | None = None

    async def _stream(self) -> asyncio.StreamWriter:
        if self._writer is not None and self._reader is not None:
            # A receiver never writes to us; EOF means it closed: reconnect before sending.
            if not self._reader.at_eof() and not self._writer.is_closing():
                return self._writer
            await self.close()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.tls if self.proto == "tls" else None,
                    server_hostname=self.host if self.proto == "tls" else None,
                ),
                self.timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise SinkDown(f"{self.name}: cannot connect: {e or type(e).__name__}") from e
        # A drain then returns only once the batch left the process (handed to the kernel,
        # which still sends it if we die); by default it returns with up to 64 KiB still in
        # our buffers (with TLS, in the SSL layer), which a SIGKILL would lose after the ack.
        # 1, not 0: an SSL transport on 3.11 never resumes writing with a high-water mark of 0.
        writer.transport.set_write_buffer_limits(high=1)
        self._reader, self._writer = reader, writer
        return writer

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        if self.proto == "udp":
            return await self._send_udp(batch)
        writer = await self._stream()
        data = b"".join(frame(rfc5424(r, bom=self.bom)) for r in batch)
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), self.timeout)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            await self.close()
            raise SinkDown(f"{self.name}: write failed: {e or type(e).__name__}") from e
        return Delivery()

    async def _send_udp(self, batch: list[Formatted]) -> Delivery:
        if self._udp is None:
            loop = asyncio.get_running_loop()
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    asyncio.DatagramProtocol, remote_addr=(self.host, self.port)
                )
            except OSError as e:
                raise SinkDown(f"{self.name}: {e}") from e
        for r in batch:
            msg = rfc5424(r, bom=self.bom)
            if len(msg) > self.max_datagram:
                msg = msg[: self.max_datagram].decode("utf-8", "ignore").encode("utf-8")
            self._udp.sendto(msg)
        return Delivery()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                await asyncio.wait_for(self._writer.wait_closed(), 2.0)
        self._reader = self._writer = None
        if self._udp is not None:
            self._udp.close()
            self._udp = None


# -- RELP -----------------------------------------------------------------------------------

RELP_OFFERS = b"relp_version=0\nrelp_software=hookaudit\ncommands=syslog"
MAX_RELP_ANSWER = 64 << 10  # an rsp is a status line and a few offers


def relp_frame(txnr: int, command: bytes, data: bytes = b"") -> bytes:
    """One RELP frame: ``TXNR SP COMMAND SP DATALEN [SP DATA] LF``.

    Example:
        >>> relp_frame(2, b"syslog", b"<110>1 x")
        b'2 syslog 8 <110>1 x\\n'
    """
    if data:
        return b"%d %s %d %s\n" % (txnr, command, len(data), data)
    return b"%d %s 0\n" % (txnr, command)


class RelpError(Exception):
    """The receiver broke the protocol (not a transport failure)."""


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    """(txnr, command, data) of the next frame from the receiver."""
    head = b""
    fields: list[bytes] = []
    while len(fields) < 3:  # TXNR, COMMAND, DATALEN: each ends at a space (or LF for 0)
        part = await reader.readuntil(b" ") if len(fields) < 2 else await _datalen(reader)
        head += part
        fields.append(part.rstrip(b" \n"))
        if len(head) > 64:
            raise RelpError("frame header too long")
    try:
        txnr, length = int(fields[0]), int(fields[2])
    except ValueError as e:
        raise RelpError(f"bad frame header {head[:40]!r}") from e
    if length < 0 or length > MAX_RELP_ANSWER:
        raise RelpError(f"answer of {length} bytes")
    data = await reader.readexactly(length) if length else b""
    if length and await reader.readexactly(1) != b"\n":
        raise RelpError("frame without its trailer")
    return txnr, fields[1], data


async def _datalen(reader: asyncio.StreamReader) -> bytes:
    out = b""
    while True:
        c = await reader.readexactly(1)
        out += c
        if c in (b" ", b"\n") or len(out) > 12:
            return out


class RelpSink:
    """RFC 5424 messages over RELP (``relp+tcp``/``relp+tls``): acknowledged per message."""

    def __init__(
        self,
        proto: str,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        bom: bool = True,
    ) -> None:
        self.proto, self.host, self.port = proto, host, port
        self.name = f"relp+{proto}://{host}:{port}"
        self.tls = tls
        self.timeout = timeout
        self.bom = bom
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._txnr = 0

    def _next(self) -> int:
        self._txnr = self._txnr % 999_999_999 + 1  # RELP numbers wrap after 999,999,999
        return self._txnr

    async def _session(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is not None and self._writer is not None and not self._writer.is_closing():
            return self._reader, self._writer
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls else None,
                ),
                self.timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise SinkDown(f"{self.name}: cannot connect: {e or type(e).__name__}") from e
        self._reader, self._writer, self._txnr = reader, writer, 0
        txnr = self._next()
        writer.write(relp_frame(txnr, b"open", RELP_OFFERS))
        answers = await self._answers({txnr})
        status = answers[txnr]
        if not status.startswith(b"200"):
            await self.close()
            raise SinkDown(f"{self.name}: session refused: {_status(status)}")
        return reader, writer

    async def _answers(self, waiting: set[int]) -> dict[int, bytes]:
        """The ``rsp`` data for each of `waiting`, read until all came (or SinkDown)."""
        assert self._reader is not None and self._writer is not None
        got: dict[int, bytes] = {}
        try:
            await asyncio.wait_for(self._writer.drain(), self.timeout)
            while waiting - got.keys():
                txnr, command, data = await asyncio.wait_for(
                    _read_frame(self._reader), self.timeout
                )
                if command == b"serverclose":
                    raise RelpError("the receiver closed the session")
                if command == b"rsp" and txnr in waiting:
                    got[txnr] = data
        except (OSError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, RelpError) as e:  # fmt: skip
            await self.close()
            why = str(e) or type(e).__name__
            raise SinkDown(f"{self.name}: no acknowledgement: {why}") from e
        return got

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        _, writer = await self._session()
        numbers: dict[int, int] = {}
        for i, r in enumerate(batch):
            txnr = self._next()
            numbers[txnr] = i
            writer.write(relp_frame(txnr, b"syslog", rfc5424(r, bom=self.bom)))
        answers = await self._answers(set(numbers))
        retry = [numbers[t] for t, status in answers.items() if not status.startswith(b"200")]
        if retry:
            first = next(s for s in answers.values() if not s.startswith(b"200"))
            await self.close()
            raise SinkDown(f"{self.name}: {len(retry)} not taken: {_status(first)}")
        return Delivery()

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 2)


def _status(data: bytes) -> str:
    line = data.split(b"\n", 1)[0][:200]
    return _NON_PRINT.sub(" ", line.decode("ascii", "replace")).strip() or "no status"
