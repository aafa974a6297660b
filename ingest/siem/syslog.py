"""Syslog transports: RFC 5424 messages over UDP (RFC 5426), TCP (RFC 6587 octet counting)
and TLS (RFC 5425).

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

__all__ = ["SyslogSink", "frame", "rfc5424"]

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


def rfc5424(rec: Formatted, *, app: str = "hookaudit") -> bytes:
    """One RFC 5424 message (no framing) for `rec`."""
    pri = FACILITY * 8 + _syslog_severity(rec.severity)
    sd = f'[hookaudit@32473 eventId="{_sd(rec.event_id)}" seq="{rec.seq}" uid="{_sd(rec.uid)}"]'
    head = f"<{pri}>1 {iso_ms(rec.time_ms)} {_ascii(rec.host, 255)} {app} - "
    head += f"{_ascii(rec.event, 32)} {sd} "
    return head.encode("ascii") + b"\xef\xbb\xbf" + rec.text.encode("utf-8", "replace")


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
    ) -> None:
        self.proto, self.host, self.port = proto, host, port
        self.name = f"syslog+{proto}://{host}:{port}"
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
        data = b"".join(frame(rfc5424(r)) for r in batch)
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
            msg = rfc5424(r)
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
