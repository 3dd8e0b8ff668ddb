"""What the browser tests and the dashboard benchmark share: a real sundiald on ephemeral ports
in a temporary directory, a small WebSocket JSON client (the standard library only), and a
headless Debian chromium driven by python3-selenium with the flags this machine needs."""

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
]


class Fatal(Exception):
    """Raised by a condition that can never hold (e.g. the server exited): no more waiting."""


def wait_for(condition, timeout=30.0, what="a condition"):
    """Polls `condition` until it returns a truthy value (returned) or `timeout` passes.
    `what` names the condition in the failure (a callable: evaluated then, to show the state)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Fatal:
            raise
        except Exception as e:  # a page mid-render: try again
            last_error = e
        if time.monotonic() >= deadline:
            if callable(what):
                what = what()
            raise AssertionError(f"timed out after {timeout} s waiting for {what}"
                                 + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(0.05)


class Server:
    """sundiald with --port 0 --http-port 0 and a --ready-file; stop() ends it (by its PID)."""

    def __init__(self, binary, flags=(), data_dir=None, http_port=0):
        self.binary = binary
        self.flags = list(flags)
        self.own_dir = data_dir is None
        self.dir = data_dir or tempfile.mkdtemp(prefix="sundial-browser-")
        self.http_port_wanted = http_port
        self.proc = None

    def start(self, timeout=30.0):
        ready = os.path.join(self.dir, "ready.json")
        if os.path.exists(ready):
            os.remove(ready)
        self.log_path = os.path.join(self.dir, "sundiald.log")
        args = [self.binary, "--data-dir", os.path.join(self.dir, "data"), "--port", "0",
                "--http-port", str(self.http_port_wanted), "--ready-file", ready,
                "--io-threads", "2"] + self.flags
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "ab"))

        def ready_file():
            if self.proc.poll() is not None:
                raise Fatal(f"sundiald exited {self.proc.returncode}: {self.log()}")
            try:
                with open(ready) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None

        info = wait_for(ready_file, timeout, "sundiald's ready file")
        self.port, self.http_port = info["port"], info["http_port"]
        self.url = f"http://127.0.0.1:{self.http_port}"
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class WsError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class UpgradeRefused(Exception):
    def __init__(self, status):
        super().__init__(f"upgrade refused with HTTP {status}")
        self.status = status


class Ws:
    """A WebSocket client speaking the protocol's JSON form (docs/protocol.md)."""

    def __init__(self, port, headers=None, timeout=30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET /ws HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            head += chunk
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
        if status != 101:
            self.sock.close()
            raise UpgradeRefused(status)
        self.buffer = head.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send_text(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        header = bytes([0x81])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("sundiald closed the WebSocket")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def read_message(self):
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("sundiald closed the WebSocket")
            if opcode == 9:  # ping: a pong with the same payload
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode in (1, 2, 0):
                parts.append(payload)
                if b0 & 0x80:
                    return json.loads(b"".join(parts))

    def call(self, op_type, op=None):
        """The Response's `result` (with defaults left out), or raises WsError."""
        self.next_id += 1
        rid = self.next_id
        self.send_text(json.dumps({"request_id": rid, "op_type": op_type, "op": op or {}}))
        while True:
            msg = self.read_message()
            body = msg.get("body", {})
            if msg.get("body_type") == "EventMessage":
                self.events.append(body)
                continue
            if body.get("request_id", 0) == rid:
                if "error" in body:
                    raise WsError(body["error"].get("code", "OK"), body["error"].get("message"))
                return body.get("result", {})

    # Shortcuts.
    def counts(self, queue):
        info = self.call("GetQueue", {"name": queue})["queue"]
        c = info.get("counts", {})
        return {s: c.get(s, 0) for s in ("waiting", "invisible", "pending", "running",
                                          "completed", "canceled", "errored", "blocked")}

    def settings(self, queue):
        return self.call("GetQueue", {"name": queue})["queue"].get("settings", {})

    def enqueue(self, queue, items):
        for i in range(0, len(items), 1000):
            result = self.call("Enqueue", {"queue": queue, "items": items[i:i + 1000]})
            bad = [r for r in result.get("items", []) if "error" in r]
            if bad:
                raise WsError("ENQUEUE", str(bad[0]))


def start_chromium(extra_flags=()):
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="sundial-chromium-")
    for flag in CHROMIUM_FLAGS + list(extra_flags) + [f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_page_load_timeout(60)
    driver.sundial_profile = profile
    return driver


def http_requests(performance_log):
    """The http(s) URLs the page asked for in a batch of the performance log."""
    urls = []
    for entry in performance_log:
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if url.startswith("http"):
                urls.append(url)
    return urls
