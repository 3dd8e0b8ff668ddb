// One connection to sundiald's binary TCP port (plain or TLS): the framing, the requests in
// flight, and their replies matched by request_id (docs/protocol.md#pipelining-and-the-order-of-replies).
//
// Any number of requests may be in flight; replies arrive in the order they complete, so a long
// poll never holds back the requests behind it. Frames written in one turn of the event loop
// leave in one write (the socket is corked until the next tick). Once closed (by close(), by the
// server, an I/O error, or a frame that cannot be read) every request in flight is answered with
// the close's error, and later calls fail without sending.
//
// The socket keeps the process alive only while a request is in flight: a script that forgets
// Client.close() still ends when its work is done.

import * as fs from "fs";
import * as net from "net";
import * as tls from "tls";

import { Address, formatAddress } from "./address";
import { MAX_REPLY_BYTES, readReply, replyError } from "./codec";
import { SundialError, invalidArgument, unavailable } from "./errors";
import type { Response } from "./generated";

/** How to reach a server, beyond its address. */
export interface TransportOptions {
  /** TLS (the server runs with --tls-cert / --tls-key). */
  tls: boolean;
  /** PEM CA certificates the server's certificate must chain to; absent: Node's bundled CAs. */
  ca?: Buffer;
  /** The name the certificate must show; absent: the address's host. */
  servername?: string;
}

/** The answer to one request: a Response, or the error that ended it and whether it was written. */
export interface Outcome {
  response: Response | null;
  error: SundialError | null;
  /** Written to the socket: a mutation may have been applied. */
  sent: boolean;
  /** The deadline passed (the connection stays open). */
  timedOut: boolean;
}

interface Pending {
  resolve(outcome: Outcome): void;
  timer: NodeJS.Timeout | null;
}

/** Reads a CA file for TransportOptions.ca; INVALID_ARGUMENT (local) naming the file. */
export function readCaFile(path: unknown): Buffer {
  if (typeof path !== "string" || path === "") throw invalidArgument("ca_file: must be a file name");
  try {
    return fs.readFileSync(path);
  } catch (e) {
    throw invalidArgument(`ca_file: cannot read ${path}: ${(e as Error).message}`);
  }
}

/** TLS errors that no retry fixes: the certificate is refused. */
const CERTIFICATE_ERRORS = new Set([
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "CERT_SIGNATURE_FAILURE",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
]);

/** A connect that failed; `fatal` when retrying cannot help (a refused certificate). */
export class ConnectError extends Error {
  constructor(
    message: string,
    readonly fatal: boolean,
  ) {
    super(message);
  }
}

/** Opens a plain or TLS socket to `address` within `timeoutMs`. */
export function openSocket(address: Address, options: TransportOptions, timeoutMs: number): Promise<net.Socket> {
  const text = formatAddress(address);
  return new Promise((resolve, reject) => {
    let socket: net.Socket;
    const ready = options.tls ? "secureConnect" : "connect";
    if (options.tls) {
      const servername = options.servername ?? (net.isIP(address.host) ? undefined : address.host);
      socket = tls.connect({
        host: address.host,
        port: address.port,
        ca: options.ca,
        servername,
        minVersion: "TLSv1.2",
        // For an IP address Node checks the certificate's IP subjectAltName against the host.
        checkServerIdentity: (host, cert) => tls.checkServerIdentity(options.servername ?? host, cert),
      });
    } else {
      socket = net.connect({ host: address.host, port: address.port });
    }
    const timer = setTimeout(() => {
      cleanup();
      socket.destroy();
      reject(new ConnectError(`${text}: cannot connect: no answer within ${timeoutMs} ms`, false));
    }, Math.max(timeoutMs, 1));
    const onReady = () => {
      cleanup();
      resolve(socket);
    };
    const onError = (e: NodeJS.ErrnoException) => {
      cleanup();
      socket.destroy();
      const code = e.code ?? "";
      if (CERTIFICATE_ERRORS.has(code)) {
        reject(new ConnectError(`${text}: TLS: the server's certificate is refused: ${e.message} (${code})`, true));
      } else if (options.tls && code.startsWith("ERR_SSL")) {
        reject(new ConnectError(`${text}: TLS handshake failed: ${e.message}`, false));
      } else {
        reject(new ConnectError(`${text}: cannot connect: ${e.message}`, false));
      }
    };
    const onClose = () => {
      cleanup();
      reject(new ConnectError(`${text}: cannot connect: the server closed the connection`, false));
    };
    function cleanup() {
      clearTimeout(timer);
      socket.off(ready, onReady);
      socket.off("error", onError);
      socket.off("close", onClose);
    }
    socket.once(ready, onReady);
    socket.once("error", onError);
    socket.once("close", onClose);
  });
}

