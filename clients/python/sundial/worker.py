"""Worker: runs a handler on the messages of one queue, on `concurrency` threads.

    def send_email(message):
        smtp.send(message.metadata["to"], message.payload)   # return: completed; raise: failed

    Worker("127.0.0.1:7400", "emails", send_email, concurrency=8).run()

What it does (docs/clients/python.md has the user's view):

- **Fetching.** Long-polls (``poll_ms``) for as many messages as it has idle handler threads,
  so at most ``concurrency`` handlers run at once and, by default, no message is leased to
  wait behind another. ``prefetch=N`` leases up to N more, which wait for a free thread (their
  leases extended like the running ones): on a fast queue it hides the round trip of the
  dequeue (its fsync) behind the running handlers; on slow jobs it makes other workers idle
  while these wait (Celery's prefetch trade-off). **A finished message asks for the next**:
  a complete request carries a ``next`` dequeue for the free capacity (complete-and-next,
  docs/semantics.md: one request, one fsync and one reply instead of a complete and a
  dequeue), without waiting (its ``next`` has no ``wait_ms``). A plain dequeue goes out when
  no complete is waiting to be sent (that complete will carry it) and there is room: from the
  thread that freed it (no hand-off), while no other dequeue is in flight or half of the
  capacity is free; so an idle worker long-polls. A fetch connection of its own carries the
  long polls, so closing it at shutdown cancels a waiting poll on the server (nothing is
  leased for a closed connection).
- **Outcome.** The handler returns: the message is completed, and what it returned is the
  message's result (bytes as they are, a str as UTF-8, None as no result, anything else as
  JSON: ``Client.wait`` and ``Client.call`` read it back; a value that cannot be encoded fails
  the message instead). It raises: the message is failed
  with the exception's text, and the server's retry backoff decides when it comes back (or
  errors it / moves it to the dead-letter queue when its attempts are spent). Completes and
  fails travel on a second connection, batched (a complete request carries every result that
  finished while the previous one was in flight), so a handler thread is free for the next
  message at once; a complete lost with the connection is sent again (it is idempotent for the
  same lease token).
- **Leases.** While a handler runs, its lease is extended at half-life (BullMQ's rule) by a
  lease keeper thread, for the lease length it was dequeued with. An extend refused with a
  stale token means the lease was lost (it expired while the server was unreachable, or the
  message was canceled): that is logged and counted, not retried, and the handler's result is
  not sent (the message belongs to someone else now).
- **Shutdown.** SIGTERM, SIGINT (when run() is called on the main thread) or stop(): fetching
  stops at once; messages leased but not started (prefetched, or arriving in a reply at that
  moment) are given back (their lease set to end now, as SQS's visibility 0: the attempt the
  dequeue spent stays spent); running handlers get ``shutdown_timeout_s`` to finish and their
  results are sent, then run() returns. A handler still running after the timeout is left to
  its lease (no more extends, no result sent: the message comes back when the lease ends). A
  second signal skips the wait.
- **Reconnects.** Both connections reconnect with backoff (Client); a fetch that fails is
  retried after a backoff (0.1 s doubling to 5 s), so a restarted or killed server is picked up
  again when it is back. Given a cluster's nodes (a list), both clients follow the primary
  (client.py, "Clusters"): fetches, completes, fails and extends are resent to the new primary
  with their tokens.

Thread safety: stop() and metrics() may be called from any thread (stop() also from a signal
handler); run() once.
"""

import functools
import logging
import os
import queue as queue_module
import select
import signal
import socket
import threading
import time

from . import codec
from .client import Client
from .errors import SundialError, invalid_argument

LOG = logging.getLogger("sundial.worker")

MAX_ERROR_BYTES = 1024  # the server keeps this much of last_error
ACKS_IN_FLIGHT = 2  # complete requests in flight at once; the rest wait and batch up
FETCH_BACKOFF_INITIAL_S = 0.1
FETCH_BACKOFF_MAX_S = 5.0
ACK_GRACE_S = 10.0  # after the handlers, how long shutdown waits for their results to be sent
# Errors that no retry will fix: run() stops and raises them.
FATAL_FETCH_CODES = frozenset(("INVALID_ARGUMENT", "UNAUTHENTICATED"))
LOST_LEASE_CODES = frozenset(("FAILED_PRECONDITION", "NOT_FOUND"))

