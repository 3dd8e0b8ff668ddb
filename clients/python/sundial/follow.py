"""follow: the rules by which a client follows a cluster's primary (docs/clients/python.md,
"Clusters"), without I/O, so that Client (threads), AsyncClient (asyncio) and the watches
(watch.py) decide alike and only do their own waiting and sending.

- ``cluster_addresses``: whether the client was given a cluster (a list, or commas).
- ``PrimarySearch``: one look for the primary: the order in which nodes are asked with the
  Cluster request, which answer is the primary's (``answers_as_primary``), and the error when
  none is.
- ``failure``: after a call failed, whether it is sent again (``Retry``), where, and whether
  the connection is still the primary's.
- ``Backoff`` and ``gave_up``: the waits between tries, and the error after ``retry_budget``.
- ``primary_http``: the primary's HTTP/WebSocket address, from a Cluster answer (watches).
- ``FollowingClient``: what Client and AsyncClient do alike with those answers (which
  connection they keep, the highest epoch seen, whether they are on the primary).
"""

import random
import time

from .address import format_address, parse_address
from .errors import SundialError, invalid_argument, unavailable

RECONNECT_INITIAL_S = 0.05
RECONNECT_MAX_S = 2.0
DEFAULT_RETRY_BUDGET_S = 20.0  # following a cluster: how long a call may keep retrying
DEFAULT_HTTP_PORT = 7401


def cluster_addresses(addr):
    """[(host, port, text)] of the nodes `addr` names when it is a list or a string with commas
    (repeats dropped), else None. INVALID_ARGUMENT for an empty list or element."""
    if isinstance(addr, str) and "," in addr:
        parts = [part.strip() for part in addr.split(",")]
    elif isinstance(addr, list):
        parts = list(addr)
    else:
        return None
    if not parts or any(part == "" for part in parts):
        raise invalid_argument(f"addresses {addr!r}: give one or more, without empty ones")
    seeds = []
    for part in parts:
        host, port = parse_address(part)
        text = format_address(host, port)
        if all(text != known for _, _, known in seeds):
            seeds.append((host, port, text))
    return seeds


def seeds_of(addr):
    """(address to start from, seeds or None): a list or commas naming one node is that node,
    not followed."""
    seeds = cluster_addresses(addr)
    if seeds is None:
        return addr, None
    if len(seeds) == 1:
        return seeds[0][2], None
    return seeds[0][2], seeds


def retry_budget_s(value):
    """`retry_budget` checked: seconds as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise invalid_argument("retry_budget: must be a number of seconds >= 0")
    return float(value)


def answers_as_primary(view, highest_epoch):
    """Whether a Cluster answer comes from the primary (a node outside a cluster is its own)
    at an epoch no older than one seen already."""
    if not view.cluster:
        return True
    return bool(view.primary) and view.node == view.primary and view.epoch >= highest_epoch


class PrimarySearch:
    """One look for the primary. The caller asks the node it is connected to first (unless a
    node named another: ``hint``), then the nodes of ``order`` in turn, and reports each
    answer to ``answered`` (which says whether it is the primary's and adds the primary it
    names to ``order``) or each failure to ``failed``; ``error()`` is what to raise when no
    node answered as the primary."""

    def __init__(self, seeds, highest_epoch, hint=None):
        self.seeds = seeds
        self.highest_epoch = highest_epoch
        self.order = []  # [(host, port, text)] still to ask, in order
        self.last = None  # the last failure
        self.said = None  # what the first node that answered said about the primary
        if hint:
            self.add(hint)

    def add(self, text):
        try:
            host, port = parse_address(text)
        except SundialError:
            return
        entry = (host, port, format_address(host, port))
        if entry not in self.order:
            self.order.append(entry)

    def add_seeds(self):
        for _, _, text in self.seeds:
            self.add(text)

    def answered(self, view):
        """Records `view` (a Cluster answer); whether it is the primary's."""
        self.highest_epoch = max(self.highest_epoch, view.epoch)
        if answers_as_primary(view, self.highest_epoch):
            return True
        if view.primary_addr:
            self.add(view.primary_addr)
        if self.said is None:
            self.said = view
        return False

    def failed(self, error):
        self.last = error

    def error(self):
        said = self.said
        if said is not None:
            if said.primary:
                why = (f"{said.node} names {said.primary} as primary (epoch {said.epoch}), "
                       "which does not answer as one")
            else:
                why = f"{said.node} knows no primary (epoch {said.epoch}): an election is under way"
            return SundialError("NOT_PRIMARY", f"no node answers as the primary: {why}")
        last = self.last
        if last is not None and last.code == "UNAUTHENTICATED":
            return last
        names = ", ".join(text for _, _, text in self.seeds)
        return unavailable(f"cannot reach any of {names}" +
                           (f" (last: {last.message})" if last else ""))


