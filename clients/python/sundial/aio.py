"""AsyncClient: the same methods as Client, as coroutines (asyncio).

One connection per client, owned by the event loop the client is first used on: requests
from many tasks are pipelined on it, and a reader task hands each reply to its caller by
``request_id``. Connecting, reconnecting with backoff, deadlines and what is sent again after
a lost connection are as in Client (client.py's docstring).

    async with AsyncClient("127.0.0.1:7400") as c:
        await c.enqueue("emails", b"hello")
        for m in await c.dequeue("emails", max=10, wait_ms=5000):
            await c.complete("emails", m.id, m.lease_token)
"""

import asyncio
import functools
import itertools
import random
import socket
import time

from . import codec
from . import tls as tls_module
from .client import (DEFAULT_TIMEOUT_S, RECONNECT_INITIAL_S, RECONNECT_MAX_S, client_settings,
                     cluster_addresses, http_address, peer_closed)
from .errors import SundialError, invalid_argument, unavailable
from .operations import OPERATION_NAMES, Operations


class _Connection:
    """A stream pair, the futures in flight, and the reader task."""

    def __init__(self, sock, reader, writer, address_text):
        self.loop = asyncio.get_running_loop()
        self._sock = sock  # ours, for peer_closed (the transport's wrapper refuses recv)
        self._reader = reader
        self._writer = writer
        self._address = address_text
        self._pending = {}  # request_id -> [future, sent]
        self._closed = None
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def closed(self):
        return self._closed is not None

    def submit(self, request_id, frame):
        """A future for the reply; the frame is written (buffered by the transport) now.
        Returns (future, sent)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._closed is not None:
            future.set_exception(self._closed)
            return future, False
        if not self._pending and peer_closed(self._sock):
            # Gone while idle, not yet seen by the reader task: not sent, may be sent again.
            self.close(unavailable(f"{self._address}: the server closed the connection"))
            future.set_exception(self._closed)
            return future, False
        self._pending[request_id] = future
        self._writer.write(frame)
        return future, True

    def forget(self, request_id):
        self._pending.pop(request_id, None)

    def close(self, error=None):
        if self._closed is not None:
            return
        if self.loop is not asyncio.get_running_loop():
            # Its loop has ended (asyncio.run returned): its transport and futures are dead
            # with it, and only the socket is left to close.
            self._closed = unavailable(f"{self._address}: its event loop has ended")
            self._sock.close()
            return
        self._closed = error or unavailable(f"{self._address}: connection closed by the client")
        pending, self._pending = self._pending, {}
        self._writer.close()
        for future in pending.values():
            if not future.done():
                future.set_exception(self._closed)
        if self._task is not asyncio.current_task():
            self._task.cancel()

    async def _read_loop(self):
        read = self._reader.readexactly
        error = None
        try:
            while True:
                (length,) = codec.HEADER.unpack(await read(4))
                if length == 0 or length > codec.MAX_REPLY_BYTES:
                    error = SundialError("INTERNAL", f"{self._address}: reply frame of {length} "
                                         "bytes", origin="connection")
                    break
                frame = await read(length)
                try:
                    reply = codec.read_reply(frame)
                except Exception as e:  # no Verifier in the Python runtime: a bad frame raises
                    error = SundialError("INTERNAL", f"{self._address}: unreadable reply frame "
                                         f"({type(e).__name__}: {e})", origin="connection")
                    break
                if reply is None:
                    continue
                request_id, response = reply
                if request_id == 0:
                    error = codec.reply_error(response) or SundialError(
                        "INTERNAL", "reply with request_id 0", origin="connection")
                    break
                future = self._pending.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_result(response)
        except asyncio.IncompleteReadError:
            error = unavailable(f"{self._address}: the server closed the connection")
        except asyncio.CancelledError:
            return
        except OSError as e:
            error = unavailable(f"{self._address}: connection lost: {e}")
        self.close(error)


class AsyncClient(Operations):
    """``AsyncClient("127.0.0.1:7400", token=None, timeout=10.0, durability="durable",
    tls=False, ca_file=None, server_hostname=None, http_addr=None)``: Client's methods as
    coroutines, and the same settings. Calls run on the event loop that makes them; used from
    a new loop, the client makes a new connection there."""

    __slots__ = ("_host", "_port", "_address", "_token", "_timeout", "_durability", "_tls",
                 "_http", "_ids", "_connect_lock", "_lock_loop", "_conn", "_closed")

    def __init__(self, addr="127.0.0.1:7400", token=None, *, timeout=DEFAULT_TIMEOUT_S,
                 durability="durable", tls=False, ca_file=None, server_hostname=None,
                 http_addr=None):
        seeds = cluster_addresses(addr)
        if seeds is not None and len(seeds) > 1:
            raise invalid_argument("AsyncClient takes one address; to follow a cluster's "
                                   "primary use Client (docs/clients/python.md, Clusters)")
        if seeds is not None:
            addr = seeds[0][2]
        (self._host, self._port, self._address, self._token, self._timeout,
         self._durability) = client_settings(addr, token, timeout, durability)
        self._tls = tls_module.tls_settings(tls, ca_file, server_hostname)
        self._http = http_address(self._host, http_addr)
        self._ids = itertools.count(1)
        self._connect_lock = None  # made on first use, inside the loop
        self._lock_loop = None
        self._conn = None
        self._closed = False

    @property
    def address(self):
        return self._address

    @property
    def connected(self):
        return self._conn is not None and not self._conn.closed

    async def close(self):
        """Closes the connection; later calls raise UNAVAILABLE."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            if conn.loop is asyncio.get_running_loop():
                try:
                    await conn._writer.wait_closed()
                except OSError:
                    pass

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def __repr__(self):
        return f"AsyncClient({self._address!r})"

    def watch(self, queue="*", filter=None, *, ids=None, max_events_per_sec=None, stats=False,
              queue_stats=False, timeout=None):
        """Client.watch for asyncio: an AsyncWatch, subscribed by ``async with`` (or
        ``await``): ``async with client.watch("emails") as events: async for e in events``."""
        from .watch import AsyncWatch  # wsproto is needed only here

        return AsyncWatch((self._http, self._token, self._tls, self._timeout), queue, filter,
                          ids=ids, max_events_per_sec=max_events_per_sec, stats=stats,
                          queue_stats=queue_stats, timeout=timeout)

    async def _connection(self, deadline):
        conn = self._conn
        loop = asyncio.get_running_loop()
        if conn is not None and not conn.closed:
            if conn.loop is loop:
                return conn
            # Used from another event loop (a second asyncio.run): the old one's connection
            # and lock belong to it, so this loop gets its own.
            conn.close()
            self._conn, self._connect_lock = None, None
        if self._connect_lock is None or self._lock_loop is not loop:
            self._connect_lock, self._lock_loop = asyncio.Lock(), loop
        try:
            await asyncio.wait_for(self._connect_lock.acquire(),
                                   max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            raise unavailable(f"{self._address}: not connected before the deadline") from None
        try:
            delay = RECONNECT_INITIAL_S
            last = None
            while True:
                if self._closed:
                    raise unavailable(f"{self._address}: the client is closed")
                if self._conn is not None and not self._conn.closed:
                    return self._conn
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise unavailable(f"{self._address}: cannot connect: "
                                      f"{last or 'the deadline passed'}")
                try:
                    self._conn = await self._connect(deadline)
                    return self._conn
                except (OSError, asyncio.TimeoutError) as e:
                    last = e or "connect timed out"
                await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), max(remaining, 0)))
                delay = min(delay * 2, RECONNECT_MAX_S)
        finally:
            self._connect_lock.release()

    async def _connect(self, deadline):
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
        last = OSError(f"{self._address}: no address")
        for family, type_, proto, _, sockaddr in infos:
            sock = socket.socket(family, type_, proto)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, sockaddr),
                                       max(deadline - time.monotonic(), 0.001))
                break
            except (OSError, asyncio.TimeoutError) as e:
                sock.close()
                last = e if isinstance(e, OSError) else OSError("connect timed out")
        else:
            raise last
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            reader, writer = await asyncio.open_connection(sock=sock)
        else:
            reader, writer = await tls_module.open_async(sock, self._tls, self._host,
                                                         self._address, deadline)
        conn = _Connection(sock, reader, writer, self._address)
        if self._token is not None:
            request_id = next(self._ids)
            future, _ = conn.submit(request_id, codec.auth(self._token).encode(request_id, None))
            try:
                response = await asyncio.wait_for(future, max(deadline - time.monotonic(), 0))
            except SundialError as e:
                conn.close()
                if e.code == "UNAUTHENTICATED":
                    raise
                raise OSError(e.message) from None
            except asyncio.TimeoutError:
                conn.close()
                raise
            error = codec.reply_error(response)
            if error is not None:
                conn.close()
                raise error
        return conn

    async def _execute(self, request, timeout, durability=None):
        timeout = self._timeout if timeout is None else float(timeout)
        durability = self._durability if durability is None else codec._durability(durability)
        if isinstance(request, codec.Batch):
            deadline = time.monotonic() + timeout
            conn = await self._connection(deadline)
            sent = []
            for call in request.calls:
                request_id = next(self._ids)
                future, _ = conn.submit(request_id, call.encode(request_id, durability))
                sent.append((call, request_id, future))
            try:
                values = []
                for call, request_id, future in sent:
                    if not await self._wait(conn, request_id, future, deadline):
                        raise unavailable(f"{call.name}: no reply from {self._address} within "
                                          f"{timeout:g} s")
                    values.append(self._value(call, future.result()))
                return request.combine(values)
            finally:
                for _, request_id, future in sent:  # after an error: drop the rest quietly
                    if not future.done():
                        conn.forget(request_id)
                        future.cancel()
                    elif not future.cancelled():
                        future.exception()  # retrieved: asyncio logs none
        deadline = time.monotonic() + timeout + request.wait_s
        while True:
            conn = await self._connection(deadline)
            request_id = next(self._ids)
            future, sent = conn.submit(request_id, request.encode(request_id, durability))
            if not await self._wait(conn, request_id, future, deadline):
                raise unavailable(f"{request.name}: no reply from {self._address} within "
                                  f"{timeout + request.wait_s:g} s")
            error = future.exception()
            if error is not None:
                if error.code == "UNAVAILABLE" and (not sent or not request.mutates):
                    continue  # not applied, or harmless to repeat: on a new connection
                raise error
            return self._value(request, future.result())

    @staticmethod
    async def _wait(conn, request_id, future, deadline):
        """True once `future` is done; False (and the request forgotten) at the deadline."""
        await asyncio.wait({future}, timeout=max(deadline - time.monotonic(), 0))
        if future.done():
            return True
        conn.forget(request_id)
        future.cancel()
        return False

    @staticmethod
    def _value(request, response):
        error = codec.reply_error(response)
        if error is not None:
            raise error
        return request.decode(response)


def _coroutine_method(operation):
    @functools.wraps(operation)
    async def method(self, *args, **kwargs):
        return await operation(self, *args, **kwargs)

    return method


for _name in OPERATION_NAMES:
    setattr(AsyncClient, _name, _coroutine_method(getattr(Operations, _name)))
del _name