COUNTERS = (
    ("leased", "messages leased by this worker"),
    ("completed", "messages completed (the server acknowledged the complete)"),
    ("failed", "messages failed by a handler exception (the server acknowledged the fail)"),
    ("extended", "lease extensions acknowledged"),
    ("lease_lost", "messages whose lease was lost while or after the handler ran"),
    ("abandoned", "handlers still running at the end of the shutdown timeout"),
    ("released", "messages leased but not started at shutdown, given back to the queue"),
    ("ack_errors", "completes and fails the server refused for another reason"),
    ("fetch_errors", "dequeues that failed (connection lost, server unavailable)"),
)


def error_text(error):
    """`Type: message`, cut to the server's 1 KiB of last_error on a UTF-8 boundary."""
    try:
        detail = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the failure
        detail = "(str() of the exception raised)"
    text = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    data = text.encode("utf-8")
    if len(data) <= MAX_ERROR_BYTES:
        return text
    return data[:MAX_ERROR_BYTES].decode("utf-8", "ignore")


class Job:
    """One leased message on its way through the worker."""

    __slots__ = ("message", "lease_s", "due", "extending", "lease_lost", "abandoned", "result",
                 "__weakref__")

    def __init__(self, message, received):
        self.message = message
        lease_ms = message.lease_expires_at - message.updated_at  # both server time
        self.lease_s = (lease_ms if lease_ms > 0 else 30000) / 1000.0
        self.due = received + self.lease_s / 2  # when the keeper extends it
        self.extending = False
        self.lease_lost = False
        self.abandoned = False
        self.result = b""  # what the handler returned, as the complete's result


