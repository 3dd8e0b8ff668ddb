"""watch: the Subscribe operation, over the server's WebSocket port (docs/protocol.md,
Subscriptions; docs/clients/python.md, "Watching").

The server offers Subscribe on WebSocket only (``/ws`` on its HTTP port, 7401 by default), so a
watch has a connection of its own beside the client's TCP one: it connects, upgrades (with
``Authorization: Bearer TOKEN`` when the client has a token, over TLS when the client uses TLS),
sends one binary message holding the Subscribe request (the same FlatBuffer as on TCP, without
the length prefix), waits for its answer, and then yields events in the order the server sent
them. Nothing is replayed: a watch sees the changes after its Subscribe was answered.

The WebSocket protocol is wsproto's (Debian's python3-wsproto): it parses and writes frames
and the upgrade without doing any I/O, so one implementation serves the blocking Watch (a
socket, TLS or not) and AsyncWatch (asyncio streams). A watch of a client given one address
does not reconnect: when its connection ends it raises UNAVAILABLE, and a new watch starts
from the changes after its own Subscribe (read the state with count/browse if the gap matters).

Following a cluster (a client given several addresses, without ``http_addr``), a watch is
given ``locate``: the client's way to the primary's HTTP address (a Cluster request, follow.py).
It subscribes there; when the subscription ends with UNAVAILABLE (the connection ended, the
server closed it), it delivers the events it already read, then locates the primary again and
subscribes again, with follow.Backoff, until ``retry_budget`` seconds have passed without a
subscription standing (then it raises the last error). Once subscribed again it yields a
records.Resubscribed marker: the changes between the last event before it and its ``time``
were missed, and nothing replays them.
"""

import asyncio
import collections
import socket
import ssl
import threading
import time

from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping,
                            RejectConnection, RejectData, Request, TextMessage)

from . import codec, follow, records
from . import tls as tls_module
from .errors import SundialError, unavailable

SUBSCRIBE_REQUEST_ID = 1
READ_CHUNK = 65536
HTTP_CODES = {401: "UNAUTHENTICATED", 403: "UNAUTHENTICATED", 404: "NOT_FOUND",
              503: "UNAVAILABLE"}


class _Session:
    """The protocol of one watch, without I/O: feed it what the socket read
    (``receive``), write what it has for the socket (``take_output``), and take its events.

    States: upgrading → subscribing → watching; ``error`` is set when it cannot go on (a
    refused upgrade or Subscribe, a SubscriptionClosed, the connection's end).
    """

    def __init__(self, address_text, token, subscribe_call, stats):
        self.address = address_text
        self.stats = stats
        self.ws = WSConnection(ConnectionType.CLIENT)
        headers = [(b"authorization", b"Bearer " + token.encode())] if token else []
        self.output = bytearray(self.ws.send(Request(host=address_text, target="/ws",
                                                     extra_headers=headers)))
        self.subscribe_body = subscribe_call.encode(SUBSCRIBE_REQUEST_ID, None)[4:]
        self.state = "upgrading"
        self.events = collections.deque()
        self.error = None
        self._message = bytearray()  # a binary message arriving in fragments
        self._reject_status = None

    def take_output(self):
        data, self.output = bytes(self.output), bytearray()
        return data

    def receive(self, data):
        """Feeds bytes read from the socket; b"" is the end of the connection."""
        self.ws.receive_data(data if data else None)
        for event in self.ws.events():
            if self.error is not None:
                break
            if isinstance(event, AcceptConnection):
                self.state = "subscribing"
                self.output += self.ws.send(BytesMessage(data=self.subscribe_body))
            elif isinstance(event, RejectConnection):
                self._reject_status = event.status_code
                if not event.has_body:
                    self._refused(b"")
            elif isinstance(event, RejectData):
                if event.body_finished:
                    self._refused(event.data)
            elif isinstance(event, BytesMessage):
                self._message += event.data
                if event.message_finished:
                    frame, self._message = bytes(self._message), bytearray()
                    self._frame(frame)
            elif isinstance(event, TextMessage):
                self._fail(SundialError("INTERNAL", f"{self.address}: a text message on a "
                                        "binary watch", origin="connection"))
            elif isinstance(event, Ping):
                self.output += self.ws.send(event.response())
            elif isinstance(event, CloseConnection):
                if self.ws.state.name == "REMOTE_CLOSING":
                    self.output += self.ws.send(event.response())
                self._fail(unavailable(f"{self.address}: the server closed the watch "
                                       f"(WebSocket close {event.code}"
                                       f"{': ' + event.reason if event.reason else ''})"))
        if not data and self.error is None:
            self._fail(unavailable(f"{self.address}: the server closed the connection"))

    def _refused(self, body):
        status = self._reject_status
        text = body.decode("utf-8", "replace").strip()
        self._fail(SundialError(HTTP_CODES.get(status, "UNAVAILABLE"),
                                f"watch: {self.address} refused the WebSocket upgrade: HTTP "
                                f"{status}{': ' + text if text else ''}", origin="server"))

    def _frame(self, frame):
        try:
            kind, value = codec.read_server_message(frame)
        except Exception as e:  # no Verifier in the Python runtime: a bad frame raises
            self._fail(SundialError("INTERNAL", f"{self.address}: unreadable message "
                                    f"({type(e).__name__}: {e})", origin="connection"))
            return
        if kind == "response":
            request_id, response = value
            error = codec.reply_error(response)
            if error is not None:
                self._fail(error)
            elif request_id == SUBSCRIBE_REQUEST_ID and self.state == "subscribing":
                self.state = "watching"
        elif kind == "closed":
            self._fail(SundialError("UNAVAILABLE", f"watch: {value}", origin="server"))
        elif self.state == "watching" and (self.stats or
                                           isinstance(value, records.MessageEvent)):
            self.events.append(value)

    def _fail(self, error):
        if self.error is None:
            self.error = error


