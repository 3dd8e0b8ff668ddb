"""The values the client returns: plain objects with the protocol's field names (snake_case).

Every one has ``as_dict()``, equality by value and a readable ``repr``. Times are ms since the
Unix epoch; states are strings (``"pending"``, ``"running"``, ...).
"""

STATES = ("invisible", "pending", "running", "completed", "canceled", "errored", "waiting")
QUEUE_TYPES = ("simple", "exclusive")
EXPLAIN_REASONS = ("dequeueable", "invisible", "exclusivity_held", "queue_paused", "no_match",
                   "attempts_spent", "running", "terminal", "waiting_on_dependencies",
                   "key_concurrency", "key_rate", "queue_rate", "fair_share")


class Record:
    """Fields in FIELDS, set by keyword; missing ones are None.

    A record read from a reply is lazy: it keeps the reply's FlatBuffers table and decodes a
    field the first time it is read (``_decoders``, set by codec.py), then keeps the value.
    FlatBuffers is made for reading in place, and the generated Python accessors cost a few
    microseconds each, so a worker that reads three fields of a message does not pay for
    fifteen.
    """

    __slots__ = ("_source",)
    FIELDS = ()
    _decoders = {}

    def __init__(self, **fields):
        for name in self.FIELDS:
            object.__setattr__(self, name, fields.pop(name, None))
        self._source = None
        if fields:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(fields)}")

    @classmethod
    def _lazy(cls, source):
        """A record whose fields are decoded from `source` (a generated table) on first use."""
        record = cls.__new__(cls)
        record._source = source
        return record

    def __getattr__(self, name):
        # Only reached for a field not read yet (a set slot is found without calling this).
        if name == "_source" or name not in self._decoders:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._decoders[name](self._source)
        object.__setattr__(self, name, value)
        return value

    def as_dict(self):
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other):
        return type(other) is type(self) and self.as_dict() == other.as_dict()

    __hash__ = None

    def __reduce__(self):  # picklable: every field decoded, the reply buffer left behind
        return (_rebuild, (type(self), self.as_dict()))

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items() if v is not None)
        return f"{type(self).__name__}({shown})"


def _rebuild(cls, fields):
    return cls(**fields)


class Message(Record):
    """A message as dequeue and get return it.

    ``payload`` is bytes, ``metadata`` a dict of str to str. While ``running``,
    ``lease_token`` and ``lease_expires_at`` describe the lease that complete, fail and extend
    must present. ``dependency_results``: asked for with ``include_dependency_results``, one
    ``Outcome`` per dependency listed at enqueue (``id`` "queue/id", ``state``, ``result``,
    ``last_error``), in order; None when not asked or when it has no dependencies.
    ``expires_at``: when its ttl runs out (ms since the epoch; 0: no ttl).
    """

    __slots__ = ("queue", "id", "priority", "payload", "metadata", "state", "attempts",
                 "max_attempts", "visible_at", "lease_token", "lease_expires_at", "version",
                 "enqueued_at", "updated_at", "last_error", "result", "dependency_results",
                 "expires_at")
    FIELDS = __slots__
    _decoders = {}


class EnqueueResult(Record):
    """One enqueued message: its ``id`` (generated when none was given), ``version``, and
    ``duplicate`` (True when the same id with identical content existed: nothing changed).
    In ``enqueue_batch`` results, ``error`` is the item's SundialError (else None)."""

    __slots__ = ("id", "version", "duplicate", "error", "outcome")
    FIELDS = __slots__
    _decoders = {}


class FlowNodeResult(Record):
    """One node of an ``enqueue_flow`` (docs/semantics.md, "Flows"): its ``queue``, ``id``
    (generated when none was given), ``version``, and ``duplicate`` (its tree was a resend: the
    root existed with the same content, and nothing of the tree was enqueued)."""

    __slots__ = ("queue", "id", "version", "duplicate")
    FIELDS = __slots__
    _decoders = {}


