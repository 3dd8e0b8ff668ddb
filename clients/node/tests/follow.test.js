// The rules of following a cluster's primary without a cluster (follow.ts): which answer is the
// primary's, the order in which nodes are asked, what is sent again after which failure, the
// backoff, and the ids the client gives to enqueues. The same cases as the Python client's
// tests/test_follow.py, so the two clients decide alike.
"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");

const codec = require("sundial-client/dist/codec");
const follow = require("sundial-client/dist/follow");
const { parseAddresses } = require("sundial-client/dist/address");
const { Client, SundialError } = require("sundial-client");

function view(fields) {
  return { cluster: "c", node: "n1", epoch: 1, primary: "", primary_addr: "", sync_standby: "", replication: "sync", members: [], ...fields };
}

test("two or more distinct addresses are a cluster; one, or repeats of one, are not", () => {
  assert.equal(follow.clusterSeeds(parseAddresses("a:1")), null);
  assert.equal(follow.clusterSeeds(parseAddresses("a:1,a:1")), null);
  assert.deepEqual(follow.clusterSeeds(parseAddresses(["a:1", "b:2", "a:1"])).map((s) => s.text), ["a:1", "b:2"]);
  assert.equal(new Client("a:1").followsPrimary, false);
  assert.equal(new Client("a:1,b:2").followsPrimary, true);
  assert.throws(() => new Client("a:1,b:2", { retry_budget_ms: -1 }), (e) => e instanceof SundialError && e.code === "INVALID_ARGUMENT");
});

test("the primary is the node that says so, at an epoch no older than one seen; outside a cluster any node", () => {
  assert.equal(follow.answersAsPrimary(view({ cluster: "" }), 9), true);
  assert.equal(follow.answersAsPrimary(view({ node: "n1", primary: "n1", epoch: 3 }), 3), true);
  assert.equal(follow.answersAsPrimary(view({ node: "n1", primary: "n1", epoch: 2 }), 3), false); // deposed, not told yet
  assert.equal(follow.answersAsPrimary(view({ node: "n2", primary: "n1", epoch: 3 }), 3), false);
  assert.equal(follow.answersAsPrimary(view({ node: "n1", primary: "" }), 0), false); // an election
});

test("a search asks the hint first, then the seeds, then the primaries nodes name; the error says why", () => {
  const seeds = follow.clusterSeeds(parseAddresses(["h1:1", "h2:2"]));
  const search = new follow.PrimarySearch(seeds, 0, "h3:3");
  search.addSeeds();
  assert.deepEqual(search.order.map((t) => t.text), ["h3:3", "h1:1", "h2:2"]);
  assert.equal(search.answered(view({ node: "n2", primary: "n9", primary_addr: "h9:9", epoch: 4 })), false);
  search.add("h1:1"); // known already: not twice
  search.add("not an address:x"); // what a node names that cannot be parsed is ignored
  assert.deepEqual(search.order.map((t) => t.text), ["h3:3", "h1:1", "h2:2", "h9:9"]);
  assert.equal(search.highestEpoch, 4);
  const error = search.error();
  assert.equal(error.code, "NOT_PRIMARY");
  assert.match(error.message, /n2 names n9 as primary \(epoch 4\)/);
  // Nobody answered: UNAVAILABLE naming the seeds and the last failure; a refused token is itself.
  const none = new follow.PrimarySearch(seeds, 0);
  none.failed(new SundialError("UNAVAILABLE", "h2:2: cannot connect: refused", "connection"));
  assert.equal(none.error().code, "UNAVAILABLE");
  assert.match(none.error().message, /cannot reach any of h1:1, h2:2 \(last: h2:2: cannot connect: refused\)/);
  const unauthenticated = new SundialError("UNAUTHENTICATED", "bad token");
  none.failed(unauthenticated);
  assert.equal(none.error(), unauthenticated);
  const election = new follow.PrimarySearch(seeds, 0);
  election.answered(view({ node: "n1", primary: "", epoch: 2 }));
  assert.match(election.error().message, /n1 knows no primary \(epoch 2\): an election is under way/);
});