def _now_ms():
    return int(time.time() * 1000)


def _follows(error):
    """Whether a following watch subscribes again after `error` ended its subscription (or a
    try to subscribe): the connection or the server's subscription ended, no node answers, or
    none leads yet."""
    return error.code in ("UNAVAILABLE", "NOT_PRIMARY")


def _moved(subscribed, located):
    """The error that ends a following watch's subscription to `subscribed` (node, epoch) when
    the primary is now `located` (http, node, epoch) elsewhere or at another epoch, else None."""
    node, epoch = subscribed
    _, now_node, now_epoch = located
    if (now_node, now_epoch) == (node, epoch):
        return None
    return SundialError("NOT_PRIMARY", f"watch: {node} (epoch {epoch}) is no longer the primary; "
                        f"{now_node} is (epoch {now_epoch})", origin="connection")


def _retry_delay(watch, error, start, tries, backoff):
    """Following, a try to subscribe failed with `error`: how long to wait before the next, or
    raises (and keeps as watch._failed) what ends the watch for good: an error a new primary
    would not cure, or the retry budget spent."""
    now = time.monotonic()
    if not _follows(error) or now - start >= watch._retry_budget:
        watch._failed = follow.gave_up(error, tries, now - start) if _follows(error) else error
        raise watch._failed from None
    return backoff.next(start + watch._retry_budget - now)


def _subscribed(watch, http, node, epoch, ended):
    """Following, subscribed on `node`: the Resubscribed marker that marks the gap since the
    subscription `ended` (None for the first subscription, which has no gap)."""
    watch._subscribed = (node, epoch)
    watch._heard = time.monotonic()
    if ended is None:
        return None
    watch.resubscriptions += 1
    return records.Resubscribed(address=http[2], node=node, epoch=epoch, time=_now_ms(),
                                error=ended)


