"""AsyncClient: the same methods as Client, as coroutines (asyncio).

One connection per client, owned by the event loop the client is first used on: requests
from many tasks are pipelined on it, and a reader task hands each reply to its caller by
``request_id``. Connecting, reconnecting with backoff, deadlines and what is sent again after
a lost connection are as in Client (client.py's docstring).

Given a cluster's nodes (a list, or one string with commas) it follows the primary as Client
does, by the same rules (follow.py: finding the primary with the Cluster request, what is sent
again after NOT_PRIMARY, a lost connection, a deadline or UNAVAILABLE, the backoff and
``retry_budget``); only the waiting is asyncio's.

    async with AsyncClient("127.0.0.1:7400") as c:
        await c.enqueue("emails", b"hello")
        for m in await c.dequeue("emails", max=10, wait_ms=5000):
            await c.complete("emails", m.id, m.lease_token)
"""

import asyncio
import functools
import itertools
import socket
import time

from . import codec
from . import tls as tls_module
from . import follow
from .client import DEFAULT_TIMEOUT_S, client_settings, http_address, peer_closed
from .errors import SundialError, unavailable
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


class AsyncClient(follow.FollowingClient, Operations):
    """``AsyncClient("127.0.0.1:7400", token=None, timeout=10.0, durability="durable",
    tls=False, ca_file=None, server_hostname=None, http_addr=None, retry_budget=20.0)``:
    Client's methods as coroutines, and the same settings; a list of addresses follows a
    cluster's primary as Client does. Calls run on the event loop that makes them; used from a
    new loop, the client makes a new connection there."""

    __slots__ = ("_host", "_port", "_address", "_token", "_timeout", "_durability", "_tls",
                 "_http", "_http_given", "_ids", "_connect_lock", "_lock_loop", "_conn",
                 "_closed", "_seeds", "_retry_budget", "_on_primary", "_highest_epoch")

    def __init__(self, addr="127.0.0.1:7400", token=None, *, timeout=DEFAULT_TIMEOUT_S,
                 durability="durable", tls=False, ca_file=None, server_hostname=None,
                 http_addr=None, retry_budget=follow.DEFAULT_RETRY_BUDGET_S):
        addr, seeds = follow.seeds_of(addr)
        (self._host, self._port, self._address, self._token, self._timeout,
         self._durability) = client_settings(addr, token, timeout, durability)
        self._retry_budget = follow.retry_budget_s(retry_budget)
        self._seeds = seeds  # None: one server, not followed
        self._on_primary = False  # following: the connection is to the primary
        self._highest_epoch = 0
        self._tls = tls_module.tls_settings(tls, ca_file, server_hostname)
        self._http = http_address(self._host, http_addr)
        self._http_given = http_addr is not None
        self._ids = itertools.count(1)
        self._connect_lock = None  # made on first use, inside the loop
        self._lock_loop = None
        self._conn = None
        self._closed = False

    @property
    def address(self):
        """The node connected to (following a cluster: the primary, once found)."""
        return self._address

    @property
    def connected(self):
        """A connection is open (following a cluster: to the primary)."""
        conn = self._conn
        return conn is not None and not conn.closed and (self._seeds is None or
                                                          self._on_primary)

    @property
    def follows_primary(self):
        """Whether this client was given a cluster's nodes and follows its primary."""
        return self._seeds is not None

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
        ``await``): ``async with client.watch("emails") as events: async for e in events``.
        Following a cluster (without ``http_addr``), it subscribes on the primary and again on
        the next one after a failover (watch.py)."""
        from .watch import AsyncWatch  # wsproto is needed only here

        locate = None
        if self._seeds is not None and not self._http_given:
            locate = self._primary_http
        return AsyncWatch((self._http, self._token, self._tls, self._timeout), queue, filter,
                          ids=ids, max_events_per_sec=max_events_per_sec, stats=stats,
                          queue_stats=queue_stats, timeout=timeout, locate=locate,
                          retry_budget=self._retry_budget)

    async def _primary_http(self, timeout):
        """Following: the primary's HTTP address (follow.primary_http) from a Cluster answer,
        with the node's name and epoch; NOT_PRIMARY while the answer names none."""
        view = await self.cluster(timeout=timeout)
        http = follow.primary_http(view)
        if http is None:
            raise SundialError("NOT_PRIMARY", f"{view.node} names no primary with an HTTP "
                               f"address (epoch {view.epoch})")
        return http, view.primary, view.epoch

    # ---- Connecting ----------------------------------------------------------------------

    def _current(self, any_node=False):
        """The connection to use now, if there is one: open, of this loop, and (following)
        the primary's unless `any_node`. A connection of an ended loop is dropped."""
        conn = self._conn
        if conn is None or conn.closed:
            return None
        if conn.loop is not asyncio.get_running_loop():
            # Used from another event loop (a second asyncio.run): the old one's connection
            # and lock belong to it, so this loop gets its own.
            conn.close()
            self._conn, self._connect_lock, self._on_primary = None, None, False
            return None
        if self._seeds is not None and not (self._on_primary or any_node):
            return None
        return conn

    async def _acquire(self, deadline, what):
        loop = asyncio.get_running_loop()
        if self._connect_lock is None or self._lock_loop is not loop:
            self._connect_lock, self._lock_loop = asyncio.Lock(), loop
        lock = self._connect_lock
        try:
            await asyncio.wait_for(lock.acquire(), max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            raise unavailable(f"{self._address}: {what} before the deadline") from None
        return lock

    async def _connection(self, deadline, any_node=False):
        """The live connection, made (with backoff) if there is none, by `deadline`. Following
        a cluster: the primary's (any node's, `any_node`)."""
        if self._seeds is not None:
            return await self._primary_connection(deadline, any_node)
        conn = self._current()
        if conn is not None:
            return conn
        lock = await self._acquire(deadline, "not connected")
        try:
            backoff = follow.Backoff()
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
                await asyncio.sleep(backoff.next(remaining))
        finally:
            lock.release()

    async def _connect(self, deadline, host=None, port=None, address=None):
        """A new connection (authenticated) to the client's address, or to `host`:`port`."""
        if host is None:
            host, port, address = self._host, self._port, self._address
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        last = OSError(f"{address}: no address")
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
            reader, writer = await tls_module.open_async(sock, self._tls, host, address,
                                                         deadline)
        conn = _Connection(sock, reader, writer, address)
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

    # ---- Following a cluster's primary (the rules are follow.py's) -----------------------

    def _default_id(self):
        return codec.new_message_id() if self._seeds is not None else None

    async def _primary_connection(self, deadline, any_node=False, hint=None):
        """Following: the connection to the primary (with `any_node`, to any node that
        answers), looked for with backoff until `deadline`; first at `hint`. Raises the last
        error (NOT_PRIMARY: nodes answer but none leads; UNAVAILABLE: none answers)."""
        conn = self._current(any_node)
        if conn is not None:
            return conn
        lock = await self._acquire(deadline, "no primary found")
        try:
            backoff = follow.Backoff()
            while True:
                if self._closed:
                    raise unavailable(f"{self._address}: the client is closed")
                conn = self._current(any_node)
                if conn is not None:
                    return conn
                try:
                    await self._find_primary(deadline, hint)
                    last = None
                except SundialError as e:
                    if e.code == "UNAUTHENTICATED":
                        raise
                    last = e
                hint = None
                conn = self._current(any_node)
                if conn is not None:
                    return conn
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise last or unavailable(f"{self._address}: no primary")
                await asyncio.sleep(backoff.next(remaining))
        finally:
            lock.release()

    async def _ask_cluster(self, conn, deadline):
        """The Cluster answer of the node at the other end of `conn`."""
        call = codec.cluster()
        request_id = next(self._ids)
        future, _ = conn.submit(request_id, call.encode(request_id, None))
        if not await self._wait(conn, request_id, future, deadline):
            raise unavailable(f"{conn._address}: no answer to Cluster")
        return self._value(call, future.result())  # raises the connection's error

    async def _find_primary(self, deadline, hint=None):
        """One look for the primary, as Client._find_primary (follow.PrimarySearch). REQUIRES:
        the connect lock held."""
        self._on_primary = False
        search = follow.PrimarySearch(self._seeds, self._highest_epoch, hint)
        current = self._current(any_node=True)
        if current is not None and not hint:
            try:
                view = await self._ask_cluster(current, self._ask_deadline(deadline))
            except SundialError as e:
                search.failed(e)
                current.close()
                current = self._conn = None
            else:
                primary = search.answered(view)
                self._highest_epoch = search.highest_epoch
                if primary:
                    self._on_primary = True
                    return
        search.add_seeds()
        for host, port, text in search.order:  # grows while it is walked
            if self._closed:
                break
            if current is not None and not hint and text == self._address:
                continue  # asked above
            try:
                conn = await self._connect(self._ask_deadline(deadline), host, port, text)
            except (OSError, asyncio.TimeoutError) as e:
                search.failed(unavailable(f"{text}: cannot connect: {e or 'timed out'}"))
                continue
            try:
                view = await self._ask_cluster(conn, self._ask_deadline(deadline))
            except SundialError as e:
                conn.close()
                search.failed(e)
                continue
            primary, current = self._adopt(search, view, conn, current, host, port, text)
            if primary:
                return
        raise search.error()

    async def _execute_following(self, request, timeout, durability):
        """One Call, to the cluster's primary, sent again by follow.failure's rules."""
        start = time.monotonic()
        give_up = start + self._retry_budget
        backoff = follow.Backoff()
        hint = None
        tries = 0
        while True:
            tries += 1
            now = time.monotonic()
            conn = await self._primary_connection(max(give_up, now + timeout), request.any_node,
                                                  hint)
            request_id = next(self._ids)
            future, sent = conn.submit(request_id, request.encode(request_id, durability))
            if not await self._wait(conn, request_id, future, now + timeout + request.wait_s):
                error = unavailable(f"{request.name}: no reply from {conn._address} within "
                                    f"{timeout + request.wait_s:g} s")
                retry = follow.failure(request, error, sent=True, from_server=False,
                                       address=conn._address)
                conn.close(error)  # a node that stopped answering: look again
            elif future.exception() is not None:
                error = future.exception()
                retry = follow.failure(request, error, sent=sent, from_server=False,
                                       address=conn._address)
            else:
                error = codec.reply_error(future.result())
                if error is None:
                    return request.decode(future.result())
                retry = follow.failure(request, error, sent=True, from_server=True,
                                       address=conn._address)
            if retry.lost:
                self._lost_primary(conn)
            if not retry.again:
                raise error
            hint = retry.hint
            now = time.monotonic()
            if now >= give_up or self._closed:
                raise follow.gave_up(error, tries, now - start)
            if hint is None:
                await asyncio.sleep(backoff.next(give_up - now))

    # ---- Calling -------------------------------------------------------------------------

    async def _execute(self, request, timeout, durability=None):
        timeout = self._timeout if timeout is None else float(timeout)
        durability = self._durability if durability is None else codec._durability(durability)
        if self._seeds is not None:
            if isinstance(request, codec.Batch):
                return request.combine([await self._execute_following(call, timeout,
                                                                      durability)
                                        for call in request.calls])
            return await self._execute_following(request, timeout, durability)
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
