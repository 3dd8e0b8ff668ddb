"""Client: the blocking, thread-safe, pipelined client of sundiald's binary TCP protocol.

One TCP connection, shared by every thread that calls the client. A caller writes its request
(under a send lock) and waits for its own reply; one background reader thread per connection
reads replies and hands each to its caller by ``request_id``. So requests from many threads
are in flight at once (pipelined), and a long-poll dequeue never holds back another thread's
call. ``enqueue_batch`` and ``complete_batch`` send their requests of 1000 items back to back.

Connecting is lazy and repeated: the first call connects; after the connection is lost, the
next call connects again, retrying with exponential backoff (50 ms doubling to 2 s, jittered)
until that call's deadline. Requests that were never written, and reads, are sent again on the
new connection; a mutation that was written when the connection broke fails with
UNAVAILABLE (origin "connection"): it may or may not have been applied, and only the caller
knows whether repeating it is safe (an enqueue with your own id, a complete: yes; a dequeue:
it would lease again).

Over TLS (``tls=True``) the connection is a TlsConnection: callers still write their own
requests, under a lock that keeps OpenSSL on one thread at a time, and an I/O thread reads
(tls.py says why).

Deadlines: every call has one (``timeout`` seconds, default the client's, plus a long poll's
``wait_ms``). When it passes the call raises UNAVAILABLE; the connection stays open and a
late reply is dropped.

Clusters (docs/clients/python.md, "Clusters"): given two or more addresses (a list, or one
string with commas), the client follows the cluster's primary. It finds it with the Cluster
request (the node that says it is the primary, at an epoch no older than any seen; a node that
names another sends the client there) and sends every call there (``cluster()`` goes to any
node when none leads). On NOT_PRIMARY, a lost connection, a call past its deadline or the
server's UNAVAILABLE it looks again and sends the call again, with a jittered backoff (50 ms
doubling to 2 s), until ``retry_budget`` seconds (default 20) after the call began; then it
raises the last error, its message saying so. A call refused with NOT_PRIMARY is always sent
again (nothing was applied); after an unknown outcome only those whose Call allows it
(codec.Call.resend: reads, enqueues with ids, complete/fail/extend with their tokens,
dequeues, cancels; not delete_queue, redrive or switchover). Enqueued messages without an id
get one of the client's own (codec.new_message_id), so a resend is a duplicate, never a
second message. Batches are sent one request after the other, each followed like a call.
Given one address, none of this happens: the client is the single-node client above.
The rules are follow.py's, shared with AsyncClient (aio.py); each node gets ``timeout`` to
connect and answer Cluster; a watch subscribes again after a failover (watch.py).
"""

import itertools
import os
import random
import select
import selectors
import socket
import ssl
import threading
import time
from _thread import allocate_lock

from . import codec
from . import tls as tls_module
from .address import format_address, parse_address
from . import follow
from .errors import SundialError, invalid_argument, unavailable
from .follow import (DEFAULT_HTTP_PORT, DEFAULT_RETRY_BUDGET_S, RECONNECT_INITIAL_S,  # noqa: F401
                     RECONNECT_MAX_S, answers_as_primary, cluster_addresses)
from .operations import Operations

DEFAULT_TIMEOUT_S = 10.0
TLS_READ_CHUNK = 256 * 1024
TLS_WRITE_CHUNK = 256 * 1024  # per SSL_write: several 16 KiB records


def client_settings(addr, token, timeout, durability):
    """What Client and AsyncClient are given, checked: (host, port, address, token, timeout,
    durability)."""
    host, port = parse_address(addr)
    if token is not None and not isinstance(token, str):
        raise invalid_argument("token: must be a str")
    return (host, port, format_address(host, port), token, float(timeout),
            codec._durability(durability))


def http_address(host, http_addr):
    """(host, port, text) of the HTTP/WebSocket port: `http_addr`, else `host` port 7401."""
    if http_addr is not None:
        host, port = parse_address(http_addr, default_port=DEFAULT_HTTP_PORT)
    else:
        port = DEFAULT_HTTP_PORT
    return host, port, format_address(host, port)


