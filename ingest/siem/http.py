"""HTTP transports: an NDJSON webhook, Splunk HEC with indexer acknowledgement, Elastic bulk.

Rules of this file:
- Only a 4xx other than 401, 403, 408 and 429 says "this record, never": `rejects_record`.
  Every other answer that is not 2xx (network failures, timeouts, 1xx, any 3xx redirect,
  401/403, 408, 429, 5xx, a status outside 100-599) means "the receiver is not taking
  records now": `SinkDown`, the batch is sent again after a back-off and nothing is parked.
  A wrong token or a redirect to HTTPS is an operator's fix; records wait for it.
- A record the receiver rejects for what it is (a 4xx on it alone, a bulk item's mapping
  error) is parked with the receiver's reason. A rejected batch is re-sent one record at a
  time to find which.
- HEC: a batch counts only once the indexer acknowledged its ``ackId``; an ack that does
  not come within `ack_timeout` makes the batch go again (same ids, so it can be deduplicated).
  `window = 2`: the forwarder sends the next batch while one waits for its ack.
- Elastic: ``create`` with the record uid as ``_id``, so a re-sent record is a 409 conflict,
  counted as delivered, never a duplicate document.

Example:
    >>> hec_event(Formatted(uid="u", event_id="e", seq=1, time_ms=1500, severity=1,
    ...     event="Stop", host="h", text="x"))["time"]
    1.5
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from typing import Any

import httpx
import msgspec

from ingest.siem.formats import Formatted
from ingest.siem.sink import Delivery, Keepalive, SinkDown, printable, redact_url

__all__ = ["MAX_ANSWER", "ElasticSink", "HecSink", "WebhookSink", "hec_event", "rejects_record"]

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
MAX_ANSWER = (
    32 << 20
)  # bytes of a receiver's answer, decoded; a bulk answer of 512 items is ~100 KiB
_DECODED = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _client(verify: ssl.SSLContext | bool, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=verify, timeout=timeout, follow_redirects=False)


def rejects_record(status: int) -> bool:
    """Whether an HTTP status refuses the records sent for good (they are parked).

    >>> [s for s in (200, 302, 400, 401, 404, 408, 413, 429, 503) if rejects_record(s)]
    [400, 404, 413]
    """
    return 400 <= status < 500 and status not in (401, 403, 408, 429)


def _retryable(status: int) -> bool:
    return not (200 <= status < 300) and not rejects_record(status)


def _why(resp: httpx.Response) -> str:
    where = resp.headers.get("location") if 300 <= resp.status_code < 400 else None
    to = f" (redirects to {redact_url(where)}: point --to there)" if where else ""
    return f"HTTP {resp.status_code}{to}: {printable(resp.text, 300)}"


class _HttpBase:
    name: str

    def __init__(self, url: str, *, verify: ssl.SSLContext | bool, timeout: float) -> None:
        self.url = url
        self.client = _client(verify, timeout)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST; the answer read whole, up to MAX_ANSWER bytes once decoded (a receiver is
        untrusted: a larger answer, gzip bomb or not, is the sink being down)."""
        try:
            req = self.client.build_request("POST", url, content=body, headers=headers)
            streamed = await self.client.send(req, stream=True)
            try:
                data = bytearray()
                async for chunk in streamed.aiter_bytes():
                    data += chunk
                    if len(data) > MAX_ANSWER:
                        raise SinkDown(
                            f"{self.name}: HTTP {streamed.status_code}: answer larger than "
                            f"{MAX_ANSWER >> 20} MiB"
                        )
            finally:
                await streamed.aclose()
        except httpx.HTTPError as e:
            raise SinkDown(f"{self.name}: {type(e).__name__}: {e}") from e
        kept = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() not in _DECODED]
        resp = httpx.Response(streamed.status_code, headers=kept, content=bytes(data), request=req)
        if _retryable(resp.status_code):
            raise SinkDown(f"{self.name}: {_why(resp)}")
        return resp

    async def close(self) -> None:
        await self.client.aclose()