class Worker:
    """``Worker(addr, queue, handler, concurrency=8, lease_ms=None, filter=None,
    shutdown_timeout_s=25)``; see the module's docstring.

    Keyword-only: ``prefetch`` (default 0: messages leased beyond the running ones, waiting
    for a free thread; their leases are extended too), ``token`` (auth), ``poll_ms``
    (long-poll length, default 20000),
    ``on_error(message, exception)`` (called on the handler's thread after it raised),
    ``on_lease_lost(message)``, ``handle_signals`` (default True: SIGTERM and SIGINT stop the
    worker while run() runs on the main thread), ``logger``; ``tls``, ``ca_file`` and
    ``server_hostname`` as for Client; ``include_dependency_results`` (default False: each
    message the handler gets carries its dependencies' outcomes in ``dependency_results``);
    ``worker_id`` (default "host/pid"), kept in the history of every message it leases.
    """

    def __init__(self, addr, queue, handler, concurrency=8, lease_ms=None, filter=None,
                 shutdown_timeout_s=25, *, prefetch=0, token=None, poll_ms=20000,
                 on_error=None, on_lease_lost=None, handle_signals=True, logger=None,
                 tls=False, ca_file=None, server_hostname=None,
                 include_dependency_results=False, worker_id=None):
        if not callable(handler):
            raise invalid_argument("handler: must be callable (it receives a Message)")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or \
                not 1 <= concurrency <= 1000:
            raise invalid_argument("concurrency: must be an int in 1..1000")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or \
                not 0 <= prefetch <= 1000:
            raise invalid_argument("prefetch: must be an int in 0..1000")
        if not 0 < poll_ms <= 60000:
            raise invalid_argument("poll_ms: must be in 1..60000")
        if shutdown_timeout_s < 0:
            raise invalid_argument("shutdown_timeout_s: must be >= 0")
        # Checks queue, lease_ms and filter now, so that a typo fails here, not in a thread.
        # Who leases, in each message's history: "host/pid" unless told.
        self.worker_id = worker_id if worker_id is not None else \
            f"{socket.gethostname()}/{os.getpid()}"[:128]
        codec.dequeue(queue, concurrency, lease_ms, filter, poll_ms, False, self.worker_id)
        self.include_dependency_results = bool(include_dependency_results)
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.prefetch = prefetch
        self._capacity = concurrency + prefetch  # messages leased at once, at most
        self.lease_ms = lease_ms
        self.filter = filter
        self.shutdown_timeout_s = shutdown_timeout_s
        self.poll_ms = poll_ms
        self.on_error = on_error
        self.on_lease_lost = on_lease_lost
        self.handle_signals = handle_signals
        self.log = logger or LOG
        connect = {"tls": tls, "ca_file": ca_file, "server_hostname": server_hostname}
        self._fetch_client = Client(addr, token, **connect)
        self._control = Client(addr, token, **connect)
        self._address = self._control.address

        self._lock = threading.Lock()
        self._counters = {name: 0 for name, _ in COUNTERS}
        # The job each handler thread runs (None: idle); each slot written by its thread only.
        self._current = [None] * concurrency
        self._handlers_alive = concurrency  # handler threads not yet ended; guarded by _lock

        self._fetch_cond = threading.Condition()
        self._credits = self._capacity  # messages not yet asked for
        self._fetches_in_flight = 0
        self._fetch_retry_at = 0.0
        self._fetch_backoff = FETCH_BACKOFF_INITIAL_S
        self._stopping = False
        self._fatal = None

        self._work = queue_module.SimpleQueue()
        self._keeper = _LeaseKeeper(self)
        self._acker = _Acker(self)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop_requested = 0  # stop()s and signals so far
        self._started = False

    # ---- Public --------------------------------------------------------------------------

    def run(self):
        """Runs until stop() or a signal; returns once shut down (see the module docstring).
        Raises the SundialError of a fetch that no retry can fix (a bad queue name or filter,
        a refused token), after shutting down."""
        if self._started:
            raise RuntimeError("Worker.run() may be called once")
        self._started = True
        restore = self._install_signal_handlers()
        threads = [threading.Thread(target=self._handler_loop, args=(k,),
                                    name=f"sundial-handler-{k}", daemon=True)
                   for k in range(self.concurrency)]
        fetcher = threading.Thread(target=self._fetch_loop, name="sundial-fetch", daemon=True)
        self.log.info("worker started: queue %s on %s, concurrency %d", self.queue,
                      self._address, self.concurrency,
                      extra={"sundial_queue": self.queue, "concurrency": self.concurrency})
        try:
            for t in threads:
                t.start()
            self._keeper.start()
            self._acker.start()
            fetcher.start()
            while not self._stop_requested:
                self._wait_for_wake(None)
            self._shut_down(threads)
        finally:
            restore()
        if self._fatal is not None:
            raise self._fatal

    def __del__(self):
        # Not at the end of run(): a handler left running may still call _wake(), and a
        # closed descriptor's number can be reused by then.
        for fd in (getattr(self, "_wake_r", None), getattr(self, "_wake_w", None)):
            if fd is not None:
                os.close(fd)

    def stop(self):
        """Stops fetching and shuts down (run() returns). Safe from any thread and from a
        signal handler; a second call skips waiting for running handlers."""
        self._stop_requested += 1
        self._wake()

    def metrics(self):
        """Counters (COUNTERS' names, with ``_total``) and gauges, as a dict whose keys are
        Prometheus metric names: ``sundial_worker_completed_total``, ...,
        ``sundial_worker_running`` (handlers running now), ``sundial_worker_concurrency``."""
        with self._lock:
            out = {f"sundial_worker_{name}_total": value
                   for name, value in self._counters.items()}
        out["sundial_worker_running"] = self._running_count()
        out["sundial_worker_concurrency"] = self.concurrency
        return out

    def prometheus_text(self):
        """metrics() in Prometheus' text format, labelled with the queue."""
        help_text = dict(COUNTERS)
        lines = []
        label = '{queue="%s"}' % self.queue.replace("\\", "\\\\").replace('"', '\\"')
        for name, value in self.metrics().items():
            short = name[len("sundial_worker_"):]
            if short.endswith("_total"):
                lines.append(f"# HELP {name} {help_text[short[:-len('_total')]]}")
                lines.append(f"# TYPE {name} counter")
            else:
                lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name}{label} {value}")
        return "\n".join(lines) + "\n"

    # ---- Supervisor (run()'s thread) -----------------------------------------------------

    def _wake(self):
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):  # full: a wake is pending anyway; closed: done
            pass

    def _wait_for_wake(self, timeout):
        """Sleeps until _wake() (a signal's handler included) or `timeout` seconds."""
        readable, _, _ = select.select([self._wake_r], [], [], timeout)
        if readable:
            os.read(self._wake_r, 4096)

    def _install_signal_handlers(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum, frame):
            self.stop()  # a pipe write: no lock that the interrupted code could hold

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore():
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore

    def _shut_down(self, threads):
        deadline = time.monotonic() + self.shutdown_timeout_s
        self.log.info("worker stopping: %d handlers running, waiting up to %g s",
                      self._running_count(), self.shutdown_timeout_s,
                      extra={"sundial_queue": self.queue})
        # 1. No more fetches: the fetch loop ends, a waiting long poll is dropped with the
        #    connection. A reply already on its way is still run (its slot was free).
        with self._fetch_cond:
            self._stopping = True
            self._fetch_cond.notify_all()
        self._fetch_client.close()
        while self._fetches_in_flight and self._stop_requested < 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wait_for_wake(remaining)
        # 2. Messages not started are given back; handler threads finish and end.
        while True:
            try:
                job = self._work.get_nowait()
            except queue_module.Empty:
                break
            self._keeper.remove(job)
            self._acker.release(job)
        for _ in threads:
            self._work.put(None)
        while self._handlers_alive and self._stop_requested < 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wait_for_wake(remaining)
        # 3. Whatever still runs is left to its lease.
        left = [job for job in self._current if job is not None]
        for job in left:
            job.abandoned = True
        self._count("abandoned", len(left))
        for job in left:
            self._keeper.remove(job)
            self.log.warning("handler still running after the shutdown timeout: message %s is "
                             "left to its lease (expires in at most %g s)", job.message.id,
                             job.lease_s, extra=self._job_extra(job))
        # 4. The results of finished handlers are sent.
        self._acker.close()
        ack_deadline = time.monotonic() + ACK_GRACE_S
        while self._acker.is_alive() and self._stop_requested < 2:
            remaining = ack_deadline - time.monotonic()
            if remaining <= 0:
                self.log.warning("results of %d messages not acknowledged by the server; they "
                                 "come back when their leases end", self._acker.pending(),
                                 extra={"sundial_queue": self.queue})
                break
            self._wait_for_wake(min(remaining, 0.5))
        self._keeper.close()
        self._acker.abort()
        self._control.close()
        self.log.info("worker stopped", extra={"sundial_queue": self.queue,
                                               "metrics": self.metrics()})

    def _running_count(self):
        return sum(1 for job in self._current if job is not None)

    def _count(self, name, n=1):
        with self._lock:
            self._counters[name] += n

    def _job_extra(self, job):
        m = job.message
        return {"sundial_queue": self.queue, "message_id": m.id, "attempts": m.attempts,
                "lease_token": m.lease_token}

    # ---- Fetching ------------------------------------------------------------------------

    def _fetch_waits(self):
        """Whether a dequeue must not go out now (REQUIRES: _fetch_cond held): stopping, no
        capacity, a fetch in flight while less than half of the capacity is free (so
        requests carry several messages, and one is always on its way), or a complete
        waiting to be sent, which will ask for the next itself (_claim_next). The acker
        notifies _fetch_cond whenever it sends completes, so a waiting fetch looks again."""
        return (self._stopping or not self._credits
                or (self._fetches_in_flight and self._credits * 2 < self._capacity)
                or self._acker.completes_waiting())

    def _claim_next(self):
        """How many messages a complete about to be sent may lease with its ``next`` (0:
        none): the free capacity, unless stopping or backing off after a failed fetch. The
        claim counts as a fetch in flight until _on_fetched or _on_fetch_error."""
        with self._fetch_cond:
            n = 0
            if (not self._stopping and self._credits
                    and time.monotonic() >= self._fetch_retry_at):
                n = min(self._credits, codec.MAX_BATCH)
                self._credits -= n
                self._fetches_in_flight += 1
            self._fetch_cond.notify()  # the completes went: a waiting fetch looks again
        return n

    def _fetch_some(self, inline=True):
        """Asks for messages for the idle handler threads, if the rules allow (_fetch_waits)
        and not backing off after an error.

        Inline (a handler thread that just finished, or the reader thread with a reply in
        hand) the request is sent by the caller: no hand-off to another thread. When the
        connection is down, connecting would block, so the fetch thread does it instead."""
        with self._fetch_cond:
            if self._fetch_waits():
                return
            if time.monotonic() < self._fetch_retry_at or (
                    inline and not self._fetch_client.connected):
                self._fetch_cond.notify()
                return
            n = min(self._credits, codec.MAX_BATCH)
            self._credits -= n
            self._fetches_in_flight += 1
        call = codec.dequeue(self.queue, n, self.lease_ms, self.filter, self.poll_ms,
                             self.include_dependency_results, self.worker_id)
        self._fetch_client._send(call, functools.partial(self._on_fetched, n))

    def _fetch_loop(self):
        """Sends the fetches the inline path leaves: the first, those after a backoff, and
        those that must (re)connect. Sleeps otherwise."""
        while True:
            with self._fetch_cond:
                if self._stopping:
                    return
                wait = self._fetch_retry_at - time.monotonic()
                if wait > 0 or self._fetch_waits():
                    self._fetch_cond.wait(wait if wait > 0 else None)
                    continue
            self._fetch_some(inline=False)

    def _on_fetched(self, asked, messages, error):
        """A dequeue's reply (on the fetch connection's reader thread), or the leases of a
        complete's ``next`` (on the control connection's)."""
        if error is not None:
            self._on_fetch_error(asked, error)
            return
        received = time.monotonic()
        jobs = [Job(m, received) for m in messages]
        if jobs:
            self._count("leased", len(jobs))
            for job in jobs:
                self._keeper.add(job)
                self._work.put(job)
        with self._fetch_cond:
            self._credits += asked - len(jobs)
            self._fetches_in_flight -= 1
            self._fetch_backoff = FETCH_BACKOFF_INITIAL_S
            stopping = self._stopping
        if stopping:
            self._wake()
        else:
            self._fetch_some()

    def _on_fetch_error(self, asked, error):
        with self._fetch_cond:
            self._credits += asked
            self._fetches_in_flight -= 1
            stopping = self._stopping
            if not stopping:
                delay = self._fetch_backoff
                self._fetch_retry_at = time.monotonic() + delay
                self._fetch_backoff = min(delay * 2, FETCH_BACKOFF_MAX_S)
            self._fetch_cond.notify()
        if stopping:
            self._wake()
            return
        self._count("fetch_errors")
        if error.code in FATAL_FETCH_CODES and error.origin != "connection":
            self.log.error("dequeue from %s refused: %s; stopping", self.queue, error,
                           extra={"sundial_queue": self.queue})
            self._fatal = error
            self.stop()
            return
        self.log.warning("dequeue from %s failed: %s; retrying in %.1f s", self.queue, error,
                         delay, extra={"sundial_queue": self.queue})

    # ---- Handlers ------------------------------------------------------------------------

    def _handler_loop(self, slot):
        get = self._work.get
        current = self._current
        while True:
            job = get()
            if job is None:
                break
            if self._stopping:  # leased, not started: given back, not run
                self._keeper.remove(job)
                self._acker.release(job)
                continue
            current[slot] = job
            error = None
            try:
                job.result = codec.result_bytes(self.handler(job.message))
            except BaseException as e:  # noqa: B902 - any exception fails the message
                error = e
            self._keeper.remove(job)
            current[slot] = None
            with self._fetch_cond:
                self._credits += 1
            self._finish(job, error)  # a complete sent now carries the next fetch
            self._fetch_some()
        with self._lock:
            self._handlers_alive -= 1
        self._wake()

    def _finish(self, job, error):
        """Sends the handler's outcome: complete, or fail with the exception's text."""
        if error is not None:
            self.log.warning("handler failed on message %s (attempt %d): %s", job.message.id,
                             job.message.attempts, error_text(error), exc_info=error,
                             extra=self._job_extra(job))
            if self.on_error is not None:
                self._call_hook(self.on_error, job.message, error)
        if job.abandoned:
            self.log.info("handler of message %s finished after the shutdown timeout; its "
                          "result is not sent", job.message.id, extra=self._job_extra(job))
            return
        if job.lease_lost:
            self.log.warning("handler of message %s finished after its lease was lost; its "
                             "result is not sent", job.message.id, extra=self._job_extra(job))
            return
        if error is None:
            self._acker.complete(job)
        else:
            self._acker.fail(job, error_text(error))

    def _call_hook(self, hook, *args):
        try:
            hook(*args)
        except Exception:
            self.log.exception("hook %r raised", hook, extra={"sundial_queue": self.queue})

    def _lease_lost(self, job, error):
        """An extend, complete or fail found that the lease is no longer ours."""
        with self._lock:
            if job.lease_lost:
                return
            job.lease_lost = True
            self._counters["lease_lost"] += 1
        self.log.warning("lease of message %s lost: %s", job.message.id, error,
                         extra=self._job_extra(job))
        if self.on_lease_lost is not None:
            self._call_hook(self.on_lease_lost, job.message)


