// Watch: the `subscribe` operation, which the server offers on WebSocket only (`/ws` on its HTTP
// port; docs/protocol.md#subscriptions), as an async iterable of events.
//
// It connects, upgrades (with `Authorization: Bearer TOKEN` when the client has a token), sends
// one binary Subscribe request, and from the server's SubscribeResult on yields every
// MessageEvent and StatsTick in the order the server sent them. The server answers in binary
// because this client never sends a text frame, so events are read with the same generated code
// as TCP replies.
//
// It ends (the iterator finishes) after close() or a `break` out of `for await`; it throws a
// SundialError when the server refuses the upgrade (401/403: UNAUTHENTICATED) or the Subscribe,
// when the server ends the subscription (SubscriptionClosed: UNAVAILABLE, origin "server", with
// its reason: the subscriber fell behind), and when the connection is lost (UNAVAILABLE,
// origin "connection"). It does not reconnect by itself: what happened meanwhile is not
// replayed, so the caller decides (get the state again, then watch again). A client that follows
// a cluster subscribes on the primary's HTTP port; after a failover the watch ends with
// UNAVAILABLE and a new watch() subscribes on the new primary.
//
// Events wait in a buffer until read; with more than HIGH_WATER unread the socket is paused, so
// a slow reader slows the server's sending to it and, past its limit, gets SubscriptionClosed.

import type { Address } from "./address";
import { Call, encode, readServerFrame, replyError } from "./codec";
import type { TransportOptions } from "./connection";
import { SundialError, unavailable } from "./errors";
import type { WatchEvent } from "./records";
import { WebSocketConnection, openWebSocket } from "./websocket";

const SUBSCRIBE_REQUEST_ID = 1;
const HIGH_WATER = 1000;
const LOW_WATER = 100;

export class Watch implements AsyncIterableIterator<WatchEvent> {
  /** Resolves once the server has accepted the subscription: events of changes after it follow. */
  readonly subscribed: Promise<void>;
  private ws: WebSocketConnection | null = null;
  private readonly events: WatchEvent[] = [];
  private waiter: { resolve(r: IteratorResult<WatchEvent>): void; reject(e: unknown): void } | null = null;
  private failure: SundialError | null = null;
  private finished = false; // closed by the caller
  private paused = false;
  private acknowledge!: () => void;
  private refuse!: (error: SundialError) => void;

  /** Made by Client.watch(). */
  constructor(address: Address | Promise<Address>, transport: TransportOptions, token: string | undefined, subscribe: Call<void>, timeoutMs: number) {
    this.subscribed = new Promise<void>((resolve, reject) => {
      this.acknowledge = resolve;
      this.refuse = reject;
    });
    this.subscribed.catch(() => undefined); // the iterator reports it too: never unhandled
    const headers: Record<string, string> = token === undefined ? {} : { Authorization: `Bearer ${token}` };
    const answerTimer = setTimeout(
      () => this.fail(unavailable(`watch: no answer to subscribe within ${timeoutMs} ms`)),
      timeoutMs,
    );
    this.subscribed.then(() => clearTimeout(answerTimer), () => clearTimeout(answerTimer));
    // Following a cluster, the address comes from the primary's Cluster answer.
    Promise.resolve(address)
      .then((at) =>
        openWebSocket(at, transport, "/ws", headers, timeoutMs, {
          onMessage: (data) => this.onMessage(data),
          onClose: (error) => this.fail(error ?? unavailable("watch: closed")),
        }),
      )
      .then(
      (ws) => {
        if (this.finished || this.failure !== null) {
          ws.close();
          return;
        }
        this.ws = ws;
        // One WebSocket message is one protocol message: no length prefix.
        ws.send(encode(subscribe, SUBSCRIBE_REQUEST_ID, "durable").subarray(4));
      },
      (error: SundialError) => this.fail(error),
    );
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<WatchEvent>> {
    const event = this.events.shift();
    if (event !== undefined) {
      if (this.paused && this.events.length < LOW_WATER) {
        this.paused = false;
        this.ws?.resume();
      }
      return Promise.resolve({ value: event, done: false });
    }
    if (this.finished) return Promise.resolve({ value: undefined, done: true });
    if (this.failure !== null) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** `break` out of `for await`: ends the subscription. */
  async return(): Promise<IteratorResult<WatchEvent>> {
    await this.close();
    return { value: undefined, done: true };
  }

  /** Ends the subscription and closes the connection; the iterator finishes. */
  async close(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    this.events.length = 0;
    this.refuse(unavailable("watch: closed before the subscription was answered"));
    this.ws?.close();
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.resolve({ value: undefined, done: true });
  }

  private onMessage(data: Buffer): void {
    let frame;
    try {
      frame = readServerFrame(data);
    } catch (e) {
      this.fail(new SundialError("INTERNAL", `watch: unreadable frame from the server (${(e as Error).message})`, "connection"));
      return;
    }
    if (frame === null) return;
    if (frame.kind === "response") {
      const id = Number(frame.response.requestId());
      if (id !== SUBSCRIBE_REQUEST_ID && id !== 0) return;
      const error = replyError(frame.response);
      if (error !== null) this.fail(error);
      else this.acknowledge();
      return;
    }
    if (frame.kind === "closed") {
      this.fail(new SundialError("UNAVAILABLE", frame.reason || "subscription closed by the server", "server"));
      return;
    }
    this.push(frame.event);
  }

  private push(event: WatchEvent): void {
    if (this.finished) return;
    const waiter = this.waiter;
    if (waiter !== null) {
      this.waiter = null;
      waiter.resolve({ value: event, done: false });
      return;
    }
    this.events.push(event);
    if (!this.paused && this.events.length > HIGH_WATER) {
      this.paused = true;
      this.ws?.pause();
    }
  }

  private fail(error: SundialError): void {
    if (this.finished || this.failure !== null) return;
    this.failure = error;
    this.refuse(error);
    this.ws?.close();
    const waiter = this.waiter;
    this.waiter = null;
    // Events already received are still read first; then the error.
    if (waiter !== null) waiter.reject(error);
  }
}