class Retry:
    """What ``failure`` decided: ``again`` (send the call again), ``hint`` (the address a
    node named as the primary: try there at once, without a backoff), ``lost`` (the connection
    is no longer known to be the primary's)."""

    __slots__ = ("again", "hint", "lost")

    def __init__(self, again, hint, lost):
        self.again, self.hint, self.lost = again, hint, lost


def failure(request, error, *, sent, from_server, address):
    """The rule after `request` (a codec.Call) failed with `error` on the connection to
    `address`. `from_server`: the server answered with `error` (else the connection failed or
    the deadline passed); `sent`: the request may have reached the server (a connection's
    failure only). A refusal with NOT_PRIMARY applied nothing and is always sent again; after
    an unknown outcome (a lost connection after the request was written, no reply in time,
    the server's UNAVAILABLE) only a Call whose ``resend`` allows it."""
    code = error.code
    if from_server:
        unknown = code == "UNAVAILABLE"
        lost = code in ("NOT_PRIMARY", "UNAVAILABLE")
    else:
        unknown = sent
        lost = True
    again = code in ("NOT_PRIMARY", "UNAVAILABLE") and (request.resend or not unknown)
    hint = None
    if from_server and code == "NOT_PRIMARY" and error.primary and error.primary != address:
        hint = error.primary
    return Retry(again, hint, lost)


class Backoff:
    """The wait before the next try: 50 ms doubling to 2 s, each jittered to 50-100 %."""

    __slots__ = ("_delay",)

    def __init__(self):
        self._delay = RECONNECT_INITIAL_S

    def next(self, remaining):
        """Seconds to wait now (at most `remaining`)."""
        wait = min(self._delay * random.uniform(0.5, 1.0), max(remaining, 0))
        self._delay = min(self._delay * 2, RECONNECT_MAX_S)
        return wait


def gave_up(error, tries, elapsed):
    """The error a call raises once its retry budget is spent: the last one, saying so."""
    return SundialError(error.code, f"{error.message} (gave up following the primary after "
                        f"{tries} tries in {elapsed:.1f} s)", error.origin, error.primary)


def primary_http(view):
    """(host, port, "host:port") of the HTTP/WebSocket port of the primary a Cluster answer
    names (its member's ``http_addr``); None while it names none, or lists no such address."""
    if not view.primary:
        return None
    for member in view.members:
        if member.node == view.primary and member.http_addr:
            host, port = parse_address(member.http_addr, default_port=DEFAULT_HTTP_PORT)
            return host, port, format_address(host, port)
    return None


class FollowingClient:
    """The part of following that Client (threads) and AsyncClient (asyncio) share: what a
    search does with a node's answer and when a connection stops being the primary's. The
    class using it has ``_conn``, ``_host``, ``_port``, ``_address``, ``_highest_epoch``,
    ``_on_primary`` and ``_timeout``; it connects and asks on its own (blocking or awaited)."""

    __slots__ = ()

    def _adopt(self, search, view, conn, current, host, port, text):
        """`conn` to (host, port, text) answered Cluster with `view` in `search`. Keeps it if
        it is the primary's, or, while none is known, as the connection that answers; closes
        it otherwise. Returns (whether it is the primary's, the connection now kept)."""
        primary = search.answered(view)
        self._highest_epoch = search.highest_epoch
        if primary or current is None:
            # The primary; or, while none is known, a node that answers.
            if self._conn is not None and self._conn is not conn:
                self._conn.close()
            self._conn = current = conn
            self._host, self._port, self._address = host, port, text
        else:
            conn.close()
        if primary:
            self._on_primary = True
        return primary, current

    def _ask_deadline(self, deadline):
        """How long one node may take to connect and answer Cluster: the client's timeout
        (a paused node accepts connections and answers nothing), within `deadline`."""
        return min(deadline, time.monotonic() + self._timeout)

    def _lost_primary(self, conn):
        """A call on `conn` found it is not the primary's any more (or lost it)."""
        if self._conn is conn:
            self._on_primary = False
