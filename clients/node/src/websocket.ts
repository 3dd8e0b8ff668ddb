// A minimal WebSocket client (RFC 6455) for watch(): the upgrade over http or https, masked
// frames out, unmasked frames in, fragmented messages joined, pings answered, close handshake.
// Node 20 has no WebSocket client of its own (it arrives in Node 22), and this is all the
// subscription needs (docs/protocol.md#websocket): binary messages only, one at a time.

import * as crypto from "crypto";
import * as http from "http";
import * as https from "https";
import * as net from "net";

import { Address, formatAddress } from "./address";
import type { TransportOptions } from "./connection";
import { SundialError, unavailable } from "./errors";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** Largest message accepted, as the C++ client's Watch (--max-frame-bytes' default). */
export const MAX_MESSAGE_BYTES = 16 << 20;

const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

export interface WebSocketHandlers {
  /** One whole message (binary or text). */
  onMessage(data: Buffer, binary: boolean): void;
  /** The connection ended; `error` says why (null after close() from this side). */
  onClose(error: SundialError | null): void;
}

/** Upgrades GET `path` on `address` to a WebSocket within `timeoutMs`. */
export function openWebSocket(
  address: Address,
  transport: TransportOptions,
  path: string,
  headers: Record<string, string>,
  timeoutMs: number,
  handlers: WebSocketHandlers,
): Promise<WebSocketConnection> {
  const text = formatAddress(address);
  const key = crypto.randomBytes(16).toString("base64");
  const options: https.RequestOptions = {
    host: address.host,
    port: address.port,
    path,
    method: "GET",
    headers: {
      ...headers,
      Connection: "Upgrade",
      Upgrade: "websocket",
      "Sec-WebSocket-Key": key,
      "Sec-WebSocket-Version": "13",
      "User-Agent": "sundial-client (node)",
    },
    agent: false,
  };
  if (transport.tls) {
    options.ca = transport.ca;
    options.servername = transport.servername ?? (net.isIP(address.host) ? undefined : address.host);
    options.minVersion = "TLSv1.2";
  }
  return new Promise((resolve, reject) => {
    const request = (transport.tls ? https : http).request(options);
    let settled = false;
    const timer = setTimeout(() => {
      fail(unavailable(`websocket ${text}: no upgrade within ${timeoutMs} ms`));
      request.destroy();
    }, Math.max(timeoutMs, 1));
    function fail(error: SundialError) {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(error);
    }
    request.on("error", (e: NodeJS.ErrnoException) => {
      const tlsProblem = transport.tls && e.code !== undefined && !e.code.startsWith("E");
      fail(unavailable(`websocket ${text}: ${tlsProblem ? "TLS: " : "cannot connect: "}${e.message}`));
    });
    request.on("response", (response) => {
      // Not upgraded: 401/403 are the server's refusal of the token or the origin.
      const status = response.statusCode ?? 0;
      response.resume();
      const code = status === 401 || status === 403 ? "UNAUTHENTICATED" : "UNAVAILABLE";
      fail(new SundialError(code, `websocket upgrade refused: HTTP ${status} ${response.statusMessage ?? ""}`.trim(), "server"));
    });
    request.on("upgrade", (response, socket, head) => {
      const expected = crypto.createHash("sha1").update(key + GUID).digest("base64");
      if (response.headers["sec-websocket-accept"] !== expected) {
        socket.destroy();
        fail(new SundialError("INTERNAL", `websocket ${text}: the upgrade's Sec-WebSocket-Accept is wrong`, "connection"));
        return;
      }
      if (settled) {
        socket.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      resolve(new WebSocketConnection(socket, text, head, handlers));
    });
    request.end();
  });
}

/** An open WebSocket. Handlers run on the event loop; send() may be called at any time. */
export class WebSocketConnection {
  private readonly socket: net.Socket;
  private readonly address: string;
  private readonly handlers: WebSocketHandlers;
  private buffer: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentBytes = 0;
  private fragmentBinary = true;
  private ended = false;

  constructor(socket: net.Socket, address: string, head: Buffer, handlers: WebSocketHandlers) {
    this.socket = socket;
    this.address = address;
    this.handlers = handlers;
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 30_000);
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (e) => this.end(unavailable(`websocket ${address}: connection lost: ${e.message}`)));
    socket.on("close", () => this.end(unavailable(`websocket ${address}: the connection closed`)));
    if (head.length > 0) this.onData(head);
  }

  get closed(): boolean {
    return this.ended;
  }

  /** Stops reading (the server's own limits then apply: docs/protocol.md#subscriptions). */
  pause(): void {
    this.socket.pause();
  }

  resume(): void {
    this.socket.resume();
  }

  send(data: Uint8Array, binary = true): void {
    if (!this.ended) this.socket.write(frame(binary ? OP_BINARY : OP_TEXT, data));
  }

  /** Sends a close frame and ends the connection; onClose(null) follows. */
  close(): void {
    if (this.ended) return;
    const status = Buffer.alloc(2);
    status.writeUInt16BE(1000);
    this.socket.write(frame(OP_CLOSE, status));
    this.end(null);
  }

  private end(error: SundialError | null): void {
    if (this.ended) return;
    this.ended = true;
    this.socket.end();
    this.socket.destroy();
    this.handlers.onClose(error);
  }

  private onData(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    while (!this.ended) {
      const b = this.buffer;
      if (b.length < 2) return;
      const fin = (b[0]! & 0x80) !== 0;
      const opcode = b[0]! & 0x0f;
      if ((b[1]! & 0x80) !== 0) return this.protocolError("a frame from the server is masked");
      let length = b[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (b.length < 4) return;
        length = b.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (b.length < 10) return;
        const big = b.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE_BYTES)) return this.protocolError(`a frame of ${big} bytes`);
        length = Number(big);
        offset = 10;
      }
      if (length > MAX_MESSAGE_BYTES) return this.protocolError(`a frame of ${length} bytes`);
      if (b.length < offset + length) return;
      const payload = b.subarray(offset, offset + length);
      this.buffer = b.subarray(offset + length);
      this.onFrame(fin, opcode, payload);
    }
  }

  private onFrame(fin: boolean, opcode: number, payload: Buffer): void {
    switch (opcode) {
      case OP_PING:
        this.socket.write(frame(OP_PONG, payload));
        return;
      case OP_PONG:
        return;
      case OP_CLOSE: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        const reason = payload.subarray(2).toString("utf8");
        this.socket.write(frame(OP_CLOSE, payload.subarray(0, 2)));
        this.end(unavailable(`websocket ${this.address}: closed by the server (${code}${reason ? ` ${reason}` : ""})`));
        return;
      }
      case OP_TEXT:
      case OP_BINARY:
      case OP_CONTINUATION: {
        if (opcode !== OP_CONTINUATION) {
          if (this.fragments.length > 0) return this.protocolError("a new message inside a fragmented one");
          this.fragmentBinary = opcode === OP_BINARY;
        } else if (this.fragments.length === 0) {
          return this.protocolError("a continuation frame without a message");
        }
        if (fin && this.fragments.length === 0) {
          this.handlers.onMessage(payload, this.fragmentBinary);
          return;
        }
        this.fragments.push(payload);
        this.fragmentBytes += payload.length;
        if (this.fragmentBytes > MAX_MESSAGE_BYTES) return this.protocolError(`a message above ${MAX_MESSAGE_BYTES} bytes`);
        if (fin) {
          const message = Buffer.concat(this.fragments, this.fragmentBytes);
          this.fragments = [];
          this.fragmentBytes = 0;
          this.handlers.onMessage(message, this.fragmentBinary);
        }
        return;
      }
      default:
        this.protocolError(`unknown opcode ${opcode}`);
    }
  }

  private protocolError(what: string): void {
    this.end(new SundialError("INTERNAL", `websocket ${this.address}: ${what}`, "connection"));
  }
}

/** One masked frame (clients must mask every frame they send). */
function frame(opcode: number, payload: Uint8Array): Buffer {
  const length = payload.length;
  const headerLength = length < 126 ? 2 : length < 65536 ? 4 : 10;
  const out = Buffer.alloc(headerLength + 4 + length);
  out[0] = 0x80 | opcode;
  if (length < 126) {
    out[1] = 0x80 | length;
  } else if (length < 65536) {
    out[1] = 0x80 | 126;
    out.writeUInt16BE(length, 2);
  } else {
    out[1] = 0x80 | 127;
    out.writeBigUInt64BE(BigInt(length), 2);
  }
  const mask = crypto.randomBytes(4);
  mask.copy(out, headerLength);
  const start = headerLength + 4;
  for (let i = 0; i < length; i++) out[start + i] = payload[i]! ^ mask[i & 3]!;
  return out;
}
