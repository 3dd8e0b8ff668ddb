"""The methods Client and AsyncClient share: the operations of docs/protocol.md, named as in docs/clients/python.md.

Each method checks its arguments, makes the request (codec.py) and hands it to
``self._execute``: Client's sends it and returns the value; AsyncClient wraps every method
into a coroutine (aio.py). So the two clients cannot drift: a method is written once.

Every method takes ``timeout`` (seconds; default: the client's) — its deadline, to which a
long-poll dequeue adds its ``wait_ms``. Mutating methods take ``durability``: ``"durable"``
(acknowledged after the server's fsync, the default) or ``"relaxed"`` (acknowledged before it;
for messages that can be lost).
"""

from . import codec


class Operations:
    __slots__ = ()

    def _execute(self, request, timeout, durability=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def _default_id(self):
        """The id of an enqueued message given none: None (the server makes one), or one of
        the client's own when it follows a cluster's primary (so a resend is a duplicate)."""
        return None

    # ---- Queues --------------------------------------------------------------------------

    def create_queue(self, name, *, timeout=None, durability=None, **settings):
        """Creates a queue; returns it (``Queue``). Settings are named as in docs/semantics.md: ``type``
        ("simple" or "exclusive"), ``exclusivity_key``, ``lease_ms``, ``invisibility_ms``,
        ``max_attempts``, ``retry_backoff_ms``, ``retry_backoff_max_ms``,
        ``dead_letter_queue``, ``retention_ms``, ``max_depth``, ``enqueue_paused``,
        ``dequeue_paused``, ``history_max`` (0: no history), ``flow_key`` (the metadata key whose
        values ``key_concurrency`` limits; fixed at creation), ``key_concurrency`` (messages per
        flow-key value running at once; 0: no limit), ``ttl_ms`` (a message's default time to
        live, 0: none), ``dedupe`` ("keep" or "while_active": docs/semantics.md, "Flow
        control"), ``rate_per_s`` and ``burst`` (the queue's token bucket: dequeues per second,
        0: none, at most 3 decimals; bucket size, default 1), ``key_rate_per_s`` and
        ``key_burst`` (the same per flow-key value), ``fairness`` ("none" or "weighted": turns
        among the flow-key values) and ``overdue_first_ms`` (with weighted: a message overdue by
        more jumps the turns). Repeating it with identical settings succeeds; different ones are
        ALREADY_EXISTS."""
        return self._execute(codec.create_queue(name, settings), timeout, durability)

    def update_queue(self, name, *, timeout=None, durability=None, **settings):
        """Changes the given settings (not ``type``, ``exclusivity_key`` or ``flow_key``, fixed
        at creation; ``dead_letter_queue=""`` removes it); returns the queue."""
        return self._execute(codec.update_queue(name, settings), timeout, durability)

    def get_queue(self, name, *, timeout=None):
        """The queue's settings, per-state counts and oldest pending age (``Queue``)."""
        return self._execute(codec.get_queue(name), timeout)

    def list_queues(self, *, timeout=None):
        """Every queue, sorted by name (``[Queue]``)."""
        return self._execute(codec.list_queues(), timeout)

    def delete_queue(self, name, *, timeout=None, durability=None):
        """Removes the queue and all its messages."""
        return self._execute(codec.delete_queue(name), timeout, durability)

    def purge_queue(self, name, states, *, timeout=None, durability=None):
        """Removes the messages in the given states (a state name or a list); returns how
        many."""
        return self._execute(codec.purge_queue(name, states), timeout, durability)

    # ---- Schedules (docs/semantics.md, "Schedules") -------------------------------------

    def upsert_schedule(self, queue, name, *, cron=None, tz=None, every_ms=None, payload=b"",
                        metadata=None, priority_offset_ms=0, max_attempts=0, misfire="skip",
                        overlap="allow", timeout=None, durability=None):
        """Creates or replaces the schedule ``name`` of ``queue``; returns it (``Schedule``,
        ``created`` True when new). Exactly one of ``cron`` (5 fields or a macro, in the IANA
        zone ``tz``; default UTC) and ``every_ms``. Each fire at time T enqueues the message
        ``name@T`` with ``payload``, ``metadata`` and ``max_attempts`` at priority
        T + ``priority_offset_ms``. ``misfire``: "skip", "one" or "all" (fires missed while the
        server was down); ``overlap``: "allow" or "skip_if_active"."""
        return self._execute(
            codec.upsert_schedule(queue, name, cron, tz, every_ms, payload, metadata,
                                  priority_offset_ms, max_attempts, misfire, overlap),
            timeout, durability)

    def get_schedule(self, queue, name, *, timeout=None):
        """The schedule, its next and last fires and its counts (``Schedule``)."""
        return self._execute(codec.get_schedule(queue, name), timeout)

    def list_schedules(self, queue=None, *, timeout=None):
        """Every schedule of ``queue`` (None: of every queue), by queue then name."""
        return self._execute(codec.list_schedules(queue), timeout)

    def delete_schedule(self, queue, name, *, timeout=None, durability=None):
        """Removes the schedule (the messages it enqueued stay)."""
        return self._execute(codec.delete_schedule(queue, name), timeout, durability)

    def pause_schedule(self, queue, name, *, timeout=None, durability=None):
        """Stops its fires until resumed; returns the ``Schedule``."""
        return self._execute(codec.pause_schedule(queue, name), timeout, durability)

    def resume_schedule(self, queue, name, *, timeout=None, durability=None):
        """Fires again from now on (fires while paused are not made); returns the
        ``Schedule``."""
        return self._execute(codec.resume_schedule(queue, name), timeout, durability)

    def trigger_schedule(self, queue, name, *, timeout=None, durability=None):
        """Fires it now, paused or not: returns ``TriggerResult`` (``id`` ``name@T``,
        ``fire_at``, ``duplicate``)."""
        return self._execute(codec.trigger_schedule(queue, name), timeout, durability)

    # ---- Messages ------------------------------------------------------------------------

    def enqueue(self, queue, payload=b"", priority=0, metadata=None, id=None, delay_ms=None,
                max_attempts=None, *, visible_at=None, wait_ms=None, depends_on=None,
                on_dependency_failure=None, batch=None, ttl_ms=None, debounce_ms=None,
                timeout=None, durability=None):
        """Puts one message; returns ``EnqueueResult`` (``id``, ``version``, ``duplicate``).

        ``payload``: bytes (a str is sent as UTF-8). ``priority``: lower runs first (by
        convention a deadline in ms since the epoch). ``metadata``: dict of str to str.
        ``id``: yours, or one the server generates. ``delay_ms`` or ``visible_at`` (absolute,
        ms): invisible until then (neither: the queue's ``invisibility_ms``). The queue is
        created with the defaults if it does not exist. Raises the item's error.
        ``wait_ms`` (up to 60000): the reply comes once the message is terminal (or the time
        runs out), with its ``outcome`` (an ``Outcome``); see ``call``.
        ``depends_on``: messages that must complete first, a list of "queue/id" (or ids of
        this queue, up to 100000); until then the message is ``waiting``. A dependency that
        does not exist is NOT_FOUND. ``on_dependency_failure``: what it does when one is
        canceled or errored: "cancel" (the default), "release" (it runs anyway) or "error".
        ``batch``: the batch it joins (``create_batch``; NOT_FOUND when none,
        FAILED_PRECONDITION once sealed). ``ttl_ms``: canceled as expired if still pending or
        invisible that long after now (else the queue's ``ttl_ms``). ``debounce_ms`` (with
        ``id``): a pending or invisible message of that id gets this payload and metadata and
        becomes visible no earlier than now + ``debounce_ms`` (docs/semantics.md, "Flow
        control")."""
        if id is None:
            id = self._default_id()
        item = codec.enqueue_item(payload, priority, metadata, id, delay_ms, visible_at,
                                  max_attempts, depends_on, on_dependency_failure, batch,
                                  ttl_ms, debounce_ms)
        return self._execute(codec.enqueue(queue, item, wait_ms or 0), timeout, durability)

    def call(self, queue, payload=b"", *, timeout=30.0, priority=0, metadata=None, id=None,
             delay_ms=None, max_attempts=None, durability=None):
        """Request and response in one round trip: enqueues one message and returns its
        ``Outcome`` once a worker has finished it (``state`` "completed" with the ``result``
        the worker's handler returned; "errored" or "canceled" with ``last_error``), or when
        ``timeout`` seconds (at most 60) have passed: then ``outcome.done`` is False and the
        message runs on; ``wait`` can wait for it again."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
                not 0 < timeout <= 60:
            raise codec.invalid_argument("timeout: must be a number of seconds in (0, 60]")
        if id is None:
            id = self._default_id()
        item = codec.enqueue_item(payload, priority, metadata, id, delay_ms, None, max_attempts)
        request = codec.enqueue(queue, item, int(timeout * 1000))
        enqueue_decode = request.decode
        request.decode = lambda response: enqueue_decode(response).outcome
        return self._execute(request, None, durability)

    # ---- Flows (docs/semantics.md, "Flows") ---------------------------------------------------

    def enqueue_flow(self, trees, *, timeout=None, durability=None):
        """Enqueues a tree of messages across queues (or a list of trees) in one request,
        atomically: each node's message waits until all its children have completed. A node is
        a dict of ``enqueue``'s arguments (``payload``, ``priority``, ``metadata``, ``id``,
        ``delay_ms``, ``visible_at``, ``max_attempts``, ``depends_on``,
        ``on_dependency_failure``, ``batch``) with ``queue`` and optionally ``children`` (a
        list of nodes). At most 1000 nodes, 32 levels. Returns one ``FlowNodeResult`` per node
        in pre-order (a node, then each child's subtree in order). Raises the flow's error
        (naming the node as ``nodes[i]``, in the same order); then nothing was enqueued. A
        tree whose root ``id`` exists with the same content is a resend: its nodes come back
        with ``duplicate`` True."""
        return self._execute(codec.enqueue_flow(trees, self._default_id), timeout, durability)

    # ---- Batches (docs/semantics.md, "Batches") ---------------------------------------------

    def create_batch(self, id, callback=None, *, retention_ms=None, timeout=None,
                     durability=None):
        """Creates an open batch (server-wide; members may be in any queue); returns it
        (``Batch``). ``callback``: a dict — ``queue`` and optionally ``id`` (default
        "batch:<id>"), ``priority``, ``payload``, ``metadata`` (at most 11 pairs),
        ``max_attempts`` — the message enqueued once, when the batch is sealed and every member
        is terminal, with the counts in its metadata (``x-batch-total``, ``x-batch-completed``,
        ``x-batch-canceled``, ``x-batch-errored``, ``x-batch-id``). Repeating it with the same
        callback returns the batch; with another it raises ALREADY_EXISTS."""
        return self._execute(codec.create_batch(id, callback, retention_ms), timeout, durability)

    def seal_batch(self, id, *, timeout=None, durability=None):
        """No member may join any more; the batch is done (its callback enqueued) once no
        member is active — at once if none is. Returns the ``Batch``."""
        return self._execute(codec.seal_batch(id), timeout, durability)

    def get_batch(self, id, *, timeout=None):
        """The ``Batch`` with its members' counts (NOT_FOUND when none)."""
        return self._execute(codec.get_batch(id), timeout)

    def wait(self, queue, ids, wait_ms=0, *, timeout=None):
        """Each message's ``Outcome`` once every one is terminal (completed, canceled or
        errored), or after ``wait_ms`` (up to 60000) with what is terminal so far: ``ids`` a
        list (returns a list, in order) or one id (returns its Outcome). An id with no message
        has its ``error`` (NOT_FOUND). Results are readable until retention removes the
        message."""
        return self._execute(codec.wait(queue, ids, wait_ms), timeout)

    def enqueue_batch(self, queue, items, *, timeout=None, durability=None):
        """Puts many messages: ``items`` are dicts of enqueue's arguments (``payload``,
        ``priority``, ``metadata``, ``id``, ``delay_ms``, ``visible_at``, ``max_attempts``,
        ``depends_on``, ``on_dependency_failure``); an item may depend on an earlier one of
        the same request.
        Sent 1000 to a request, the requests pipelined. Returns one ``EnqueueResult`` per
        item, in order; an item the server refused has its SundialError in ``.error`` (the
        others are enqueued)."""
        if self._default_id() is not None and isinstance(items, (list, tuple)):
            items = [item if not isinstance(item, dict) or item.get("id") is not None
                     else dict(item, id=self._default_id()) for item in items]
        return self._execute(codec.enqueue_batch(queue, items), timeout, durability)

    def dequeue(self, queue, max=1, lease_ms=None, filter=None, wait_ms=0, *,
                include_dependency_results=False, worker_id=None, timeout=None,
                durability=None):
        """Leases up to ``max`` (1–1000) pending messages, earliest priority first, for
        ``lease_ms`` (default: the queue's). ``filter``: a dict that the metadata must hold
        (up to 4 pairs). ``wait_ms`` (up to 60000): a long poll, answered as soon as a message
        is dequeueable, or empty when it runs out. Returns ``[Message]``, each ``running``
        with its ``lease_token``. ``include_dependency_results``: each message carries its
        dependencies' outcomes in ``dependency_results`` (their ``result`` among them).
        ``worker_id`` (up to 128 bytes) names who dequeues: it is kept in each leased
        message's history (``history``)."""
        return self._execute(
            codec.dequeue(queue, max, lease_ms, filter, wait_ms, include_dependency_results,
                          worker_id),
            timeout, durability)

    def history(self, queue, id, *, timeout=None):
        """The message's transitions, oldest first (docs/semantics.md, "History"): a
        ``History`` with ``entries`` (``[HistoryEntry]``: ``time``, ``event``, ``from_state``,
        ``to_state``, ``attempt``, ``lease_token``, ``actor``, ``worker_id``, ``text``) and
        ``dropped``. NOT_FOUND when the message is gone."""
        return self._execute(codec.history(queue, id), timeout)

    def set_key_limits(self, queue, value, *, concurrency=None, rate_per_s=None, burst=None,
                       weight=None, timeout=None, durability=None):
        """Overrides the key limits of one flow-key value (docs/semantics.md, "Per-key
        limits"): ``concurrency`` (0: no limit), ``rate_per_s`` (0: no rate), ``burst``,
        ``weight`` (1-1000: its share under fairness "weighted"). The fields given replace the
        value's overrides whole: none removes them. Returns the value (``KeyInfo``).
        FAILED_PRECONDITION on a queue without a flow key."""
        return self._execute(codec.set_key_limits(queue, value, concurrency, rate_per_s, burst,
                                                  weight), timeout, durability)

    def get_key_limits(self, queue, value, *, timeout=None):
        """One flow-key value (``KeyInfo``): its overrides, the limits in effect, its pending
        and running messages, ``held``, ``next_token``."""
        return self._execute(codec.get_key_limits(queue, value), timeout)

    def list_keys(self, queue, *, order="pending", limit=20, timeout=None):
        """The first ``limit`` (1-1000) flow-key values of a queue by ``order`` ("pending",
        "running" or "throttled"): a list of ``KeyInfo``."""
        return self._execute(codec.list_keys(queue, order, limit), timeout)

    def note(self, queue, id, lease_token, text, *, timeout=None, durability=None):
        """Adds a note (1–1024 bytes) to the history of a message held under ``lease_token``
        (the lease checks of ``complete``; FAILED_PRECONDITION also when the queue's
        ``history_max`` is 0). Not sent again after an unknown outcome."""
        return self._execute(codec.note(queue, id, lease_token, text), timeout, durability)

    def complete(self, queue, id, lease_token, result=None, *, timeout=None, durability=None):
        """Marks a leased message completed. A stale or expired token is
        FAILED_PRECONDITION; repeating a complete that succeeded succeeds (the first result
        stays). ``result`` (bytes; a str as UTF-8; anything else as JSON) is stored with the
        message, up to the server's ``--max-result-bytes`` (64 KiB by default), and read back
        by ``get``, ``wait`` and ``call``."""
        return self._execute(codec.complete(queue, id, lease_token, result), timeout, durability)

    def complete_batch(self, queue, items, *, timeout=None, durability=None):
        """Completes many: ``items`` are ``(id, lease_token)`` pairs or ``(id, lease_token,
        result)`` triples. Returns, per item, None (done) or its SundialError."""
        return self._execute(codec.complete_batch(queue, items), timeout, durability)

    def complete_and_next(self, queue, items, max=1, lease_ms=None, filter=None, wait_ms=0,
                          include_dependency_results=False, *, worker_id=None, timeout=None,
                          durability=None):
        """A worker's "finish these, give me the next" in one request, one fsync and one reply
        (docs/semantics.md, "Complete-and-next"): completes ``items`` (as ``complete_batch``'s,
        up to 1000), then leases up to ``max`` messages of the same queue as ``dequeue`` would
        (``lease_ms``, ``filter``, ``wait_ms``, ``include_dependency_results``). The dequeue
        runs whatever the items' outcomes. Returns ``CompleteAndNextResult`` (``items``,
        ``messages``, ``next_error``)."""
        return self._execute(codec.complete_and_next(queue, items, max, lease_ms, filter,
                                                     wait_ms, include_dependency_results,
                                                     worker_id),
                             timeout, durability)

    def fail(self, queue, id, lease_token, error="", retry_delay_ms=None, *, timeout=None,
             durability=None):
        """Gives a leased message back after a failed attempt: ``error`` becomes its
        ``last_error``; it is retried after ``retry_delay_ms`` or the queue's backoff, or is
        errored (or dead-lettered) when its attempts are spent. Returns ``FailResult``."""
        return self._execute(codec.fail(queue, id, lease_token, error, retry_delay_ms), timeout,
                             durability)

    def extend(self, queue, id, lease_token, lease_ms, *, timeout=None, durability=None):
        """The lease now ends ``lease_ms`` from now; returns the new ``lease_expires_at``."""
        return self._execute(codec.extend(queue, id, lease_token, lease_ms), timeout, durability)

    def cancel(self, queue, ids=None, *, filter=None, timeout=None, durability=None):
        """Cancels invisible, pending or running messages. ``ids``: a list (returns, per id,
        None or its SundialError) or one id (raises its error). ``filter`` instead of ids:
        every match; returns the count."""
        return self._execute(codec.cancel(queue, ids, filter), timeout, durability)

    def reprioritize(self, queue, id=None, priority=None, visible_at=None, *, filter=None,
                     timeout=None, durability=None):
        """Changes an invisible or pending message's ``priority`` and/or ``visible_at``;
        returns its new version. With ``filter`` instead of ``id``: every match, returns the
        count."""
        return self._execute(codec.reprioritize(queue, id, priority, visible_at, filter),
                             timeout, durability)

    def redrive(self, queue, ids=None, *, all=False, filter=None, timeout=None,
                durability=None):
        """Moves errored messages back to pending with attempts 0: by ``ids`` (a list: per id
        None or SundialError; one id: raises), ``all=True`` or ``filter`` (returns the
        count)."""
        return self._execute(codec.redrive(queue, ids, all, filter), timeout, durability)

    def get(self, queue, id, *, include_dependency_results=False, timeout=None):
        """The whole message, in any state until retention removes it (``Message``);
        ``include_dependency_results``: with its dependencies' outcomes
        (``dependency_results``)."""
        return self._execute(codec.get(queue, id, include_dependency_results), timeout)

    def browse(self, queue, state="pending", filter=None, cursor=None, limit=100, *,
               timeout=None):
        """Messages in one state, in dequeue order, ``limit`` (1–1000) at a time: a
        ``BrowsePage`` with ``messages`` (``MessageSummary``) and ``next_cursor`` (pass it
        back for the next page; "" at the end)."""
        return self._execute(codec.browse(queue, state, filter, cursor, limit), timeout)

    def count(self, queue, filter=None, *, timeout=None):
        """Messages per state, and ``blocked`` (``Counts``); with a filter, matches only."""
        return self._execute(codec.count(queue, filter), timeout)

    def explain(self, queue, id=None, *, filter=None, timeout=None):
        """Why a message (or a dequeue with ``filter``) is or is not dequeueable now
        (``Explanation``)."""
        return self._execute(codec.explain(queue, id, filter), timeout)

    # ---- Server --------------------------------------------------------------------------

    def stats(self, *, timeout=None):
        """The server's counters (``Stats``)."""
        return self._execute(codec.stats(), timeout)

    def health(self, *, timeout=None):
        """``Health``: live, ready, and why not ready."""
        return self._execute(codec.health(), timeout)

    def cluster(self, *, timeout=None):
        """The cluster as the node connected to sees it (``Cluster``: ``primary``, ``epoch``,
        ``sync_standby``, ``members`` with roles, log positions and lag). Any node answers;
        a client following a cluster asks the primary when it knows it. A server outside a
        cluster answers with itself alone (``cluster`` is "")."""
        return self._execute(codec.cluster(), timeout)

    def switchover(self, to=None, *, timeout=None):
        """A planned change of primary: the primary hands over to ``to`` (a node name; default
        the synchronous standby) once it holds every record, and returns when it has; the new
        primary then shows in ``cluster()``. Never sent twice by the client."""
        return self._execute(codec.switchover(to), timeout)


OPERATION_NAMES = tuple(name for name in vars(Operations)
                        if not name.startswith("_") and callable(getattr(Operations, name)))