class Watch:
    """A blocking watch; made by ``Client.watch`` (subscribed when it returns).

    Iterate it for events (MessageEvent, and StatsTick when asked for), or call
    ``next(timeout)``. ``close()`` may be called from any thread: an iteration waiting in
    another thread then ends (StopIteration), as does every later one. The connection's end,
    or the server ending the subscription (it fell behind), raises UNAVAILABLE; following a
    cluster, the watch subscribes again on the primary instead and yields a Resubscribed
    marker (the module's docstring). ``address`` is the HTTP address subscribed to;
    ``resubscriptions`` counts the markers.

    Thread safety: one thread iterates; close() from any.
    """

    def __init__(self, connection, queue="*", filter=None, *, ids=None,
                 max_events_per_sec=None, stats=False, queue_stats=False, timeout=None,
                 locate=None, retry_budget=follow.DEFAULT_RETRY_BUDGET_S):
        self._call = codec.subscribe(queue, filter, ids, max_events_per_sec, queue_stats)
        # From the client: ((host, port, "host:port") of its HTTP port, token, TLS, timeout).
        http, self._token, self._tls, default_timeout = connection
        self._timeout = default_timeout if timeout is None else float(timeout)
        self._stats = stats or queue_stats
        self._locate = locate  # following: timeout -> (http, node, epoch) of the primary
        self._retry_budget = retry_budget
        self._address = http[2]
        self._session = None
        self._sock = None
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False
        self._subscribed = None  # following: (node, epoch) subscribed to
        self._heard = time.monotonic()  # when the server last sent something
        self._failed = None  # following: the error that ended the watch for good
        self.resubscriptions = 0
        if locate is None:
            self._subscribe(http)
        else:
            self._follow(None)

    @property
    def address(self):
        return self._address

    def _subscribe(self, http):
        """Connects to `http` (host, port, text) and subscribes, within the timeout."""
        host, port, address = http
        timeout = self._timeout
        session = _Session(address, self._token, self._call, self._stats)
        deadline = time.monotonic() + timeout
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = tls_module.wrap(sock, self._tls, host, address,
                                       deadline - time.monotonic())
        except OSError as e:
            raise unavailable(f"watch: cannot connect to {address}: {e}") from None
        with self._lock:
            if self._closed:
                sock.close()
                raise StopIteration
            self._sock, self._session, self._address = sock, session, address
        try:
            while self._session.state != "watching":
                self._step(deadline)
                if time.monotonic() >= deadline and self._session.state != "watching":
                    raise unavailable(f"watch: {address}: not subscribed within {timeout:g} s")
        except BaseException:
            self._sock.close()
            raise

    def _follow(self, ended):
        """Following: locates the primary and subscribes there, again after failures (backoff)
        until the retry budget is spent. `ended`: the error that ended the last subscription
        (None for the first). Returns the Resubscribed marker (None for the first)."""
        start = time.monotonic()
        backoff = follow.Backoff()
        tries = 0
        while True:
            tries += 1
            try:
                http, node, epoch = self._locate(self._timeout)
                self._subscribe(http)
            except SundialError as e:
                delay = _retry_delay(self, e, start, tries, backoff)
                if self._closed:
                    raise StopIteration from None
                time.sleep(delay)
                continue
            return _subscribed(self, http, node, epoch, ended)

    def _step(self, deadline):
        """Writes what the session has, reads once (until `deadline`), feeds the session;
        raises its error."""
        if self._session.error is not None:
            raise self._session.error
        out = self._session.take_output()
        if out:
            self._sock.sendall(out)
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return
        self._sock.settimeout(remaining)
        try:
            data = self._sock.recv(READ_CHUNK)
        except socket.timeout:
            return
        except OSError as e:
            if self._closed:
                return
            raise unavailable(f"watch: {self._address}: connection lost: {e}") from None
        if self._closed:  # close() shut the socket down under this read
            return
        self._heard = time.monotonic()
        self._session.receive(data)
        out = self._session.take_output()
        if out:
            try:
                self._sock.sendall(out)
            except OSError:
                pass  # the error, if any, is the session's
        if self._session.error is not None:
            # Ended (the close handshake answered, if the server started one): close the
            # socket now, for a server draining on SIGTERM waits for the client's end of it.
            self._sock.close()
        if self._session.error is not None and not self._session.events:
            raise self._session.error

    def _check_primary(self):
        """Following: the error that ends the subscription when another node (or epoch) leads
        now, else None (also when the primary cannot be asked: the watch waits on)."""
        self._heard = time.monotonic()
        try:
            return _moved(self._subscribed, self._locate(self._timeout))
        except SundialError:
            return None

    def next(self, timeout=None):
        """The next event, or None if `timeout` seconds pass first (None: wait for one).
        Raises StopIteration once closed. Following a cluster, a re-subscription may make it
        take longer (up to the retry budget)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._closed:
                raise StopIteration
            self._reading = True
        try:
            if self._failed is not None:
                raise self._failed
            while not self._session.events:
                if self._closed:
                    raise StopIteration
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None
                step_deadline = deadline
                if self._locate is not None:
                    # Silent for `timeout`: is the node subscribed to still the primary (a
                    # paused or cut-off one sends nothing and closes nothing)?
                    check_at = self._heard + self._timeout
                    if now >= check_at:
                        moved = self._check_primary()
                        if moved is not None:
                            self._sock.close()
                            return self._follow(moved)
                        continue
                    step_deadline = check_at if deadline is None else min(deadline, check_at)
                try:
                    self._step(step_deadline)
                except SundialError as e:
                    if self._locate is None or self._closed or not _follows(e):
                        raise
                    self._sock.close()
                    return self._follow(e)
                if self._closed:
                    raise StopIteration
            return self._session.events.popleft()
        finally:
            with self._lock:
                self._reading = False
                if self._closed:
                    self._sock.close()

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def close(self):
        """Ends the watch (the server drops its subscriptions with the connection)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        try:
            # The plain socket call: SSLSocket.shutdown would tear down its SSL object under a
            # thread that may be reading it. The reader sees the end and closes the socket.
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass
        if not reading:
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Watch({self._address!r})"