class Batch(Record):
    """A batch (docs/semantics.md, "Batches"): ``id``, ``callback`` (a dict: ``queue``, ``id``,
    ``priority``, ``payload``, ``metadata``, ``max_attempts``; None without one),
    ``retention_ms``, ``created_at``, ``sealed``, ``done`` (sealed and no member active: the
    callback was enqueued), ``done_at``, and the members' counts: ``members``, ``active``,
    ``completed``, ``canceled`` (also purged or deleted with their queue), ``errored`` (also
    moved to a dead-letter queue)."""

    __slots__ = ("id", "callback", "retention_ms", "created_at", "sealed", "done", "done_at",
                 "members", "active", "completed", "canceled", "errored")
    FIELDS = __slots__
    _decoders = {}


class HistoryEntry(Record):
    """One transition of a message (docs/semantics.md, "History"): ``time``, ``event``
    ("enqueued", "leased", "completed", "failed", ... "dead_lettered", "noted"), ``from_state``
    and ``to_state`` (``from`` in the protocol), ``attempt``, ``lease_token`` (0: none),
    ``actor`` ("request", "worker", "timer", "dependency", "engine"), ``worker_id`` (of the
    lease it concerns, when known; else None) and ``text`` (leased: the worker_id; failed: the
    error; noted: the note; else None)."""

    __slots__ = ("time", "event", "from_state", "to_state", "attempt", "lease_token", "actor",
                 "worker_id", "text")
    FIELDS = __slots__


class History(Record):
    """A message's ``entries`` (``[HistoryEntry]``, oldest first: the first, then the latest)
    and ``dropped``, how many were left out between them (the queue's ``history_max``)."""

    __slots__ = ("entries", "dropped")
    FIELDS = __slots__


class KeyInfo(Record):
    """A flow-key value (docs/semantics.md, "Per-key limits"): ``value``, ``overrides`` (a dict
    of what set_key_limits set for it: ``concurrency``, ``rate_per_s``, ``burst``, ``weight``;
    empty: none), the limits in effect (``concurrency``, ``rate_per_s``, ``burst``,
    ``weight``), ``pending`` and ``running`` (its messages now), ``held`` (running at its
    concurrency) and ``next_token`` (out of tokens: when its next one comes, ms; else 0)."""

    __slots__ = ("value", "overrides", "concurrency", "rate_per_s", "burst", "weight", "pending",
                 "running", "held", "next_token")
    FIELDS = __slots__


KEY_ORDERS = ("pending", "running", "throttled")


TERMINAL_STATES = ("completed", "canceled", "errored")


class Outcome(Record):
    """What ``wait`` (and ``call``, and ``enqueue`` with ``wait_ms``) report of one message:
    its ``state``, its ``result`` (bytes; completed), its ``last_error`` (the last fail's text),
    or ``error``: a SundialError for an id that has none (NOT_FOUND: no such message, or it
    was removed by retention or moved to a dead-letter queue). ``done``: terminal, or an
    error (nothing more to wait for)."""

    __slots__ = ("id", "state", "result", "last_error", "error")
    FIELDS = __slots__
    _decoders = {}

    @property
    def done(self):
        return self.error is not None or self.state in TERMINAL_STATES


class Counts(Record):
    """Messages per state (``waiting``: on dependencies), and ``blocked``: pending ones whose
    exclusivity value is leased."""

    __slots__ = STATES + ("blocked",)
    FIELDS = __slots__
    _decoders = {}


