"""Server addresses: "host:port", "host", ":port", "[v6]:port" or "[v6]" (as the CLI takes)."""

from .errors import invalid_argument

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7400


def parse_address(text, default_port=DEFAULT_PORT):
    """(host, port); INVALID_ARGUMENT naming what is wrong."""
    if isinstance(text, tuple) and len(text) == 2:
        host, port = text
        return str(host), _port(str(port), text)
    if not isinstance(text, str):
        raise invalid_argument(f"address: must be 'host:port', not {type(text).__name__}")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise invalid_argument(f"address {text!r}: unclosed '['")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise invalid_argument(f"address {text!r}: expected ':port' after ']'")
        port = rest[1:] if rest else ""
    elif text.count(":") > 1:
        raise invalid_argument(f"address {text!r}: an IPv6 address needs brackets: [{text}]:port")
    else:
        host, _, port = text.partition(":")
    return host or DEFAULT_HOST, _port(port, text) if port else default_port


def _port(port, text):
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise invalid_argument(f"address {text!r}: port {port!r} is not a number in 1..65535")
    return int(port)


def format_address(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