class AsyncWatch:
    """A watch for asyncio; made by ``AsyncClient.watch``. Subscribed by ``async with`` (or
    ``await``, or the first ``async for`` step); then ``async for event in watch``, or
    ``await watch.next(timeout)``. ``await watch.close()`` ends it. Following a cluster it
    subscribes again after a failover, as Watch does, and yields a Resubscribed marker."""

    def __init__(self, connection, queue="*", filter=None, *, ids=None,
                 max_events_per_sec=None, stats=False, queue_stats=False, timeout=None,
                 locate=None, retry_budget=follow.DEFAULT_RETRY_BUDGET_S):
        self._call = codec.subscribe(queue, filter, ids, max_events_per_sec, queue_stats)
        http, self._token, self._tls, default_timeout = connection
        self._http = http
        self._address = http[2]
        self._timeout = default_timeout if timeout is None else float(timeout)
        self._stats = stats or queue_stats
        self._locate = locate  # following: async timeout -> (http, node, epoch) of the primary
        self._retry_budget = retry_budget
        self._session = None
        self._reader = self._writer = None
        self._opening = None
        self._closed = False
        self._subscribed = None  # following: (node, epoch) subscribed to
        self._heard = time.monotonic()  # when the server last sent something
        self._failed = None  # following: the error that ended the watch for good
        self.resubscriptions = 0

    @property
    def address(self):
        return self._address

    async def _open(self):
        if self._opening is None:
            if self._locate is None:
                self._opening = asyncio.ensure_future(self._connect(self._http))
            else:
                self._opening = asyncio.ensure_future(self._follow(None))
        await self._opening
        return self

    async def _follow(self, ended):
        """As Watch._follow."""
        start = time.monotonic()
        backoff = follow.Backoff()
        tries = 0
        while True:
            tries += 1
            try:
                http, node, epoch = await self._locate(self._timeout)
                await self._connect(http)
            except SundialError as e:
                delay = _retry_delay(self, e, start, tries, backoff)
                if self._closed:
                    raise StopAsyncIteration from None
                await asyncio.sleep(delay)
                continue
            return _subscribed(self, http, node, epoch, ended)

    async def _connect(self, http):
        host, port, address = http
        self._address = address
        self._session = _Session(address, self._token, self._call, self._stats)
        deadline = time.monotonic() + self._timeout
        try:
            if self._tls is not None:
                self._reader, self._writer = await asyncio.wait_for(asyncio.open_connection(
                    host, port, ssl=self._tls.context,
                    server_hostname=self._tls.hostname_for(host)), self._timeout)
            else:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), self._timeout)
        except (ssl.SSLError, ssl.CertificateError) as e:
            if tls_module.permanent(e):
                raise tls_module.handshake_error(address, e) from None
            raise unavailable(f"watch: cannot connect to {address}: {e}") from None
        except (OSError, asyncio.TimeoutError) as e:
            raise unavailable(f"watch: cannot connect to {address}: "
                              f"{e or 'timed out'}") from None
        if self._closed:
            self._writer.close()
            raise StopAsyncIteration
        try:
            while self._session.state != "watching":
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise unavailable(f"watch: {address}: not subscribed within "
                                      f"{self._timeout:g} s")
                await self._step(remaining)
        except BaseException:
            self._writer.close()
            raise

    async def _step(self, timeout):
        out = self._session.take_output()
        if out:
            self._writer.write(out)
        if self._session.error is not None:
            raise self._session.error
        try:
            data = await asyncio.wait_for(self._reader.read(READ_CHUNK), timeout)
        except asyncio.TimeoutError:
            return
        except OSError as e:
            if self._closed:
                return
            raise unavailable(f"watch: {self._address}: connection lost: {e}") from None
        if self._closed:  # close() from another task ended this read
            return
        self._heard = time.monotonic()
        self._session.receive(data)
        out = self._session.take_output()
        if out and not self._writer.is_closing():
            self._writer.write(out)
        if self._session.error is not None:
            self._writer.close()  # as Watch._step: a draining server waits for it
        if self._session.error is not None and not self._session.events:
            raise self._session.error

    async def _check_primary(self):
        """As Watch._check_primary."""
        self._heard = time.monotonic()
        try:
            return _moved(self._subscribed, await self._locate(self._timeout))
        except SundialError:
            return None

    async def next(self, timeout=None):
        """The next event, or None if `timeout` seconds pass first. Raises
        StopAsyncIteration once closed."""
        if self._closed:
            raise StopAsyncIteration
        await self._open()
        if self._failed is not None:
            raise self._failed
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._session.events:
            if self._closed:
                raise StopAsyncIteration
            now = time.monotonic()
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                return None
            if self._locate is not None:
                check_at = self._heard + self._timeout  # as Watch.next
                if now >= check_at:
                    moved = await self._check_primary()
                    if moved is not None:
                        self._writer.close()
                        return await self._follow(moved)
                    continue
                remaining = check_at - now if remaining is None else min(remaining,
                                                                         check_at - now)
            try:
                await self._step(remaining)
            except SundialError as e:
                if self._locate is None or self._closed or not _follows(e):
                    raise
                self._writer.close()
                return await self._follow(e)
        return self._session.events.popleft()

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self.next()

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self):
        return await self._open()

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        self._closed = True
        if self._writer is not None and not self._writer.is_closing():
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    def __repr__(self):
        return f"AsyncWatch({self._address!r})"