test("after a failure: NOT_PRIMARY is always sent again, at the named primary; an unknown outcome only when resend allows", () => {
  const resend = { resend: true };
  const once = { resend: false };
  const notPrimary = new SundialError("NOT_PRIMARY", "standby", "server", "h1:1");
  assert.deepEqual(follow.failure(once, notPrimary, { sent: true, fromServer: true, address: "h2:2" }), { again: true, hint: "h1:1", lost: true });
  // Named itself (or nobody): no hint, a look with backoff.
  assert.equal(follow.failure(once, notPrimary, { sent: true, fromServer: true, address: "h1:1" }).hint, null);
  const serverUnavailable = new SundialError("UNAVAILABLE", "wal failed", "server");
  assert.deepEqual(follow.failure(resend, serverUnavailable, { sent: true, fromServer: true, address: "a" }), { again: true, hint: null, lost: true });
  assert.equal(follow.failure(once, serverUnavailable, { sent: true, fromServer: true, address: "a" }).again, false);
  const lost = new SundialError("UNAVAILABLE", "connection lost", "connection");
  assert.equal(follow.failure(once, lost, { sent: false, fromServer: false, address: "a" }).again, true); // never written
  assert.equal(follow.failure(once, lost, { sent: true, fromServer: false, address: "a" }).again, false);
  assert.equal(follow.failure(resend, lost, { sent: true, fromServer: false, address: "a" }).again, true);
  // Any other refusal is the caller's: not sent again, the connection still the primary's.
  const stale = new SundialError("FAILED_PRECONDITION", "stale token", "server");
  assert.deepEqual(follow.failure(resend, stale, { sent: true, fromServer: true, address: "a" }), { again: false, hint: null, lost: false });
});

test("which calls are sent again after an unknown outcome", () => {
  assert.equal(codec.enqueue("q", { id: "a" }).resend, true);
  assert.equal(codec.enqueue("q", {}).resend, false); // the server could not tell a repeat
  assert.equal(codec.enqueueBatch("q", [{ id: "a" }, {}]).calls[0].resend, false);
  assert.equal(codec.complete("q", "a", 1, undefined).resend, true);
  assert.equal(codec.dequeue("q", 1, undefined, undefined, 0).resend, true);
  assert.equal(codec.deleteQueue("q").resend, false);
  assert.equal(codec.redrive("q", { all: true }).resend, false);
  assert.equal(codec.switchover(undefined).resend, false);
  assert.equal(codec.cluster().anyNode, true);
  assert.equal(codec.get("q", "a").anyNode, false);
});

test("the backoff doubles from 50 ms to 2 s, jittered to 50-100 %, never past what remains", () => {
  const b = new follow.Backoff();
  const waits = Array.from({ length: 8 }, () => b.next(60_000));
  const caps = [50, 100, 200, 400, 800, 1600, 2000, 2000];
  waits.forEach((w, i) => assert.ok(w >= caps[i] / 2 && w <= caps[i], `${w} for ${caps[i]}`));
  for (let i = 0; i < 100; i++) assert.ok(new follow.Backoff().next(10) <= 10);
  assert.equal(new follow.Backoff().next(0), 0);
  assert.equal(new follow.Backoff().next(-5), 0);
});

test("gaveUp keeps the code and the primary, and says how long it followed", () => {
  const e = follow.gaveUp(new SundialError("NOT_PRIMARY", "no node answers", "server", "h:1"), 7, 20_400);
  assert.equal(e.code, "NOT_PRIMARY");
  assert.equal(e.primary, "h:1");
  assert.equal(e.message, "no node answers (gave up following the primary after 7 tries in 20.4 s)");
});

test("the primary's HTTP address comes from its member's http_addr", () => {
  const members = [
    { node: "n1", http_addr: "10.0.0.1:7401" },
    { node: "n2", http_addr: "10.0.0.2:8401" },
  ];
  assert.deepEqual(follow.primaryHttp(view({ primary: "n2", members })), { host: "10.0.0.2", port: 8401 });
  assert.equal(follow.primaryHttp(view({ primary: "", members })), null);
  assert.equal(follow.primaryHttp(view({ primary: "n3", members })), null);
});

test("client ids are ULIDs: 26 characters of Crockford base32, time-ordered, distinct", () => {
  const ids = Array.from({ length: 1000 }, () => codec.newMessageId());
  for (const id of ids) assert.match(id, /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/);
  assert.equal(new Set(ids).size, ids.length);
  const decodeTime = (id) => [...id.slice(0, 10)].reduce((t, ch) => t * 32 + "0123456789ABCDEFGHJKMNPQRSTVWXYZ".indexOf(ch), 0);
  assert.ok(Math.abs(decodeTime(ids[0]) - Date.now()) < 60_000, "the first 48 bits are the time in ms");
});