def peer_closed(sock):
    """True when the peer has closed `sock` (EOF or an error is waiting on it). A write to
    such a socket still succeeds locally, so without this check a request sent on an idle
    connection to a server that has died would count as sent. One non-blocking peek."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def peer_hung_up(sock):
    """peer_closed for a socket that must not be read here (TLS: the bytes belong to the
    SSL object): whether the peer has shut down or reset the connection, from poll(2)."""
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP)
    return any(mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
               for _, mask in poller.poll(0))


class Pending:
    """One request waiting for its reply: resolved exactly once, by the reader thread (a
    reply) or by the connection's close (an error). Waiting is a lock acquire, the cheapest
    blocking primitive CPython has."""

    __slots__ = ("_lock", "response", "error", "callback", "sent", "done")

    def __init__(self, callback=None):
        self._lock = allocate_lock()
        self._lock.acquire()
        self.response = None
        self.error = None
        self.callback = callback
        self.sent = False  # written to the socket (a mutation then may have been applied)
        self.done = False

    def resolve(self, response, error):
        # REQUIRES: called once (Connection pops the entry before resolving it).
        self.response, self.error, self.done = response, error, True
        self._lock.release()
        if self.callback is not None:
            self.callback(self)

    def wait(self, timeout):
        return self._lock.acquire(timeout=max(timeout, 0))


class Replies:
    """The requests in flight on one connection, matched to their replies by ``request_id``,
    and the error that closed it. Connection (plain TCP) and tls.TlsConnection add the socket.

    Thread safety: every method may be called from any thread; ``_lock`` guards ``_pending``
    and ``_closed``. Once closed, every request in flight has been resolved with the close's
    error and later submits fail without sending.
    """

    def __init__(self, address_text):
        self.pid = os.getpid()  # a forked child must not use its parent's connection
        self._address = address_text
        self._lock = threading.Lock()
        self._pending = {}
        self._closed = None  # the SundialError it closed with

    @property
    def closed(self):
        return self._closed is not None

    def forget(self, request_id):
        """Stops waiting for `request_id` (its deadline passed); a late reply is dropped."""
        with self._lock:
            self._pending.pop(request_id, None)

    def _register(self, request_id, pending):
        """Adds `pending`. Returns whether nothing else was in flight, or None when the
        connection is closed (`pending` is then resolved with the close's error)."""
        with self._lock:
            if self._closed is None:
                idle = not self._pending
                self._pending[request_id] = pending
                return idle
            error = self._closed
        pending.resolve(None, error)
        return None

    def _close_pending(self, error):
        """Marks the connection closed; the requests that were in flight, or None if it was
        closed already. The caller resolves them after closing its socket."""
        with self._lock:
            if self._closed is not None:
                return None
            self._closed = error
            pending, self._pending = self._pending, {}
        return pending

    def _deliver(self, frame):
        """Hands one reply frame to its request. Returns the error that must close the
        connection (a frame that cannot be read, the server's answer to a frame it could not
        use), else None."""
        try:
            reply = codec.read_reply(frame)
        except Exception as e:  # the runtime has no Verifier: a bad frame raises
            return SundialError("INTERNAL", f"{self._address}: unreadable reply frame "
                                f"({type(e).__name__}: {e})", origin="connection")
        if reply is None:  # an event: TCP carries none, and nobody asked for one
            return None
        request_id, response = reply
        if request_id == 0:
            # The server's answer to a frame it could not use; it closes the connection after
            # it, failing everything in flight.
            return codec.reply_error(response) or SundialError(
                "INTERNAL", "reply with request_id 0", origin="connection")
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.resolve(response, None)
        return None


def frame_length_error(address_text, length):
    """The error for a reply frame's length prefix, or None when it is acceptable."""
    if length == 0 or length > codec.MAX_REPLY_BYTES:
        return SundialError("INTERNAL", f"{address_text}: reply frame of {length} bytes",
                            origin="connection")
    return None


class Connection(Replies):
    """One plain TCP connection: callers write their requests themselves (under the send lock),
    a reader thread reads the replies.

    Thread safety: submit may be called from any thread. Once closed (by close(), or by the
    reader on EOF, an I/O error or a frame it cannot read), every request in flight is resolved
    with the close's error and later submits fail without sending.
    """

    def __init__(self, sock, address_text):
        super().__init__(address_text)
        self._sock = sock
        self._file = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"sundial-reader {address_text}")
        self._reader.start()

    def submit(self, request_id, frame, pending):
        """Registers `pending` under `request_id` and writes `frame`. If the connection is
        closed (before or while writing), `pending` is resolved with the error; its ``sent``
        says whether the frame may have reached the server."""
        idle = self._register(request_id, pending)
        if idle is None:
            return
        if idle and peer_closed(self._sock):
            # The server went away while the connection was idle and the reader has not seen
            # it yet: the request is not written, so the caller may send it again.
            self.close(unavailable(f"{self._address}: the server closed the connection"))
            return
        try:
            with self._send_lock:
                pending.sent = True
                self._sock.sendall(frame)
        except OSError as e:
            self.close(unavailable(f"{self._address}: connection lost while sending: {e}"))

    def close(self, error=None):
        error = error or unavailable(f"{self._address}: connection closed by the client")
        pending = self._close_pending(error)
        if pending is None:
            return
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for p in pending.values():
            p.resolve(None, error)

    def _read_loop(self):
        read = self._file.read
        header = codec.HEADER
        error = None
        try:
            while True:
                head = read(4)
                if len(head) < 4:
                    error = unavailable(f"{self._address}: the server closed the connection")
                    break
                (length,) = header.unpack(head)
                error = frame_length_error(self._address, length)
                if error is not None:
                    break
                frame = read(length)
                if len(frame) < length:
                    error = unavailable(f"{self._address}: the server closed the connection "
                                        "mid-frame")
                    break
                error = self._deliver(frame)
                if error is not None:
                    break
        except (OSError, ValueError) as e:  # ValueError: the file was closed under us
            error = unavailable(f"{self._address}: connection lost: {e}")
        self.close(error)
        self._file.close()  # with the socket closed too, this releases the descriptor