class Queue(Record):
    """A queue: its settings (named as in docs/semantics.md), per-state ``counts``, the age of the oldest
    pending message and the memory it holds."""

    __slots__ = ("name", "type", "exclusivity_key", "lease_ms", "invisibility_ms",
                 "max_attempts", "retry_backoff_ms", "retry_backoff_max_ms",
                 "dead_letter_queue", "retention_ms", "max_depth", "enqueue_paused",
                 "dequeue_paused", "history_max", "flow_key", "key_concurrency", "ttl_ms",
                 "dedupe", "rate_per_s", "burst", "key_rate_per_s", "key_burst", "fairness",
                 "overdue_first_ms", "counts",
                 "oldest_pending_age_ms", "memory_bytes")
    FIELDS = __slots__
    _decoders = {}

    SETTINGS = ("type", "exclusivity_key", "lease_ms", "invisibility_ms", "max_attempts",
                "retry_backoff_ms", "retry_backoff_max_ms", "dead_letter_queue",
                "retention_ms", "max_depth", "enqueue_paused", "dequeue_paused",
                "history_max", "flow_key", "key_concurrency", "ttl_ms", "dedupe", "rate_per_s",
                "burst", "key_rate_per_s", "key_burst", "fairness", "overdue_first_ms")

    @property
    def settings(self):
        """The settings alone, as keyword arguments for create_queue."""
        return {name: getattr(self, name) for name in self.SETTINGS}


class CompleteAndNextResult(Record):
    """What complete_and_next did (docs/semantics.md, "Complete-and-next"): ``items``, per
    completed item None (done) or its SundialError; ``messages``, the ``[Message]`` its ``next``
    leased (maybe empty); ``next_error``, the SundialError of a ``next`` the server refused
    (a bad queue, max, lease_ms or filter: then nothing was completed either), else None."""

    __slots__ = ("items", "messages", "next_error")
    FIELDS = __slots__
    _decoders = {}


class FailResult(Record):
    """What fail did: the message's new ``state`` (``invisible``, ``pending`` or ``errored``),
    ``visible_at`` when invisible, and ``dead_letter_queue`` when it moved there."""

    __slots__ = ("state", "visible_at", "dead_letter_queue")
    FIELDS = __slots__
    _decoders = {}


class MessageSummary(Record):
    """A message as browse lists it (no payload or metadata)."""

    __slots__ = ("id", "priority", "state", "attempts", "version", "visible_at",
                 "lease_expires_at", "enqueued_at", "updated_at", "expires_at")
    FIELDS = __slots__
    _decoders = {}


class BrowsePage(Record):
    """One page of browse: ``messages`` (MessageSummary) and ``next_cursor`` ("" at the end)."""

    __slots__ = ("messages", "next_cursor")
    FIELDS = __slots__
    _decoders = {}


class Explanation(Record):
    """Why a message (or a filter) is or is not dequeueable now; see docs/protocol.md#explain.
    ``reason`` is one of EXPLAIN_REASONS. Waiting on its dependencies: ``dependencies`` (how
    many), ``unfinished`` (how many are not finished) and ``waiting_on`` (the first 10 of those,
    "queue/id"). Explain by id, in any state: ``dependents`` (the first 10 dependents still
    waiting on this message, "queue/id") and ``waiting_dependents`` (how many in all). Held by
    its flow key (exclusivity_held, key_concurrency): ``key_running`` of ``key_concurrency``
    ("key acme 5/5 running")."""

    __slots__ = ("reason", "id", "state", "until", "lease_token", "exclusivity_value",
                 "attempts", "dependencies", "unfinished", "waiting_on", "dependents",
                 "waiting_dependents", "key_running", "key_concurrency")
    FIELDS = __slots__
    _decoders = {}


class Stats(Record):
    """The server's figures (docs/protocol.md#stats)."""

    __slots__ = ("uptime_ms", "queues", "messages", "memory_bytes", "memory_budget_bytes",
                 "connections", "wal_next_lsn", "wal_durable_lsn", "wal_fsyncs",
                 "wal_fsync_mean_us", "wal_bytes", "wal_failed")
    FIELDS = __slots__
    _decoders = {}


class Health(Record):
    """``live``, ``ready`` and the ``reason`` when not ready."""

    __slots__ = ("live", "ready", "reason")
    FIELDS = __slots__
    _decoders = {}