export class Connection {
  readonly address: string;
  private readonly socket: net.Socket;
  private readonly pending = new Map<number, Pending>();
  private closedWith: SundialError | null = null;
  private chunks: Buffer[] = [];
  private buffered = 0;
  private needed = 4; // bytes buffered before the next frame can be read
  private corked = false;
  private readonly uncork = () => {
    this.corked = false;
    this.socket.uncork();
  };

  constructor(socket: net.Socket, address: string) {
    this.socket = socket;
    this.address = address;
    socket.setNoDelay(true);
    socket.unref();
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.close(unavailable(`${address}: the server closed the connection`)));
    socket.on("error", (e) => this.close(unavailable(`${address}: connection lost: ${e.message}`)));
    socket.on("close", () => this.close(unavailable(`${address}: the connection closed`)));
  }

  get closed(): boolean {
    return this.closedWith !== null;
  }

  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * Writes `frame` (request `requestId`) and resolves with its reply, or with an error when the
   * connection closes or `timeoutMs` passes (then a late reply is dropped). Never rejects.
   */
  call(requestId: number, frame: Uint8Array, timeoutMs: number, name: string): Promise<Outcome> {
    return new Promise((resolve) => {
      if (this.closedWith !== null) {
        resolve({ response: null, error: this.closedWith, sent: false, timedOut: false });
        return;
      }
      const entry: Pending = { resolve, timer: null };
      entry.timer = setTimeout(() => {
        if (this.pending.delete(requestId)) this.released();
        resolve({
          response: null,
          error: unavailable(`${name}: no reply from ${this.address} within ${timeoutMs / 1000} s`),
          sent: true,
          timedOut: true,
        });
      }, Math.max(timeoutMs, 1));
      if (this.pending.size === 0) this.socket.ref();
      this.pending.set(requestId, entry);
      if (!this.corked) {
        this.corked = true;
        this.socket.cork();
        process.nextTick(this.uncork);
      }
      this.socket.write(frame);
    });
  }

  close(error: SundialError = unavailable(`${this.address}: connection closed by the client`)): void {
    if (this.closedWith !== null) return;
    this.closedWith = error;
    const pending = [...this.pending.values()];
    this.pending.clear();
    this.socket.destroy();
    for (const p of pending) {
      if (p.timer !== null) clearTimeout(p.timer);
      p.resolve({ response: null, error, sent: true, timedOut: false });
    }
  }

  private released(): void {
    if (this.pending.size === 0) this.socket.unref();
  }

  private onData(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    if (this.buffered < this.needed) return;
    const data = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.buffered);
    let offset = 0;
    this.needed = 4;
    while (data.length - offset >= 4) {
      const length = data.readUInt32LE(offset);
      if (length === 0 || length > MAX_REPLY_BYTES) {
        this.close(new SundialError("INTERNAL", `${this.address}: reply frame of ${length} bytes`, "connection"));
        return;
      }
      if (data.length - offset - 4 < length) {
        this.needed = length + 4;
        break;
      }
      const frame = data.subarray(offset + 4, offset + 4 + length);
      offset += 4 + length;
      if (!this.onFrame(frame)) return;
    }
    const rest = offset === data.length ? null : data.subarray(offset);
    this.chunks = rest === null ? [] : [rest];
    this.buffered = rest === null ? 0 : rest.length;
  }

  /** One reply frame; false when it closed the connection. */
  private onFrame(frame: Buffer): boolean {
    let response: Response | null;
    let requestId: number;
    try {
      response = readReply(frame);
      if (response === null) return true; // an event: TCP carries none, and nobody asked for one
      requestId = Number(response.requestId());
    } catch (e) {
      this.close(new SundialError("INTERNAL", `${this.address}: unreadable reply frame (${(e as Error).message})`, "connection"));
      return false;
    }
    if (requestId === 0) {
      // The server's answer to a frame it could not use; it closes the connection after it.
      this.close(replyError(response) ?? new SundialError("INTERNAL", "reply with request_id 0", "connection"));
      return false;
    }
    const entry = this.pending.get(requestId);
    if (entry !== undefined) {
      this.pending.delete(requestId);
      if (entry.timer !== null) clearTimeout(entry.timer);
      this.released();
      entry.resolve({ response, error: null, sent: true, timedOut: false });
    }
    return true;
  }
}
