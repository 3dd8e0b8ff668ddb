// The WebSocket client under watch(), against a fake server that speaks RFC 6455 by hand: pings
// answered, fragmented and long messages joined, masked frames out, the close handshake, and
// a refused upgrade.
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const http = require("node:http");
const { test } = require("node:test");

const { openWebSocket } = require("sundial-client/dist/websocket");
const { rejectsWith, waitFor } = require("./helpers");

/** An unmasked server frame. */
function frame(opcode, payload, fin = true) {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([(fin ? 0x80 : 0) | opcode, n]) : n < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
  if (n >= 126) {
    head[0] = (fin ? 0x80 : 0) | opcode;
    if (n < 65536) {
      head[1] = 126;
      head.writeUInt16BE(n, 2);
    } else {
      head[1] = 127;
      head.writeBigUInt64BE(BigInt(n), 2);
    }
  }
  return Buffer.concat([head, payload]);
}

/** Reads the client's frames (masked) from a socket: [{opcode, payload}]. */
function clientFrames(socket) {
  const frames = [];
  let buffered = Buffer.alloc(0);
  socket.on("data", (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 2) {
      assert.ok(buffered[1] & 0x80, "every client frame is masked");
      let n = buffered[1] & 0x7f;
      let offset = 2;
      if (n === 126) {
        n = buffered.readUInt16BE(2);
        offset = 4;
      } else if (n === 127) {
        n = Number(buffered.readBigUInt64BE(2));
        offset = 10;
      }
      if (buffered.length < offset + 4 + n) return;
      const mask = buffered.subarray(offset, offset + 4);
      const payload = Buffer.from(buffered.subarray(offset + 4, offset + 4 + n)).map((b, i) => b ^ mask[i & 3]);
      frames.push({ opcode: buffered[0] & 0x0f, payload: Buffer.from(payload) });
      buffered = buffered.subarray(offset + 4 + n);
    }
  });
  return frames;
}

/** A server that upgrades /ws and hands the socket to `talk`; or answers `status` instead. */
function fakeServer(talk, status = 101) {
  const server = http.createServer((req, res) => res.writeHead(404).end());
  server.on("upgrade", (req, socket) => {
    if (status !== 101) {
      socket.end(`HTTP/1.1 ${status} Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      return;
    }
    const accept = crypto.createHash("sha1").update(`${req.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    talk(socket, req);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function open(server, handlers, headers = {}) {
  return openWebSocket({ host: "127.0.0.1", port: server.address().port }, { tls: false }, "/ws", headers, 5000, handlers);
}

test("pings are answered, fragmented and long messages joined, client frames masked, the close handshake kept", async () => {
  const big = crypto.randomBytes(70000);
  let serverSide;
  const server = await fakeServer((socket, req) => {
    serverSide = { socket, frames: clientFrames(socket), auth: req.headers.authorization };
    socket.write(frame(0x9, Buffer.from("ping!")));
    socket.write(Buffer.concat([frame(0x2, Buffer.from("one "), false), frame(0x0, Buffer.from("two "), false)]));
    socket.write(frame(0x9, Buffer.from("between"))); // a control frame inside a fragmented message
    socket.write(frame(0x0, Buffer.from("three"), true));
    socket.write(frame(0x2, big));
  });
  const messages = [];
  let closed = null;
  const ws = await open(server, { onMessage: (data, binary) => messages.push([Buffer.from(data), binary]), onClose: (e) => (closed = e) }, {
    Authorization: "Bearer t0ken",
  });
  await waitFor(() => messages.length === 2, { message: "two messages" });
  assert.equal(serverSide.auth, "Bearer t0ken");
  assert.equal(messages[0][0].toString(), "one two three");
  assert.equal(messages[0][1], true);
  assert.ok(messages[1][0].equals(big));
  await waitFor(() => serverSide.frames.length === 2, { message: "two pongs" });
  assert.deepEqual(serverSide.frames.map((f) => [f.opcode, f.payload.toString()]), [[0xa, "ping!"], [0xa, "between"]]);
  ws.send(Buffer.from("hello"));
  await waitFor(() => serverSide.frames.length === 3, { message: "the client's message" });
  assert.deepEqual([serverSide.frames[2].opcode, serverSide.frames[2].payload.toString()], [0x2, "hello"]);
  // The server closes with 1001 (going away): the client answers and reports it.
  const status = Buffer.alloc(2);
  status.writeUInt16BE(1001);
  serverSide.socket.write(frame(0x8, status));
  await waitFor(() => closed !== null, { message: "the close seen" });
  assert.equal(closed.code, "UNAVAILABLE");
  assert.match(closed.message, /1001/);
  await waitFor(() => serverSide.frames.length === 4, { message: "the client's close frame" });
  assert.equal(serverSide.frames[3].opcode, 0x8);
  server.close();
});

test("a masked frame from the server is a protocol error; a refused upgrade is UNAUTHENTICATED", async () => {
  const server = await fakeServer((socket) => socket.write(Buffer.from([0x82, 0x81, 1, 2, 3, 4, 5])));
  let closed = null;
  await open(server, { onMessage: () => undefined, onClose: (e) => (closed = e) });
  await waitFor(() => closed !== null, { message: "the error" });
  assert.deepEqual([closed.code, closed.origin], ["INTERNAL", "connection"]);
  assert.match(closed.message, /masked/);
  server.close();
  const refusing = await fakeServer(() => undefined, 401);
  await rejectsWith(open(refusing, { onMessage: () => undefined, onClose: () => undefined }), { code: "UNAUTHENTICATED", origin: "server", message: /401/ });
  refusing.close();
});
