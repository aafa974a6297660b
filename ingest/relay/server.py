"""`hookaudit relay`: the long-lived half of `hookaudit emit`, on a unix socket.

Rules of this file:
- The relay does what one `emit` process would do (validate, publish, wait for the
  worker's signed reply, verify it, render the answer, spool when NATS is down, keep
  refused input, publish a notice after a fallback), with the same functions of
  `ingest.emit.emitter`, so the answer is byte for byte the one today's emit prints. What it saves
  is the interpreter start-up, the imports and the NATS connection of every tool call.
- Who may ask: a client whose SO_PEERCRED uid is allowed (default: the relay's own uid);
  anyone else is hung up on, unanswered. The socket lives in a 0700 directory and is
  0600, so the filesystem refuses other users first. The client checks the relay's uid
  in turn (`ingest.emit.fast`).
- One NATS connection, one wildcard inbox subscription, a bounded dict of waiting events
  (as serve's gateway). A reply counts only if it verifies against a trusted worker key
  and names its own event; anything else on the inbox is ignored until the deadline.
- The socket itself (its place and mode, the peer's uid, the wire format) is
  `ingest.relay.sock`; this file is the emit bridge behind it.
- Every request is bounded: reading it, publishing, waiting (``--timeout`` of the client),
  the whole of it (`EmitOptions.budget`). NATS down: the event is spooled (with the
  answer the agent got when it waited) and the spool is flushed once NATS is back.

Example:
    >>> relay = Relay(Target(data_dir=Path("/tmp/ha")), Path("/tmp/ha/relay/emit.sock"))  # doctest: +SKIP
    >>> await relay.start(); await relay.serve_forever()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from engine.errors import HookauditError, InvalidEvent, Unavailable
from engine.failclosed import closed_answer, one_line, open_reason
from engine.records import HookEvent
from ingest.emit import emitter as em
from ingest.emit.answer import (
    Result,
    fail_result,
    late_result,
    rejected_result,
    reply_decoder,
    reply_result,
)
from ingest.emit.publish import Publisher
from ingest.emit.stdin import event_of, reject_stub, validate
from ingest.protocol import Reply
from ingest.relay.sock import Request, bind, encode_answer, peer, read_request, user_name
from ingest.spool.store import Spool, has_pending

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

    from ingest.replysig import Verifier

__all__ = ["Relay"]

_log = logging.getLogger("hookaudit.relay")


class Relay:
    """The relay: a unix socket in front of one NATS connection. Start, serve, stop."""

    def __init__(
        self,
        target: em.Target,
        socket_path: Path,
        *,
        allow_uids: Iterable[int] = (),
        socket_mode: int = 0o600,
        max_pending: int = 4096,
        request_timeout: float = 10.0,
    ) -> None:
        self.target = target
        self.socket_path = Path(socket_path)
        self.allow_uids = frozenset(allow_uids) or frozenset({os.getuid()})
        self.socket_mode = socket_mode
        self.max_pending = max_pending
        self.request_timeout = request_timeout
        self.spool = Spool(target.data_dir)
        self.pending: dict[str, asyncio.Future[Reply | str]] = {}
        self.nc: Client | None = None
        self.publisher: Publisher | None = None
        self.inbox = ""
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._verifier: tuple[object, Verifier | None] | None = None
        self._flush_lock = asyncio.Lock()
        self.stats = {"requests": 0, "refused_peers": 0, "decided": 0, "spooled": 0}

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the socket and start connecting to NATS (in the background: a relay
        started while NATS is down spools until it is up)."""
        self._connect_options()  # no NATS given nor an embedded server running: say so now
        sock = bind(self.socket_path, self.socket_mode)
        await self._connect_once()  # NATS first when it is there, so no emit spools needlessly
        self._server = await asyncio.start_unix_server(self._client, sock=sock)
        self._spawn(self._connect_loop())

    async def serve_forever(self, stop: asyncio.Event) -> None:
        await stop.wait()
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        with contextlib.suppress(OSError):
            if self.socket_path.is_socket():
                self.socket_path.unlink()
        for t in list(self._tasks):
            t.cancel()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), 2)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _connect_options(self) -> Any:
        from ingest.nats.options import connect_options

        t = self.target
        return connect_options(
            t.nats_args(),
            t.data_dir,
            "emitter",
            name="hookaudit-relay",
            connect_timeout=t.connect_timeout,
            max_reconnect=-1,
            reconnect_wait=0.5,
        )

    async def _connect_once(self) -> bool:
        # unlike emit, the relay is a service: its NATS trouble (a reconnect, a server that
        # moved and is followed) belongs in its log, as the worker's does
        t = self.target
        try:
            nc = await self._connect_options().connect()
        except HookauditError as e:
            _log.warning("NATS: %s; spooling until it is reachable", e)
            return False
        self.inbox = nc.new_inbox()
        await nc.subscribe(f"{self.inbox}.*", cb=self._on_reply, pending_msgs_limit=65536)
        self.publisher = Publisher(nc, t)
        self.nc = nc
        _log.info("connected to NATS; inbox %s", self.inbox)
        return True

    async def _connect_loop(self) -> None:
        while self.nc is None and not await self._connect_once():
            await asyncio.sleep(1.0)
        assert self.nc is not None
        while True:  # flush what was spooled while NATS was away
            if self.nc.is_connected and has_pending(self.target.data_dir):
                await self._flush()
            await asyncio.sleep(1.0)

    async def _flush(self) -> None:
        assert self.publisher is not None
        async with self._flush_lock:
            try:
                report = await self.spool.flush(self.publisher, budget=5.0)
            except (HookauditError, OSError) as e:
                _log.warning("spool flush: %s", e)
                return
            if report.published or report.error:
                _log.info("spool flush: %s", report)

    # -- the socket side -----------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = writer.get_extra_info("socket")
            pid, uid = peer(sock)
            if uid not in self.allow_uids:
                self.stats["refused_peers"] += 1
                _log.warning("client pid %d uid %d is not allowed: hung up", pid, uid)
                return
            try:
                async with asyncio.timeout(self.request_timeout):
                    req = await read_request(reader)
            except (TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                _log.warning("client pid %d: bad request: %s", pid, one_line(e))
                return
            self.stats["requests"] += 1
            result = await self.handle(req, user=user_name(uid))
            writer.write(encode_answer(result))
            await writer.drain()
            _log.info(
                "relayed for pid %d uid %d: %s, exit %d", pid, uid, result.status, result.exit_code
            )
        except Exception as e:  # one client never stops the relay
            _log.warning("client: %s", one_line(e))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _options(self, req: Request) -> em.EmitOptions:
        return em.EmitOptions(
            target=self.target,
            source=req.source,
            agent=req.agent,
            project_dir=req.project_dir,
            wait=req.wait,
            timeout=req.timeout,
            fail="closed" if req.fail == "closed" else "open",
            started=time.monotonic() - req.age,  # the client's start-up is on the clock
        )

    async def handle(self, req: Request, *, user: str) -> Result:
        """What `hookaudit emit` would answer for this request, never raising."""
        opts = self._options(req)
        try:
            payload, text = validate(req.body, agent=opts.agent)
        except InvalidEvent as e:
            return await self._bad_input(req.body, opts, e)
        except Exception as e:
            return _internal(opts, e)
        try:
            event = event_of(payload, text, opts, user=user)
        except InvalidEvent as e:
            return await self._bad_input(req.body, opts, e)
        try:
            async with asyncio.timeout(opts.budget()):
                result = await self._deliver(event, opts)
        except TimeoutError:
            why = f"delivery took longer than {opts.budget():.0f}s"
            result = fail_result(
                event.event,
                opts.fail,
                f"no decision: {why}",
                status="no-decision",
                agent=opts.agent,
            )
        except Exception as e:  # as emit: a bug spools the event and answers per --fail
            why = f"internal error: {type(e).__name__}: {e}"
            result = await asyncio.to_thread(em.undelivered, event, opts, self.spool, why)
        if result.status == "spooled":
            self.stats["spooled"] += 1
        return result

    async def _bad_input(self, raw: bytes, opts: em.EmitOptions, err: InvalidEvent) -> Result:
        stub, kept = await asyncio.to_thread(reject_stub, raw, opts, err)
        try:
            sent = None
            if self.publisher is not None and self.nc is not None and self.nc.is_connected:
                with contextlib.suppress(HookauditError):
                    sent = await self.publisher(stub)
            if sent is None or sent.rejected is not None:
                await asyncio.to_thread(self.spool.append, stub)
        except Exception as e:
            kept += f"; not recorded in the log: {type(e).__name__}: {e}"
        return rejected_result(opts, err, kept)

    async def _deliver(self, event: HookEvent, opts: em.EmitOptions) -> Result:
        nc, publish = self.nc, self.publisher
        if nc is None or publish is None or not nc.is_connected:
            why: str | HookauditError = Unavailable(
                "cannot connect to NATS: the relay is "
                + ("reconnecting" if nc is not None else "not connected yet")
            )
            return await asyncio.to_thread(em.undelivered, event, opts, self.spool, why)
        fut: asyncio.Future[Reply | str] | None = None
        reply_to = peer = None
        if opts.wait:
            if len(self.pending) >= self.max_pending or event.id in self.pending:
                why = f"{len(self.pending)} events already waiting at the relay"
                return await asyncio.to_thread(em.undelivered, event, opts, self.spool, why)
            fut = asyncio.get_running_loop().create_future()
            self.pending[event.id] = fut
            reply_to = f"{self.inbox}.{event.id}"
            with contextlib.suppress(HookauditError):  # reported after publishing, below
                verifier = self._verify_key()
                peer = None if verifier is None else verifier.peer_header()
        try:
            try:
                sent = await publish(event, reply_to=reply_to, peer=peer)
            except HookauditError as e:
                return await asyncio.to_thread(em.undelivered, event, opts, self.spool, e)
            if sent.rejected is not None:
                return await asyncio.to_thread(em.too_big, event, opts, self.spool, sent.rejected)
            if fut is None:
                return Result("duplicate" if sent.duplicate else "published")
            try:
                self._verify_key()
            except HookauditError as e:
                return fail_result(
                    event.event,
                    opts.fail,
                    f"no decision: {e}",
                    status="no-decision",
                    agent=opts.agent,
                )
            try:
                got = await asyncio.wait_for(fut, max(0.0, opts.left()))  # due by then
            except TimeoutError:
                result = late_result(event, opts)
            else:
                result = reply_result(event, opts, got)
            if result.status == "no-decision":  # the log must say what the agent was told
                self._spawn(em.notify(event, opts, self.spool, nc, result))
            else:
                self.stats["decided"] += 1
            return result
        finally:
            self.pending.pop(event.id, None)

    # -- replies -------------------------------------------------------------------------

    def _verify_key(self) -> Verifier | None:
        """The trusted worker key(s): --worker-key / $HOOKAUDIT_WORKER_KEY, else reply.pub,
        re-read when that file changes (a worker started after the relay)."""
        from ingest.replysig import ENV_WORKER_KEY, reply_public_path, trusted_verifier

        t = self.target
        stamp: object
        if t.worker_key or os.environ.get(ENV_WORKER_KEY):
            stamp = "explicit"
        else:
            try:
                st = reply_public_path(t.data_dir).stat()
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
        if self._verifier is None or self._verifier[0] != stamp:
            self._verifier = (stamp, trusted_verifier(t.worker_key, t.data_dir))
        return self._verifier[1]

    async def _on_reply(self, msg: Msg) -> None:
        key = msg.subject.rpartition(".")[2]
        fut = self.pending.get(key)
        if fut is None or fut.done():
            return
        try:
            verifier = self._verify_key()
        except HookauditError:
            return  # the waiting request reports the bad key itself
        if verifier is not None and not verifier.verify_reply(msg.data, msg.headers):
            _log.warning("reply for event %s not signed by a trusted worker: ignored", key)
            return
        try:
            reply = reply_decoder().decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            if verifier is None:
                fut.set_result(f"undecodable reply for event {key}: {e}")
            return
        if verifier is not None and reply.event_id != key:
            _log.warning("signed reply for event %s arrived for %s: ignored", reply.event_id, key)
            return
        fut.set_result(reply)


def _internal(opts: em.EmitOptions, e: Exception) -> Result:
    why = f"internal error: {one_line(e)}"
    if opts.fail == "closed":
        out, err, code = closed_answer(why, "hookaudit emit")
        return Result("lost", stdout=out, stderr=err, exit_code=code)
    return Result("lost", stderr=open_reason(why))
