// The codec without a server: requests as the server will read them (with the same generated
// code), optional fields that must be written even when zero, the one-copy byte vector, frames
// that are not ServerMessages, addresses.
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");
const { test } = require("node:test");

const flatbuffers = require("flatbuffers");
const codec = require("sundial-client/dist/codec");
const P = require("sundial-client/dist/generated");
const { parseAddress } = require("sundial-client/dist/address");
const { SundialError } = require("sundial-client");

/** The Request in a frame, read back with the generated code (checks the size prefix too). */
function readRequest(frame) {
  const length = Buffer.from(frame.buffer, frame.byteOffset, 4).readUInt32LE(0);
  assert.equal(length, frame.length - 4);
  const bb = new flatbuffers.ByteBuffer(frame.subarray(4));
  assert.ok(P.Request.bufferHasIdentifier(bb), "finished with the SUND identifier");
  return P.Request.getRootAsRequest(bb);
}

test("the FlatBuffer after the length prefix is aligned on its own (the server's Verifier checks it)", () => {
  const calls = [codec.stats(), codec.enqueue("q", { payload: "x", priority: 3 }), codec.complete("q", "m", 7), codec.dequeue("q", 2, 500, { a: "b" }, 10)];
  for (const call of calls) {
    const frame = codec.encode(call, 9, "durable");
    assert.equal((frame.length - 4) % 8, 0, `${call.name}: the buffer holds 64-bit fields, so its size is a multiple of 8`);
    assert.equal(readRequest(frame).requestId(), 9n);
  }
});

test("the shared builder leaves nothing behind: each frame is its own, a big one does not stay", () => {
  const first = codec.encode(codec.enqueue("q", { payload: "first" }), 1, "durable");
  const copy = Buffer.from(first);
  const big = codec.encode(codec.enqueue("q", { payload: Buffer.alloc(3 << 20, 7) }), 2, "durable");
  codec.encode(codec.fail("q", "m", 1, "text", 0), 3, "relaxed");
  assert.ok(Buffer.from(first).equals(copy), "a frame is not overwritten by the next request");
  assert.equal(readRequest(big).op(new P.Enqueue()).items(0).payloadLength(), 3 << 20);
  const fail = readRequest(codec.encode(codec.fail("q", "m", 1, "", undefined), 4, "durable")).op(new P.Fail());
  assert.equal(fail.retryDelayMs(), null, "no forced field left over from the request before");
  assert.equal(fail.error(), null);
});

test("a request frame carries its id, durability and operation", () => {
  const frame = codec.encode(codec.enqueue("emails", { payload: "hi", priority: -5, metadata: { to: "ada" } }), 42, "relaxed");
  const request = readRequest(frame);
  assert.equal(request.requestId(), 42n);
  assert.equal(request.durability(), P.Durability.relaxed);
  assert.equal(request.opType(), P.Operation.Enqueue);
  const enqueue = request.op(new P.Enqueue());
  assert.equal(enqueue.queue(), "emails");
  const item = enqueue.items(0);
  assert.equal(Buffer.from(item.payloadArray()).toString(), "hi");
  assert.equal(item.priority(), -5n);
  assert.equal(item.metadata(0).key(), "to");
  assert.equal(item.delayMs(), null);
  // A read never carries a durability.
  assert.equal(readRequest(codec.encode(codec.stats(), 1, "relaxed")).durability(), P.Durability.durable);
});

test("optional fields are written when given as zero or false, and absent when not given", () => {
  // flatc 2.0.8's TypeScript code treats `= null` fields as defaulting to 0 and would drop these.
  const update = readRequest(codec.encode(codec.updateQueue("q", { dequeue_paused: false, enqueue_paused: false, max_depth: 0, lease_ms: 0 }), 1, "durable"))
    .op(new P.UpdateQueue())
    .update();
  assert.equal(update.dequeuePaused(), false);
  assert.equal(update.enqueuePaused(), false);
  assert.equal(update.maxDepth(), 0n);
  assert.equal(update.leaseMs(), 0n);
  assert.equal(update.maxAttempts(), null);
  assert.equal(update.retentionMs(), null);

  const item = readRequest(codec.encode(codec.enqueue("q", { delay_ms: 0, max_attempts: 0 }), 1, "durable")).op(new P.Enqueue()).items(0);
  assert.equal(item.delayMs(), 0n);
  assert.equal(item.maxAttempts(), 0);
  assert.equal(item.visibleAt(), null);

  const fail = readRequest(codec.encode(codec.fail("q", "m", 1, "", 0), 1, "durable")).op(new P.Fail());
  assert.equal(fail.retryDelayMs(), 0n);
  const reprioritize = readRequest(codec.encode(codec.reprioritize("q", "m", 0, undefined), 1, "durable")).op(new P.Reprioritize());
  assert.equal(reprioritize.priority(), 0n);
  assert.equal(reprioritize.visibleAt(), null);
  const dequeue = readRequest(codec.encode(codec.dequeue("q", 3, undefined, undefined, 0), 1, "durable")).op(new P.Dequeue());
  assert.equal(dequeue.leaseMs(), null);
  assert.equal(dequeue.max(), 3);
  const subscribe = readRequest(codec.encode(codec.subscribe("*", { max_events_per_sec: 0 }), 1, "durable")).op(new P.Subscribe());
  assert.equal(subscribe.maxEventsPerSec(), 0);
});