class _LeaseKeeper(threading.Thread):
    """Extends the lease of every running job at half-life. Sleeps until the earliest due
    time; at most `concurrency + prefetch` jobs are held, so a scan is cheap."""

    IDLE_S = 1.0  # sleep with no job (a new job due earlier wakes it at once)

    def __init__(self, worker):
        super().__init__(name="sundial-lease-keeper", daemon=True)
        self._worker = worker
        self._cond = threading.Condition()
        self._jobs = set()
        self._wake_at = float("inf")
        self._closed = False

    def add(self, job):
        with self._cond:
            self._jobs.add(job)
            if job.due < self._wake_at:
                self._cond.notify()

    def remove(self, job):
        with self._cond:
            self._jobs.discard(job)

    def close(self):
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify()

    def run(self):
        w = self._worker
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    due = [j for j in self._jobs if not j.extending and j.due <= now]
                    if due:
                        for job in due:
                            job.extending = True
                        break
                    self._wake_at = min((j.due for j in self._jobs if not j.extending),
                                        default=now + self.IDLE_S)
                    self._cond.wait(self._wake_at - now)
                self._wake_at = float("inf")
            for job in due:
                m = job.message
                call = codec.extend(w.queue, m.id, m.lease_token, int(job.lease_s * 1000))
                w._control._send(call, functools.partial(self._on_extended, job))

    def _on_extended(self, job, value, error):
        w = self._worker
        now = time.monotonic()
        if error is None:
            w._count("extended")
            next_due = now + job.lease_s / 2
        elif error.code in LOST_LEASE_CODES and error.origin == "server":
            with self._cond:
                running = job in self._jobs
                self._jobs.discard(job)
            if running:  # else the handler finished and its complete overtook this extend
                w._lease_lost(job, error)
            return
        else:  # unreachable or unavailable: try again soon, while the lease may still hold
            w.log.warning("extending the lease of message %s failed: %s", job.message.id,
                          error, extra=w._job_extra(job))
            next_due = now + min(1.0, job.lease_s / 4)
        with self._cond:
            job.due = next_due
            job.extending = False
            if job in self._jobs and next_due < self._wake_at:
                self._cond.notify()


