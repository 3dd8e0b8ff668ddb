"""TLS for the clients (docs/clients/python.md, "TLS"): the context, the handshake and its
errors. The blocking client's TLS connection is client.TlsConnection.

The server offers TLS 1.2 and 1.3 on both ports when it runs with ``--tls-cert`` (docs/
operations.md, "TLS"). The clients verify its certificate against ``ca_file`` (or the system's
CAs) and check that it names the host they connect to (a DNS name, or an IP address in its
subjectAltName), or ``server_hostname`` when given.

Why the blocking client needs its own TLS connection (client.TlsConnection): the plain one
lets any caller thread write while a reader thread reads, but an ``ssl.SSLSocket`` must not be
used from two threads at once (one OpenSSL object: a read may have to write, as in a TLS 1.3
key update), and refuses the ``MSG_PEEK`` liveness check. So a TLS connection makes every call
into the SSL object under one lock on a non-blocking socket, and an I/O thread reads replies and
writes what callers could not. AsyncClient needs none of this: asyncio's streams do TLS on the
event loop.
"""

import asyncio
import ssl
import time

from .errors import invalid_argument, unavailable


class TlsSettings:
    """What a client was told about TLS: the context, and the name to verify when it is not
    the host connected to."""

    __slots__ = ("context", "server_hostname")

    def __init__(self, context, server_hostname):
        self.context = context
        self.server_hostname = server_hostname

    def hostname_for(self, host):
        return self.server_hostname or host


def tls_settings(tls, ca_file, server_hostname):
    """TlsSettings, or None without TLS. ``ca_file`` or ``server_hostname`` imply ``tls``.
    A CA file that cannot be read is INVALID_ARGUMENT at once."""
    if ca_file is not None and not isinstance(ca_file, (str, bytes)) and not hasattr(
            ca_file, "__fspath__"):
        raise invalid_argument("ca_file: must be a path")
    if server_hostname is not None and (not isinstance(server_hostname, str)
                                        or not server_hostname):
        raise invalid_argument("server_hostname: must be a non-empty str")
    if not (tls or ca_file is not None or server_hostname is not None):
        return None
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise invalid_argument(f"ca_file {ca_file}: cannot read it as PEM CA certificates: "
                               f"{e}") from None
    # The server refuses anything older (docs/operations.md, "TLS").
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return TlsSettings(context, server_hostname)


def permanent(error):
    """True for a handshake failure that trying again cannot fix: a refused certificate, or a
    server that does not speak TLS. A reset or an EOF during the handshake (a restarting
    server, one at --max-connections) is not."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return True
    return isinstance(error, ssl.SSLError) and not isinstance(
        error, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError))


def handshake_error(address_text, error):
    """The SundialError (UNAVAILABLE, as the CLI's exit 3) for a permanent handshake failure."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return unavailable(f"tls: {address_text}: the server's certificate was refused: "
                           f"{error.verify_message or error.reason}")
    return unavailable(f"tls: handshake with {address_text} failed: "
                       f"{getattr(error, 'reason', None) or error} "
                       "(is TLS on at the server: --tls-cert?)")


def wrap(sock, settings, host, address_text, timeout):
    """The TLS socket over `sock`, connected to `host`, handshake done within `timeout`
    seconds. Raises SundialError for a permanent failure, OSError for one worth retrying."""
    sock.settimeout(max(timeout, 0.001))
    try:
        tls = settings.context.wrap_socket(sock, server_hostname=settings.hostname_for(host))
    except (ssl.SSLError, ssl.CertificateError) as e:
        sock.close()
        if permanent(e):
            raise handshake_error(address_text, e) from None
        raise
    except OSError:
        sock.close()
        raise
    tls.settimeout(None)
    return tls


async def open_async(sock, settings, host, address_text, deadline):
    """asyncio streams over connected `sock` with TLS, the handshake done by `deadline`
    (time.monotonic()). Raises SundialError for a permanent failure, OSError for one worth
    retrying."""
    try:
        return await asyncio.open_connection(
            sock=sock, ssl=settings.context, server_hostname=settings.hostname_for(host),
            ssl_handshake_timeout=max(deadline - time.monotonic(), 0.001))
    except (ssl.SSLError, ssl.CertificateError) as e:
        sock.close()
        if permanent(e):
            raise handshake_error(address_text, e) from None
        raise
    except OSError:
        sock.close()
        raise
