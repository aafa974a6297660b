"""Receivers for bench_siem.py, one process each, speaking the real wire formats.

    python siem_receivers.py KIND [CERT KEY]

KIND is ``syslog`` (RFC 6587 octet-counted frames over TCP, or TLS with CERT/KEY), ``udp``
(one datagram a message), ``hec`` (Splunk HEC: ``/services/collector/event`` answers an
``ackId``, ``/services/collector/ack`` acknowledges every id asked), ``bulk`` (Elastic
``/_bulk``: one ``create`` item with status 201 per action line) or ``webhook`` (NDJSON
POSTs, 200). HTTP is HTTP/1.1 with keep-alive, as httpx uses it. The first line printed is
the port; then the count of received records after each read or request (UDP: every
0.1 s while it changes).
"""

from __future__ import annotations

import asyncio
import ssl
import sys

KIND = sys.argv[1]
CTX: ssl.SSLContext | None = None
if len(sys.argv) > 3:
    CTX = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    CTX.load_cert_chain(sys.argv[2], sys.argv[3])

count = 0
shown = 0


def add(n: int) -> None:
    global count
    count += n
    if KIND != "udp":  # one line per read or request; UDP prints from `tick`
        print(count, flush=True)


async def tick() -> None:
    global shown
    while True:
        await asyncio.sleep(0.1)
        if count != shown:
            shown = count
            print(count, flush=True)


async def syslog(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    buf = b""
    while data := await r.read(1 << 20):
        buf += data
        pos, n = 0, 0
        while True:
            sp = buf.find(b" ", pos)
            if sp < 0:
                break
            end = sp + 1 + int(buf[pos:sp])
            if end > len(buf):
                break
            pos, n = end, n + 1
        buf = buf[pos:]
        add(n)


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


_ITEM = b'{"create":{"_index":"hookaudit","status":201,"result":"created"}}'
ack_id = 0


def handle(path: bytes, body: bytes) -> bytes:
    global ack_id
    if KIND == "hec":
        if path.endswith(b"/ack"):
            # {"acks":[1,2]} -> {"acks":{"1":true,"2":true}}
            ids = body.split(b"[", 1)[1].split(b"]", 1)[0].split(b",")
            inner = b",".join(b'"%s":true' % i.strip() for i in ids if i.strip())
            return _answer(b'{"acks":{%s}}' % inner)
        add(body.count(b'"hookaudit_uid"'))
        ack_id += 1
        return _answer(b'{"text":"Success","code":0,"ackId":%d}' % ack_id)
    if KIND == "bulk":
        n = body.count(b"\n") // 2
        add(n)
        return _answer(b'{"took":1,"errors":false,"items":[' + b",".join([_ITEM] * n) + b"]}")
    add(body.count(b"\n"))
    return _answer(b'{"ok":true}')


async def http(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            line, _, rest = head.partition(b"\r\n")
            length = 0
            for h in rest.split(b"\r\n"):
                k, _, v = h.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            body = await r.readexactly(length)
            w.write(handle(line.split(b" ")[1], body))
            await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    w.close()


class Udp(asyncio.DatagramProtocol):
    def datagram_received(self, data: bytes, addr: object) -> None:
        add(1)


async def main() -> None:
    if KIND == "udp":
        loop = asyncio.get_running_loop()
        tr, _ = await loop.create_datagram_endpoint(Udp, local_addr=("127.0.0.1", 0))
        sock = tr.get_extra_info("socket")
        import socket

        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
        print(sock.getsockname()[1], flush=True)
        await tick()
    srv = await asyncio.start_server(
        syslog if KIND == "syslog" else http, "127.0.0.1", 0, ssl=CTX, limit=1 << 24
    )
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()


asyncio.run(main())