class _Acker(threading.Thread):
    """Sends the outcomes of finished handlers: completes batched (at most ACKS_IN_FLIGHT
    requests in flight; what finishes meanwhile waits and goes in the next one), fails one by
    one.

    Sending is inline: the handler thread that finished sends if a request slot is free, and
    the reply's callback (on the reader thread) sends what accumulated meanwhile, so in normal
    operation no thread is woken for it. This thread only resends after a lost connection,
    with a backoff (a complete is idempotent for its token; a repeated fail that had been
    applied gets FAILED_PRECONDITION, which is logged), and drains everything at shutdown.
    """

    def __init__(self, worker):
        super().__init__(name="sundial-acker", daemon=True)
        self._worker = worker
        self._cond = threading.Condition()
        self._completes = []  # jobs
        self._fails = []  # (job, text)
        self._releases = []  # jobs
        self._in_flight = 0
        self._retry_at = 0.0
        self._backoff = FETCH_BACKOFF_INITIAL_S
        self._closing = False
        self._aborted = False

    def complete(self, job):
        with self._cond:
            self._completes.append(job)
            work = self._take(inline=True)
        self._send(*work)

    def fail(self, job, text):
        with self._cond:
            self._fails.append((job, text))
            work = self._take(inline=True)
        self._send(*work)

    def release(self, job):
        """Gives back a leased message that was not started: its lease is set to end now
        (an extend to 1 ms, SQS's visibility 0), so it is pending again at once."""
        with self._cond:
            self._releases.append(job)
            work = self._take(inline=True)
        self._send(*work)

    def completes_waiting(self):
        """Whether completes wait to be sent. Read without the lock (a list's truth value is
        atomic under the GIL), so that the fetch rules may ask while holding _fetch_cond: a
        stale answer costs one dequeue, or a wait that the acker's next send ends."""
        return bool(self._completes)

    def pending(self):
        with self._cond:
            return (len(self._completes) + len(self._fails) + len(self._releases)
                    + self._in_flight)

    def close(self):
        """Sends what is left, then ends."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def abort(self):
        with self._cond:
            self._aborted = True
            self._completes.clear()
            self._fails.clear()
            self._releases.clear()
            self._cond.notify()

    def _take(self, inline):
        """What to send now, as (completes, fails, releases); REQUIRES: _cond held. Inline
        callers leave it to this thread while backing off or disconnected (connecting
        blocks)."""
        if self._aborted or not (self._completes or self._fails or self._releases) or \
                self._in_flight >= ACKS_IN_FLIGHT:
            return (), (), ()
        if time.monotonic() < self._retry_at or (
                inline and not self._worker._control.connected):
            self._cond.notify()
            return (), (), ()
        completes = self._completes[:codec.MAX_BATCH]
        del self._completes[:codec.MAX_BATCH]
        fails, self._fails = self._fails, []
        releases, self._releases = self._releases, []
        self._in_flight += (1 if completes else 0) + len(fails) + len(releases)
        return completes, fails, releases

    def _send(self, completes, fails, releases):
        w = self._worker
        if completes:
            items = [(j.message.id, j.message.lease_token, j.result) for j in completes]
            asked = w._claim_next()
            if asked:  # complete-and-next: the free capacity rides on the complete
                call = codec.complete_and_next(w.queue, items, asked, w.lease_ms, w.filter, 0,
                                               w.include_dependency_results, w.worker_id)
                w._control._send(call, functools.partial(self._on_completed_and_next,
                                                         completes, asked))
            else:
                call = codec.complete_batch(w.queue, items).calls[0]
                w._control._send(call, functools.partial(self._on_completed, completes))
        for job, text in fails:
            m = job.message
            w._control._send(codec.fail(w.queue, m.id, m.lease_token, text),
                            functools.partial(self._on_failed, job, text))
        for job in releases:
            m = job.message
            w._control._send(codec.extend(w.queue, m.id, m.lease_token, 1),
                            functools.partial(self._on_released, job))

    def run(self):
        try:
            while True:
                with self._cond:
                    if self._aborted:
                        return
                    waiting = self._completes or self._fails or self._releases
                    if self._closing and not waiting and not self._in_flight:
                        return
                    work = self._take(inline=False)
                    if not any(work):
                        wait = self._retry_at - time.monotonic()
                        self._cond.wait(wait if wait > 0 and waiting else None)
                        continue
                self._send(*work)
        finally:
            self._worker._wake()

    def _done(self, retry_completes=(), retry_fails=(), retry_releases=()):
        """A request answered; resends go back to the front with a backoff, and what
        accumulated meanwhile is sent from here (the reader thread)."""
        with self._cond:
            self._in_flight -= 1
            if retry_completes or retry_fails or retry_releases:
                self._completes[:0] = retry_completes
                self._fails[:0] = retry_fails
                self._releases[:0] = retry_releases
                self._retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, FETCH_BACKOFF_MAX_S)
                self._cond.notify()
                return
            self._backoff = FETCH_BACKOFF_INITIAL_S
            work = self._take(inline=True)
            if self._closing:
                self._cond.notify()
        self._send(*work)

    def _on_completed(self, jobs, results, error):
        w = self._worker
        if error is not None:
            if error.code == "UNAVAILABLE":
                w.log.warning("complete of %d messages failed: %s; sending again", len(jobs),
                              error, extra={"sundial_queue": w.queue})
                self._done(retry_completes=jobs)
                return
            w._count("ack_errors", len(jobs))
            w.log.error("complete of %d messages refused: %s", len(jobs), error,
                        extra={"sundial_queue": w.queue})
            self._done()
            return
        done = 0
        refused_results = []
        for job, item_error in zip(jobs, results):
            if item_error is None:
                done += 1
            elif item_error.code in LOST_LEASE_CODES:
                w._lease_lost(job, item_error)
            elif item_error.code == "INVALID_ARGUMENT" and job.result:
                # The result was refused (larger than --max-result-bytes): the attempt failed.
                refused_results.append((job, f"result refused: {item_error.message}"))
            else:
                w._count("ack_errors")
                w.log.error("complete of message %s refused: %s", job.message.id, item_error,
                            extra=w._job_extra(job))
        w._count("completed", done)
        self._done()
        for job, text in refused_results:
            w.log.warning("message %s: %s; failing it", job.message.id, text,
                          extra=w._job_extra(job))
            self.fail(job, text)

    def _on_completed_and_next(self, jobs, asked, value, error):
        """A complete-and-next's reply: the leases go to the handlers first (so the completes
        waiting now may ask for what is still free), then the completes are settled."""
        w = self._worker
        if error is not None:  # nothing was done, or it is unknown: the completes are resent
            w._on_fetched(asked, [], None)
            self._on_completed(jobs, None, error)
            return
        if value.next_error is not None:  # refused (bad queue or filter): a failed fetch
            w._on_fetch_error(asked, value.next_error)
        else:
            w._on_fetched(asked, value.messages, None)
        self._on_completed(jobs, value.items, None)

    def _on_released(self, job, result, error):
        w = self._worker
        if error is None:
            w._count("released")
            self._done()
        elif error.code == "UNAVAILABLE":
            self._done(retry_releases=[job])
        else:  # the lease is gone already: nothing to give back
            self._done()

    def _on_failed(self, job, text, result, error):
        w = self._worker
        if error is None:
            w._count("failed")
            w.log.info("message %s failed (attempt %d): now %s", job.message.id,
                       job.message.attempts, result.state,
                       extra=dict(w._job_extra(job), state=result.state))
            self._done()
        elif error.code == "UNAVAILABLE":
            self._done(retry_fails=[(job, text)])
        elif error.code in LOST_LEASE_CODES and error.origin == "server":
            w._lease_lost(job, error)
            self._done()
        else:
            w._count("ack_errors")
            w.log.error("fail of message %s refused: %s", job.message.id, error,
                        extra=w._job_extra(job))
            self._done()


__all__ = ["Worker", "SundialError", "error_text"]