class TlsConnection(Replies):
    """One TLS connection of the blocking client (tls.py says why it differs from Connection).

    Every call into the SSL object (a read or a write) is made under ``_ssl_lock``, so OpenSSL
    never runs on two threads at once; the socket is non-blocking, so nobody holds that lock
    while waiting. A caller appends its frame to ``_out`` and writes what it can itself (no
    hand-off on the common path); what the socket does not take is left in ``_out`` for the
    I/O thread, which it then wakes. The I/O thread waits in a selector on the socket (for
    reading, and for writing while ``_out`` holds bytes the socket refused) and on a wake-up
    socketpair; it reads replies (under the lock), and hands each to its caller (outside it:
    a callback may submit).

    A request counts as sent (``Pending.sent``: a mutation may have been applied) once its
    first byte has gone to the socket: ``_written`` is the stream offset written so far, and
    each request remembers where its frame starts.
    """

    def __init__(self, sock, address_text):
        super().__init__(address_text)
        self._sock = sock
        self._sock.setblocking(False)
        self._ssl_lock = threading.Lock()  # held for each non-blocking call into the SSL object
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._out = bytearray()  # guarded by _lock; consumed under _ssl_lock
        self._queued = 0  # stream offset after the last frame queued; guarded by _lock
        self._written = 0  # stream offset written to the socket; guarded by _lock
        self._starts = {}  # request_id -> its frame's start offset; guarded by _lock
        self._blocked = False  # the socket refused bytes: the I/O thread waits to write them
        self._stop = None  # the error close() was given, for the I/O thread; guarded by _lock
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sundial-tls {address_text}")
        self._thread.start()

    @property
    def closed(self):
        return self._closed is not None or self._stop is not None

    def submit(self, request_id, frame, pending):
        """Registers `pending` and writes `frame` (what the socket does not take now, the I/O
        thread writes). If the connection is closed, `pending` is resolved with the error."""
        with self._lock:
            if self._closed is not None:
                error = self._closed
            else:
                error = None
                idle = not self._pending
                self._pending[request_id] = pending
                self._starts[request_id] = self._queued
                self._queued += len(frame)
                self._out += frame
        if error is not None:
            pending.resolve(None, error)
            return
        if idle and peer_hung_up(self._sock):
            # As Connection.submit: gone while idle, so the request is not written and may be
            # sent again on a new connection (_finish resolves it with `sent` false).
            self._fail(unavailable(f"{self._address}: the server closed the connection"))
            return
        with self._ssl_lock:
            if self._closed is not None or self._stop is not None:
                return  # closing: _finish resolves `pending`
            try:
                self._flush()
            except OSError as e:
                self._fail(unavailable(f"{self._address}: connection lost while sending: {e}"))
                return
        if self._blocked:
            self._wake()

    def forget(self, request_id):
        with self._lock:
            self._pending.pop(request_id, None)
            self._starts.pop(request_id, None)

    def close(self, error=None):
        """Closes from any thread; the I/O thread closes the socket and resolves what is in
        flight (or this thread, when it is the I/O thread)."""
        self._fail(error or unavailable(f"{self._address}: connection closed by the client"))

    def _fail(self, error):
        with self._lock:
            if self._closed is not None or self._stop is not None:
                return
            self._stop = error
        if threading.current_thread() is self._thread:
            self._finish(error)
        else:
            self._wake()

    def _wake(self):
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # woken already (the pair's buffer is full), or closed with the connection

    def _flush(self):
        """Writes `_out` until it is empty or the socket refuses more (then `_blocked`).
        REQUIRES: _ssl_lock held."""
        while True:
            with self._lock:
                data = bytes(self._out[:TLS_WRITE_CHUNK])
            if not data:
                self._blocked = False
                return
            try:
                n = self._sock.send(data)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                self._blocked = True
                return
            with self._lock:
                del self._out[:n]
                self._written += n

    def _read_available(self, chunk, inbound):
        """Reads what the socket and OpenSSL hold into `inbound`; False at EOF.
        REQUIRES: _ssl_lock held."""
        while True:
            try:
                n = self._sock.recv_into(chunk)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            if n == 0:
                return False
            inbound += memoryview(chunk)[:n]

    def _deliver_from(self, buffer):
        """Delivers every whole frame at the front of `buffer`; the error that must close the
        connection, else None."""
        view = memoryview(buffer)
        pos = 0
        try:
            while len(buffer) - pos >= 4:
                (length,) = codec.HEADER.unpack_from(view, pos)
                error = frame_length_error(self._address, length)
                if error is not None:
                    return error
                if len(buffer) - pos - 4 < length:
                    break
                frame = bytes(view[pos + 4:pos + 4 + length])
                pos += 4 + length
                error = self._deliver(frame)
                if error is not None:
                    return error
        finally:
            view.release()
            del buffer[:pos]
        return None

    def _run(self):
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        selector.register(self._sock, selectors.EVENT_READ)
        events = selectors.EVENT_READ
        inbound = bytearray()
        chunk = bytearray(TLS_READ_CHUNK)
        error = None
        try:
            while error is None:
                with self._lock:
                    error = self._stop
                if error is not None:
                    break
                wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._blocked else 0)
                if wanted != events:
                    selector.modify(self._sock, wanted)
                    events = wanted
                selector.select()
                try:
                    while self._wake_r.recv(4096):
                        pass
                except BlockingIOError:
                    pass
                with self._ssl_lock:
                    if self._closed is not None:
                        break
                    alive = self._read_available(chunk, inbound)
                    if self._blocked:
                        self._flush()
                error = self._deliver_from(inbound)
                if error is None and not alive:
                    error = unavailable(f"{self._address}: the server closed the connection")
        except (OSError, ValueError) as e:
            error = unavailable(f"{self._address}: connection lost: {e}")
        selector.close()
        self._finish(error)

    def _finish(self, error):
        with self._ssl_lock:  # no call into the SSL object is under way, and none follows
            with self._lock:
                if self._closed is not None:
                    return
                self._closed = error
                pending, self._pending = self._pending, {}
                for request_id, p in pending.items():
                    p.sent = self._starts.get(request_id, 0) < self._written
                self._starts.clear()
                self._out.clear()
            try:
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)  # no close_notify wait
            except OSError:
                pass
            self._sock.close()
            self._wake_r.close()
            self._wake_w.close()
        for p in pending.values():
            p.resolve(None, error)


