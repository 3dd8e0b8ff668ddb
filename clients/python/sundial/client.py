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

Deadlines: every call has one (``timeout`` seconds, default the client's, plus a long poll's
``wait_ms``). When it passes the call raises UNAVAILABLE; the connection stays open and a
late reply is dropped.
"""

import itertools
import os
import random
import socket
import threading
import time
from _thread import allocate_lock

from . import codec
from .address import format_address, parse_address
from .errors import SundialError, invalid_argument, unavailable
from .operations import Operations

DEFAULT_TIMEOUT_S = 10.0
RECONNECT_INITIAL_S = 0.05
RECONNECT_MAX_S = 2.0


def client_settings(addr, token, timeout, durability):
    """What Client and AsyncClient are given, checked: (host, port, address, token, timeout,
    durability)."""
    host, port = parse_address(addr)
    if token is not None and not isinstance(token, str):
        raise invalid_argument("token: must be a str")
    return (host, port, format_address(host, port), token, float(timeout),
            codec._durability(durability))


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


class Connection:
    """One TCP connection: the send lock, the requests in flight, and the reader thread.

    Thread safety: submit may be called from any thread. Once closed (by close(), or by the
    reader on EOF, an I/O error or a frame it cannot read), every request in flight is resolved
    with the close's error and later submits fail without sending.
    """

    def __init__(self, sock, address_text):
        self.pid = os.getpid()  # a forked child must not use its parent's connection
        self._sock = sock
        self._file = sock.makefile("rb")
        self._address = address_text
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # guards _pending and _closed
        self._pending = {}
        self._closed = None  # the SundialError it closed with
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"sundial-reader {address_text}")
        self._reader.start()

    @property
    def closed(self):
        return self._closed is not None

    def submit(self, request_id, frame, pending):
        """Registers `pending` under `request_id` and writes `frame`. If the connection is
        closed (before or while writing), `pending` is resolved with the error; its ``sent``
        says whether the frame may have reached the server."""
        with self._lock:
            if self._closed is None:
                idle = not self._pending
                self._pending[request_id] = pending
                error = None
            else:
                error = self._closed
        if error is not None:
            pending.resolve(None, error)
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

    def forget(self, request_id):
        """Stops waiting for `request_id` (its deadline passed); a late reply is dropped."""
        with self._lock:
            self._pending.pop(request_id, None)

    def close(self, error=None):
        error = error or unavailable(f"{self._address}: connection closed by the client")
        with self._lock:
            if self._closed is not None:
                return
            self._closed = error
            pending, self._pending = self._pending, {}
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
                if length == 0 or length > codec.MAX_REPLY_BYTES:
                    error = SundialError("INTERNAL", f"{self._address}: reply frame of {length} "
                                         "bytes", origin="connection")
                    break
                frame = read(length)
                if len(frame) < length:
                    error = unavailable(f"{self._address}: the server closed the connection "
                                        "mid-frame")
                    break
                try:
                    reply = codec.read_reply(frame)
                except Exception as e:  # the runtime has no Verifier: a bad frame raises
                    error = SundialError("INTERNAL", f"{self._address}: unreadable reply frame "
                                         f"({type(e).__name__}: {e})", origin="connection")
                    break
                if reply is None:  # an event: TCP carries none, and nobody asked for one
                    continue
                request_id, response = reply
                if request_id == 0:
                    # The server's answer to a frame it could not use; it closes the
                    # connection after it, failing everything in flight.
                    error = codec.reply_error(response) or SundialError(
                        "INTERNAL", "reply with request_id 0", origin="connection")
                    break
                with self._lock:
                    pending = self._pending.pop(request_id, None)
                if pending is not None:
                    pending.resolve(response, None)
        except (OSError, ValueError) as e:  # ValueError: the file was closed under us
            error = unavailable(f"{self._address}: connection lost: {e}")
        self.close(error)
        self._file.close()  # with the socket closed too, this releases the descriptor


class Client(Operations):
    """Blocking client; thread-safe and pipelined. See the module's docstring.

    ``Client("127.0.0.1:7400", token=None, timeout=10.0, durability="durable")``: ``token``
    is sent in an Auth request on every new connection; ``timeout`` is the default deadline of
    a call in seconds; ``durability`` the default of mutating calls.
    """

    __slots__ = ("_host", "_port", "_address", "_token", "_timeout", "_durability", "_ids",
                 "_connect_lock", "_conn", "_closed", "__weakref__")

    def __init__(self, addr="127.0.0.1:7400", token=None, *, timeout=DEFAULT_TIMEOUT_S,
                 durability="durable"):
        (self._host, self._port, self._address, self._token, self._timeout,
         self._durability) = client_settings(addr, token, timeout, durability)
        self._ids = itertools.count(1)  # next() is atomic under the GIL; ids never repeat
        self._connect_lock = threading.Lock()
        self._conn = None
        self._closed = threading.Event()

    @property
    def address(self):
        return self._address

    @property
    def connected(self):
        conn = self._conn
        return conn is not None and not conn.closed

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

    # ---- Connecting ----------------------------------------------------------------------

    def _connection(self, deadline):
        """The live connection, made (with backoff) if there is none, by `deadline`."""
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

    def _connect(self, deadline):
        sock = socket.create_connection((self._host, self._port),
                                        timeout=max(deadline - time.monotonic(), 0.001))
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(sock, self._address)
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

    # ---- Calling -------------------------------------------------------------------------

    def _execute(self, request, timeout, durability=None):
        timeout = self._timeout if timeout is None else float(timeout)
        durability = self._durability if durability is None else codec._durability(durability)
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
            conn = self._connection(time.monotonic() + timeout)
        except SundialError as e:
            callback(None, e)
            return
        request_id = next(self._ids)
        conn.submit(request_id, request.encode(request_id, durability), Pending(done))