class WebhookSink(_HttpBase):
    """POST batches of NDJSON (one record's text a line) to an HTTPS endpoint."""

    def __init__(
        self, url: str, *, token: str | None, verify: ssl.SSLContext | bool, timeout: float = 10.0
    ) -> None:
        super().__init__(url, verify=verify, timeout=timeout)
        self.name = redact_url(url)
        self.headers = {"Content-Type": "application/x-ndjson"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        body = b"".join(r.text.encode() + b"\n" for r in batch)
        resp = await self._post(self.url, body, self.headers)
        if resp.is_success:
            return Delivery()
        if len(batch) == 1:
            return Delivery(parked=[(0, _why(resp))])
        parked: list[tuple[int, str]] = []
        for i, r in enumerate(batch):
            one = await self._post(self.url, r.text.encode() + b"\n", self.headers)
            if not one.is_success:
                parked.append((i, _why(one)))
        return Delivery(parked=parked)


def hec_event(rec: Formatted) -> dict[str, Any]:
    """The HEC envelope of one record: time in seconds, the event as JSON or text."""
    return {
        "time": rec.time_ms / 1000,
        "host": rec.host or "unknown",
        "source": "hookaudit",
        "sourcetype": rec.sourcetype,
        "event": rec.doc if rec.doc is not None else rec.text,
        "fields": {"hookaudit_uid": rec.uid, "hookaudit_seq": rec.seq},
    }


class HecSink(_HttpBase):
    """Splunk HTTP Event Collector: batched events, token, indexer acknowledgement."""

    # Batches in flight: the forwarder sends the next while one waits for its indexer ack
    # (two keep the messages in hand within the consumer's max_ack_pending of 4 batches).
    window = 2

    def __init__(
        self,
        base: str,
        path: str,
        *,
        token: str,
        verify: ssl.SSLContext | bool,
        timeout: float = 10.0,
        ack_timeout: float = 60.0,
        ack_poll: float = 0.2,
    ) -> None:
        super().__init__(base + path, verify=verify, timeout=timeout)
        self.name = f"hec+{base}"
        self.ack_url = base + "/services/collector/ack"
        self.channel = str(uuid.uuid4())
        self.headers = {
            "Authorization": f"Splunk {token}",
            "X-Splunk-Request-Channel": self.channel,
            "Content-Type": "application/json",
        }
        self.ack_timeout = ack_timeout
        self.ack_poll = ack_poll

    async def _batch(self, batch: list[Formatted]) -> httpx.Response:
        body = b"".join(_enc.encode(hec_event(r)) for r in batch)
        return await self._post(self.url, body, self.headers)

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        resp = await self._batch(batch)
        if resp.is_success:
            await self._await_ack(resp, keepalive)
            return Delivery()
        if len(batch) == 1:
            return Delivery(parked=[(0, _why(resp))])
        parked: list[tuple[int, str]] = []
        for i, r in enumerate(batch):
            one = await self._batch([r])
            if one.is_success:
                await self._await_ack(one, keepalive)
            else:
                parked.append((i, _why(one)))
        return Delivery(parked=parked)

    async def _await_ack(self, resp: httpx.Response, keepalive: Keepalive) -> None:
        try:
            answer = _dec.decode(resp.content)
        except (msgspec.DecodeError, RecursionError) as e:
            raise SinkDown(f"{self.name}: answer is not JSON: {resp.text[:200]!r}") from e
        ack_id = answer.get("ackId") if isinstance(answer, dict) else None
        if ack_id is None:
            return  # indexer acknowledgement is off on this token: 200 is all we get
        deadline = time.monotonic() + self.ack_timeout
        body = _enc.encode({"acks": [ack_id]})
        last = time.monotonic()
        pause = 0.005  # an indexer that acks at once is asked again soon; a slow one less often
        while time.monotonic() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, self.ack_poll)
            got = await self._post(self.ack_url, body, self.headers)
            try:
                acks = _dec.decode(got.content).get("acks", {})
            except (msgspec.DecodeError, AttributeError, RecursionError):
                acks = {}
            if isinstance(acks, dict) and acks.get(str(ack_id)) is True:
                return
            if time.monotonic() - last > 5.0:
                await keepalive()
                last = time.monotonic()
        raise SinkDown(
            f"{self.name}: no indexer acknowledgement for ackId {ack_id} within "
            f"{self.ack_timeout:g} s; sending the batch again"
        )


class ElasticSink(_HttpBase):
    """Elasticsearch/OpenSearch bulk API: ``create`` with the record uid as ``_id``."""

    def __init__(
        self,
        base: str,
        index: str,
        *,
        token: str | None,
        auth: tuple[str, str] | None,
        verify: ssl.SSLContext | bool,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(base + "/_bulk", verify=verify, timeout=timeout)
        self.name = f"elastic+{base}/{index}"
        self.index = index
        self.headers = {"Content-Type": "application/x-ndjson"}
        if token:
            self.headers["Authorization"] = f"ApiKey {token}"
        if auth:
            self.client.auth = httpx.BasicAuth(*auth)

    def _body(self, batch: list[Formatted]) -> bytes:
        out = bytearray()
        for r in batch:
            out += _enc.encode({"create": {"_index": self.index, "_id": r.uid}}) + b"\n"
            if r.doc is not None:
                out += _enc.encode(r.doc) + b"\n"
            else:
                out += _enc.encode({"message": r.text, "event": {"id": r.event_id}}) + b"\n"
        return bytes(out)

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        resp = await self._post(self.url, self._body(batch), self.headers)
        if not resp.is_success:
            raise SinkDown(f"{self.name}: bulk request refused: {_why(resp)}")
        try:
            items = _dec.decode(resp.content)["items"]
        except (msgspec.DecodeError, KeyError, TypeError, RecursionError) as e:
            raise SinkDown(f"{self.name}: bulk answer unreadable: {resp.text[:200]!r}") from e
        if not isinstance(items, list) or len(items) != len(batch):
            # an item the answer does not name is not known to be stored: send the batch again
            raise SinkDown(
                f"{self.name}: bulk answer unreadable: "
                f"{len(items) if isinstance(items, list) else 'no'} items for {len(batch)} sent"
            )
        d = Delivery()
        for i, item in enumerate(items):
            result: Any = next(iter(item.values()), {}) if isinstance(item, dict) else {}
            status = result.get("status", 0) if isinstance(result, dict) else 0
            if not isinstance(status, int) or isinstance(status, bool):
                status = 0
            if 200 <= status < 300 or status == 409:  # 409: already there, from an earlier send
                continue
            if not rejects_record(status):
                d.retry.append(i)
            else:
                err = result.get("error", {})
                why = (
                    f"{err.get('type', '')}: {err.get('reason', '')}"
                    if isinstance(err, dict)
                    else str(err)
                )
                d.parked.append((i, f"bulk item status {status}: {why[:300]}"))
        return d
