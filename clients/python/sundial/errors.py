"""SundialError: every failure the client reports, typed by the protocol's code names (docs/protocol.md)."""

# The protocol's Code enum, by value (protocol/sundial.fbs). Kept as names here so that an
# error can be raised before the generated module is imported (address parsing, arguments).
CODES = (
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "FAILED_PRECONDITION",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "UNAUTHENTICATED",
    "INTERNAL",
    "NOT_PRIMARY",
)


class SundialError(Exception):
    """An error from the server, or one the client detected itself.

    ``code`` is one of the protocol's code names (``"NOT_FOUND"``, ``"FAILED_PRECONDITION"``, ...);
    ``message`` is the text, which names the offending field or limit. ``origin`` says where it
    came from:

    - ``"server"``: the server refused the request (or one item of a batch);
    - ``"connection"``: the connection failed or the deadline passed (code ``UNAVAILABLE``,
      or ``INTERNAL`` for a frame the client could not read). A mutation that fails this way
      may or may not have been applied;
    - ``"local"``: the client refused the arguments before sending anything.

    What to do is in the code (as in gRPC and Abseil): ``UNAVAILABLE`` means retry,
    ``FAILED_PRECONDITION`` means the state must change first (a lost lease, a paused queue).
    ``NOT_PRIMARY``: the node is a standby of a cluster (or an election is under way); nothing
    was applied; ``primary`` names the primary's address when the node knows it. A client
    given every node's address follows the primary by itself (docs/clients/python.md,
    "Clusters").
    """

    def __init__(self, code, message, origin="server", primary=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.origin = origin
        self.primary = primary  # NOT_PRIMARY: the primary's address ("host:port"), if named

    def __reduce__(self):  # picklable (multiprocessing, concurrent.futures)
        return (SundialError, (self.code, self.message, self.origin, self.primary))

    def __eq__(self, other):
        return (isinstance(other, SundialError) and self.code == other.code
                and self.message == other.message and self.origin == other.origin)

    def __hash__(self):
        return hash((self.code, self.message, self.origin))


def code_name(value):
    """The name of a protocol Code value (an unknown one from a newer server: INTERNAL)."""
    return CODES[value] if 0 <= value < len(CODES) else "INTERNAL"


def invalid_argument(message):
    return SundialError("INVALID_ARGUMENT", message, origin="local")


def unavailable(message):
    return SundialError("UNAVAILABLE", message, origin="connection")