class Client(follow.FollowingClient, Operations):
    """Blocking client; thread-safe and pipelined. See the module's docstring.

    ``Client("127.0.0.1:7400", token=None, timeout=10.0, durability="durable")``: ``token``
    is sent in an Auth request on every new connection; ``timeout`` is the default deadline of
    a call in seconds; ``durability`` the default of mutating calls. ``tls=True`` (implied by
    ``ca_file`` or ``server_hostname``): TLS, the server's certificate verified against
    ``ca_file`` (else the system's CAs) for ``server_hostname`` (else the address's host).
    ``http_addr``: the HTTP/WebSocket port ``watch`` uses (default: the host, port 7401).

    ``Client(["a:7400", "b:7400", "c:7400"])`` (or ``"a:7400,b:7400,c:7400"``): a cluster's
    nodes; the client follows the primary (the module's docstring, "Clusters"), retrying a
    call for up to ``retry_budget`` seconds.
    """

    __slots__ = ("_host", "_port", "_address", "_token", "_timeout", "_durability", "_tls",
                 "_http", "_http_given", "_ids", "_connect_lock", "_conn", "_closed", "_seeds",
                 "_retry_budget", "_on_primary", "_highest_epoch", "__weakref__")

    def __init__(self, addr="127.0.0.1:7400", token=None, *, timeout=DEFAULT_TIMEOUT_S,
                 durability="durable", tls=False, ca_file=None, server_hostname=None,
                 http_addr=None, retry_budget=DEFAULT_RETRY_BUDGET_S):
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
        self._ids = itertools.count(1)  # next() is atomic under the GIL; ids never repeat
        self._connect_lock = threading.Lock()
        self._conn = None
        self._closed = threading.Event()

    @property
    def address(self):
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

    def close(self):
        """Closes the connection; later calls raise UNAVAILABLE. Does not wait for a thread
        that is connecting: that one sees the close and gives up (its backoff is cut short)."""
        self._closed.set()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Client({self._address!r})"

    def watch(self, queue="*", filter=None, *, ids=None, max_events_per_sec=None, stats=False,
              queue_stats=False, timeout=None):
        """Subscribes to the changes of `queue` (a name, or "*" for every queue) over the
        server's WebSocket port (``http_addr``) and returns a Watch once the server has
        answered: iterate it for MessageEvents (and StatsTicks with ``stats=True``). Following
        a cluster (without ``http_addr``), it subscribes on the primary's HTTP port and again
        on the next primary after a failover, yielding a Resubscribed marker. See watch.py and
        docs/clients/python.md, "Watching"."""
        from .watch import Watch  # wsproto is needed only here

        locate = None
        if self._seeds is not None and not self._http_given:
            locate = self._primary_http
        return Watch((self._http, self._token, self._tls, self._timeout), queue, filter,
                     ids=ids, max_events_per_sec=max_events_per_sec, stats=stats,
                     queue_stats=queue_stats, timeout=timeout, locate=locate,
                     retry_budget=self._retry_budget)

    def _primary_http(self, timeout):
        """Following: the primary's HTTP address (follow.primary_http) from a Cluster answer,
        with the node's name and epoch; NOT_PRIMARY while the answer names none."""
        view = self.cluster(timeout=timeout)
        http = follow.primary_http(view)
        if http is None:
            raise SundialError("NOT_PRIMARY", f"{view.node} names no primary with an HTTP "
                               f"address (epoch {view.epoch})")
        return http, view.primary, view.epoch

    # ---- Connecting ----------------------------------------------------------------------

    def _connection(self, deadline, any_node=False):
        """The live connection, made (with backoff) if there is none, by `deadline`. Following
        a cluster: the primary's (any node's, `any_node`)."""
        if self._seeds is not None:
            return self._primary_connection(deadline, any_node)
        conn = self._conn
        if conn is not None and not conn.closed:
            if conn.pid == os.getpid():
                return conn
            # Forked: the socket is shared with the parent, so it is left open for it, and this
            # process makes its own (reader threads do not survive a fork).
            self._conn = None
        if not self._connect_lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            raise unavailable(f"{self._address}: not connected before the deadline")
        try:
            delay = RECONNECT_INITIAL_S
            last = None
            while True:
                if self._closed.is_set():
                    raise unavailable(f"{self._address}: the client is closed")
                conn = self._conn
                if conn is not None and not conn.closed:
                    return conn
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise unavailable(f"{self._address}: cannot connect: "
                                      f"{last or 'the deadline passed'}")
                try:
                    conn = self._connect(deadline)
                except OSError as e:
                    last = e
                else:
                    self._conn = conn
                    if self._closed.is_set():  # closed while connecting
                        self._conn = None
                        conn.close()
                        continue
                    return conn
                # Backoff with jitter, bounded by the deadline; close() cuts it short.
                self._closed.wait(min(delay * random.uniform(0.5, 1.0), max(remaining, 0)))
                delay = min(delay * 2, RECONNECT_MAX_S)
        finally:
            self._connect_lock.release()

    def _connect(self, deadline, host=None, port=None, address=None):
        """A new connection (authenticated) to the client's address, or to `host`:`port`."""
        if host is None:
            host, port, address = self._host, self._port, self._address
        sock = socket.create_connection((host, port),
                                        timeout=max(deadline - time.monotonic(), 0.001))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = tls_module.wrap(sock, self._tls, host, address, deadline - time.monotonic())
            conn = TlsConnection(sock, address)
        else:
            sock.settimeout(None)
            conn = Connection(sock, address)
        if self._token is not None:
            call = codec.auth(self._token)
            pending = Pending()
            request_id = next(self._ids)
            conn.submit(request_id, call.encode(request_id, None), pending)
            if not pending.wait(deadline - time.monotonic()):
                conn.close()
                raise socket.timeout("no answer to Auth")
            if pending.error is not None:
                conn.close()
                if pending.error.code == "UNAUTHENTICATED":
                    raise pending.error
                raise OSError(pending.error.message)
            error = codec.reply_error(pending.response)
            if error is not None:
                conn.close()
                raise error
        return conn

    # ---- Following a cluster's primary ---------------------------------------------------

    def _default_id(self):
        return codec.new_message_id() if self._seeds is not None else None

    def _primary_connection(self, deadline, any_node=False, hint=None):
        """Following: the connection to the primary (with `any_node`, to any node that
        answers), looked for with backoff until `deadline`; first at `hint`, where a node said
        the primary is. Raises the last error (NOT_PRIMARY: nodes answer but none leads;
        UNAVAILABLE: none answers)."""
        conn = self._conn
        if conn is not None and not conn.closed and conn.pid == os.getpid() and (
                self._on_primary or any_node):
            return conn
        if not self._connect_lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            raise unavailable(f"{self._address}: no primary found before the deadline")
        try:
            backoff = follow.Backoff()
            while True:
                if self._closed.is_set():
                    raise unavailable(f"{self._address}: the client is closed")
                conn = self._conn
                if conn is not None and not conn.closed and conn.pid == os.getpid() and (
                        self._on_primary or any_node):
                    return conn
                try:
                    self._find_primary(deadline, hint)
                    last = None
                except SundialError as e:
                    if e.code == "UNAUTHENTICATED":
                        raise
                    last = e
                hint = None
                conn = self._conn
                if conn is not None and not conn.closed and (self._on_primary or any_node):
                    return conn
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise last or unavailable(f"{self._address}: no primary")
                self._closed.wait(backoff.next(remaining))
        finally:
            self._connect_lock.release()

    def _ask_cluster(self, conn, deadline):
        """The Cluster answer of the node at the other end of `conn`."""
        call = codec.cluster()
        pending = Pending()
        request_id = next(self._ids)
        conn.submit(request_id, call.encode(request_id, None), pending)
        if not pending.wait(deadline - time.monotonic()):
            conn.forget(request_id)
            raise unavailable(f"{conn._address}: no answer to Cluster")
        if pending.error is not None:
            raise pending.error
        return self._value(call, pending.response)

    def _find_primary(self, deadline, hint=None):
        """One look for the primary (follow.PrimarySearch): the node connected to (unless a
        node named another), then `hint`, the seeds and any primary a node names. Adopts the
        primary's connection; while none leads, a connection to a node that answered (for
        cluster()). REQUIRES: _connect_lock held. Raises when no node answers as the
        primary."""
        self._on_primary = False
        search = follow.PrimarySearch(self._seeds, self._highest_epoch, hint)
        current = self._conn
        if current is not None and (current.closed or current.pid != os.getpid()):
            current = None
        if current is not None and not hint:
            try:
                view = self._ask_cluster(current, self._ask_deadline(deadline))
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
            if self._closed.is_set():
                break
            if current is not None and not hint and text == self._address:
                continue  # asked above
            try:
                conn = self._connect(self._ask_deadline(deadline), host, port, text)
            except OSError as e:
                search.failed(unavailable(f"{text}: cannot connect: {e}"))
                continue
            try:
                view = self._ask_cluster(conn, self._ask_deadline(deadline))
            except SundialError as e:
                conn.close()
                search.failed(e)
                continue
            primary, current = self._adopt(search, view, conn, current, host, port, text)
            if primary:
                return
        raise search.error()

    def _execute_following(self, request, timeout, durability):
        """One Call, to the cluster's primary, sent again by follow.failure's rules."""
        start = time.monotonic()
        give_up = start + self._retry_budget
        backoff = follow.Backoff()
        hint = None
        tries = 0
        while True:
            tries += 1
            now = time.monotonic()
            conn = self._primary_connection(max(give_up, now + timeout), request.any_node, hint)
            pending = Pending()
            request_id = next(self._ids)
            conn.submit(request_id, request.encode(request_id, durability), pending)
            if not pending.wait(timeout + request.wait_s):
                conn.forget(request_id)
                error = unavailable(f"{request.name}: no reply from {conn._address} within "
                                    f"{timeout + request.wait_s:g} s")
                retry = follow.failure(request, error, sent=True, from_server=False,
                                       address=conn._address)
                conn.close(error)  # a node that stopped answering: look again
            elif pending.error is not None:
                error = pending.error
                retry = follow.failure(request, error, sent=pending.sent, from_server=False,
                                       address=conn._address)
            else:
                error = codec.reply_error(pending.response)
                if error is None:
                    return request.decode(pending.response)
                retry = follow.failure(request, error, sent=True, from_server=True,
                                       address=conn._address)
            if retry.lost:
                self._lost_primary(conn)
            if not retry.again:
                raise error
            hint = retry.hint
            now = time.monotonic()
            if now >= give_up or self._closed.is_set():
                raise follow.gave_up(error, tries, now - start)
            if hint is None:
                self._closed.wait(backoff.next(give_up - now))

    # ---- Calling -------------------------------------------------------------------------

    def _execute(self, request, timeout, durability=None):
        timeout = self._timeout if timeout is None else float(timeout)
        durability = self._durability if durability is None else codec._durability(durability)
        if self._seeds is not None:
            if isinstance(request, codec.Batch):
                return request.combine([self._execute_following(call, timeout, durability)
                                        for call in request.calls])
            return self._execute_following(request, timeout, durability)
        if isinstance(request, codec.Batch):
            return self._execute_batch(request, timeout, durability)
        deadline = time.monotonic() + timeout + request.wait_s
        while True:
            conn = self._connection(deadline)
            pending = Pending()
            request_id = next(self._ids)
            conn.submit(request_id, request.encode(request_id, durability), pending)
            if not pending.wait(deadline - time.monotonic()):
                conn.forget(request_id)
                raise unavailable(f"{request.name}: no reply from {self._address} within "
                                  f"{timeout + request.wait_s:g} s")
            if pending.error is not None:
                if pending.error.code == "UNAVAILABLE" and (not pending.sent
                                                            or not request.mutates):
                    continue  # not applied, or harmless to repeat: on a new connection
                raise pending.error
            return self._value(request, pending.response)

    def _execute_batch(self, batch, timeout, durability):
        deadline = time.monotonic() + timeout
        conn = self._connection(deadline)
        sent = []
        for request in batch.calls:
            pending = Pending()
            request_id = next(self._ids)
            conn.submit(request_id, request.encode(request_id, durability), pending)
            sent.append((request, request_id, pending))
        values = []
        for request, request_id, pending in sent:
            if not pending.wait(deadline - time.monotonic()):
                for _, rid, _ in sent:
                    conn.forget(rid)
                raise unavailable(f"{request.name}: no reply from {self._address} within "
                                  f"{timeout:g} s")
            if pending.error is not None:
                raise pending.error
            values.append(self._value(request, pending.response))
        return batch.combine(values)

    @staticmethod
    def _value(request, response):
        error = codec.reply_error(response)
        if error is not None:
            raise error
        return request.decode(response)

    def _send(self, request, callback, durability=None, timeout=None):
        """Sends one codec.Call without waiting; ``callback(value, error)`` runs once, on the
        reader thread (it must not block), with the decoded value or a SundialError. For the
        Worker, which pipelines completes and extends. Connecting may block up to
        ``timeout``."""
        durability = self._durability if durability is None else codec._durability(durability)
        timeout = self._timeout if timeout is None else timeout

        def done(pending):
            if self._seeds is not None and self._follow_later(request, pending, conn, callback,
                                                              durability, timeout):
                return
            if pending.error is not None:
                callback(None, pending.error)
                return
            try:
                value = self._value(request, pending.response)
            except SundialError as e:
                callback(None, e)
                return
            callback(value, None)

        try:
            conn = self._connection(time.monotonic() + timeout, request.any_node)
        except SundialError as e:
            callback(None, e)
            return
        request_id = next(self._ids)
        conn.submit(request_id, request.encode(request_id, durability), Pending(done))

    def _follow_later(self, request, pending, conn, callback, durability, timeout):
        """Following, from a reader thread: when `pending`'s outcome calls for looking for the
        primary again (follow.failure), does it on a thread of its own (looking blocks, a
        reader must not) and hands that outcome to `callback`. Whether it took the call
        over."""
        if pending.error is not None:
            retry = follow.failure(request, pending.error, sent=pending.sent, from_server=False,
                                   address=conn._address)
        else:
            error = codec.reply_error(pending.response)
            if error is None:
                return False
            retry = follow.failure(request, error, sent=True, from_server=True,
                                   address=conn._address)
        if not retry.again:
            return False
        self._lost_primary(conn)

        def resend():
            try:
                value = self._execute_following(request, timeout, durability)
            except SundialError as e:
                callback(None, e)
                return
            callback(value, None)

        threading.Thread(target=resend, daemon=True, name=f"sundial-follow {request.name}").start()
        return True