class Schedule(Record):
    """A server-held schedule (docs/semantics.md, "Schedules"): ``cron`` and ``tz``, or
    ``every_ms``; the message template (``payload``, ``metadata``, ``priority_offset_ms``,
    ``max_attempts``); ``misfire`` ("skip", "one", "all") and ``overlap`` ("allow",
    "skip_if_active"); ``paused``; ``next_fire_at`` (0 while paused), ``last_fire_at``,
    ``last_enqueued_at``; the counts ``fires``, ``overlap_skips``, ``missed``, ``failed`` and
    ``last_error``; ``created_at``, ``updated_at``. ``created``: upsert_schedule made it (False
    elsewhere)."""

    __slots__ = ("queue", "name", "cron", "tz", "every_ms", "payload", "metadata",
                 "priority_offset_ms", "max_attempts", "misfire", "overlap", "paused",
                 "next_fire_at", "last_fire_at", "last_enqueued_at", "fires", "overlap_skips",
                 "missed", "failed", "last_error", "created_at", "updated_at", "created")
    FIELDS = __slots__
    _decoders = {}


class TriggerResult(Record):
    """The fire trigger_schedule made: ``id`` (``name@T``), ``fire_at`` (T), ``duplicate``."""

    __slots__ = ("id", "fire_at", "duplicate")
    FIELDS = __slots__
    _decoders = {}


class ClusterMember(Record):
    """One node of a cluster as ``Client.cluster`` reports it (docs/protocol.md, Cluster):
    ``node``, ``role`` ("primary", "standby", "unknown", "standalone"), ``addr`` (binary TCP),
    ``http_addr``, ``replication_addr``, ``epoch``, ``end_lsn``, ``flushed_lsn``,
    ``lag_records``, ``lag_ms``, ``sync`` (the published synchronous standby)."""

    __slots__ = ("node", "role", "addr", "http_addr", "replication_addr", "epoch", "end_lsn",
                 "flushed_lsn", "lag_records", "lag_ms", "sync")
    FIELDS = __slots__
    _decoders = {}


class Cluster(Record):
    """A node's view of its cluster (``Client.cluster``): ``cluster`` (its name; "" outside
    one), ``node`` (the node that answered), ``epoch``, ``primary`` and ``primary_addr`` (""
    while none is known), ``sync_standby``, ``replication`` ("sync" or "async") and
    ``members`` ([ClusterMember])."""

    __slots__ = ("cluster", "node", "epoch", "primary", "primary_addr", "sync_standby",
                 "replication", "members")
    FIELDS = __slots__
    _decoders = {}


class MessageEvent(Record):
    """One change of a watched message (docs/protocol.md, MessageEvent): ``queue``, ``id``,
    ``from_state`` and ``to_state`` (the protocol's ``from`` and ``to``), ``version`` after the
    change, ``time`` (ms) and ``cause`` (``enqueued``, ``leased``, ``completed``, ...)."""

    __slots__ = ("queue", "id", "from_state", "to_state", "version", "time", "cause")
    FIELDS = __slots__
    _decoders = {}


class QueueStats(Record):
    """One queue in a StatsTick (``watch(..., queue_stats=True)``): ``queue`` (a Queue) and
    totals of its transitions since the server started or the queue was created."""

    __slots__ = ("queue", "enqueued", "dequeued", "completed", "failed", "lease_expired",
                 "canceled", "errored", "redriven", "dead_lettered")
    FIELDS = __slots__
    _decoders = {}


class StatsTick(Record):
    """The server's figures, once a second on a watch that asked for them: ``stats`` (Stats),
    ``time`` (ms), and ``queues`` ([QueueStats], with ``queue_stats=True``; else [])."""

    __slots__ = ("stats", "time", "queues")
    FIELDS = __slots__
    _decoders = {}


class Resubscribed(Record):
    """Not a change: a watch given a cluster (``Client(nodes).watch``) lost its subscription
    (the primary died, was demoted, or ended it) and has subscribed again on the primary at
    ``address`` (node ``node``, ``epoch``), at ``time`` (ms). Changes made between the last
    event before this marker and ``time`` were not delivered and are not replayed: read the
    state again (get, browse, count) if they matter. ``error`` is the SundialError that ended
    the previous subscription."""

    __slots__ = ("address", "node", "epoch", "time", "error")
    FIELDS = __slots__
    _decoders = {}