test("64-bit fields take bigints for the whole range and refuse unsafe numbers", () => {
  const item = readRequest(codec.encode(codec.enqueue("q", { priority: -(1n << 63n) }), 1, "durable")).op(new P.Enqueue()).items(0);
  assert.equal(item.priority(), -(1n << 63n));
  assert.throws(() => codec.enqueue("q", { priority: 2 ** 53 }), (e) => e.code === "INVALID_ARGUMENT" && /2\^53/.test(e.message));
  assert.throws(() => codec.enqueue("q", { max_attempts: -1 }), (e) => e.code === "INVALID_ARGUMENT" && /max_attempts/.test(e.message));
  const complete = readRequest(codec.encode(codec.complete("q", "m", (1n << 64n) - 1n), 1, "durable")).op(new P.Complete());
  assert.equal(complete.items(0).leaseToken(), (1n << 64n) - 1n);
});

test("byteVector writes what the generated byte-by-byte vector writes", () => {
  for (const size of [0, 1, 3, 4, 7, 100, 4097, 70000]) {
    const data = crypto.randomBytes(size);
    const build = (write) => {
      const b = new flatbuffers.Builder(16);
      const prefix = b.createString("before");
      const vector = write(b);
      P.EnqueueItem.startEnqueueItem(b);
      P.EnqueueItem.addId(b, prefix);
      P.EnqueueItem.addPayload(b, vector);
      b.finish(P.EnqueueItem.endEnqueueItem(b));
      return Buffer.from(b.asUint8Array());
    };
    const ours = build((b) => codec.byteVector(b, data));
    const theirs = build((b) => P.EnqueueItem.createPayloadVector(b, data));
    assert.ok(ours.equals(theirs), `size ${size}`);
  }
});

test("createString writes what the runtime's createString writes, ASCII or not", () => {
  for (const text of ["", "a", "work-queue", "x".repeat(1000), "é", "naïve ☃ 𝄞", "tab\tand\u007f"]) {
    const build = (write) => {
      const b = new flatbuffers.Builder(8);
      const offset = write(b);
      P.Get.startGet(b);
      P.Get.addId(b, offset);
      b.finish(P.Get.endGet(b));
      return Buffer.from(b.asUint8Array());
    };
    assert.ok(build((b) => codec.createString(b, text)).equals(build((b) => b.createString(text))), JSON.stringify(text));
  }
});

test("enqueueBatch splits at 1000 items per request", () => {
  const batch = codec.enqueueBatch("q", Array.from({ length: 2001 }, () => ({})));
  assert.equal(batch.calls.length, 3);
  const sizes = batch.calls.map((call) => readRequest(codec.encode(call, 1, "durable")).op(new P.Enqueue()).itemsLength());
  assert.deepEqual(sizes, [1000, 1000, 1]);
});

test("a frame that is not a ServerMessage is refused, not read as zeros", () => {
  for (const frame of [Buffer.alloc(8, 0xff), Buffer.alloc(3), Buffer.from([4, 0, 0, 0, 200, 0, 0, 0]), Buffer.from("HTTP/1.1 400 Bad Request\r\n\r\n")]) {
    assert.throws(() => codec.readReply(frame), /not a ServerMessage/);
  }
  // A real one passes: a Response with an error, as the server writes it.
  const b = new flatbuffers.Builder(64);
  const message = b.createString("id: no such message");
  P.Error.startError(b);
  P.Error.addCode(b, P.Code.NOT_FOUND);
  P.Error.addMessage(b, message);
  const error = P.Error.endError(b);
  P.Response.startResponse(b);
  P.Response.addRequestId(b, 7n);
  P.Response.addError(b, error);
  const response = P.Response.endResponse(b);
  b.finish(P.ServerMessage.createServerMessage(b, P.ServerBody.Response, response));
  const reply = codec.readReply(b.asUint8Array());
  assert.equal(reply.requestId(), 7n);
  const e = codec.replyError(reply);
  assert.ok(e instanceof SundialError);
  assert.deepEqual([e.code, e.message, e.origin], ["NOT_FOUND", "id: no such message", "server"]);
});

test("addresses parse like the CLI's", () => {
  for (const [text, host, port] of [
    ["127.0.0.1:7400", "127.0.0.1", 7400],
    ["example.com", "example.com", 7400],
    [":9000", "127.0.0.1", 9000],
    ["", "127.0.0.1", 7400],
    ["[::1]:7", "::1", 7],
    ["[::1]", "::1", 7400],
  ]) {
    assert.deepEqual(parseAddress(text), { host, port }, text);
  }
  for (const text of ["host:0", "host:70000", "host:x", "::1", "[::1", "[::1]x"]) {
    assert.throws(() => parseAddress(text), (e) => e.code === "INVALID_ARGUMENT" && e.origin === "local", text);
  }
});

test("the protocol code is generated at build time, never kept in the repository", () => {
  const generated = require.resolve("sundial-client/dist/generated/sundial/protocol/request");
  assert.ok(fs.existsSync(generated));
  const source = path.join(__dirname, "..", "src");
  assert.ok(!fs.existsSync(path.join(source, "generated")));
  const stage = path.join(path.dirname(generated), "..", "..", "..", "..", "build-ts", "generated", "sundial", "protocol", "request.ts");
  assert.match(fs.readFileSync(stage, "utf8"), /automatically generated by the FlatBuffers compiler/);
});
