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
// origin "connection"). A watch of a client given one address does not reconnect: what happened
// meanwhile is not replayed, so the caller decides (get the state again, then watch again).
//
// Following a cluster (a client given several addresses, without http_addr), a watch is given
// `locate`: the client's way to the primary's HTTP address (a Cluster request). It subscribes
// there; when the subscription ends with UNAVAILABLE or NOT_PRIMARY it delivers the events it
// already read, then locates the primary again and subscribes again, with the client's backoff,
// until retry_budget_ms have passed without a subscription standing (then it throws the last
// error). Once subscribed again it yields a Resubscribed marker: the changes between the last
// event before it and its `time` were missed. A primary that goes silent (paused, cut off: it
// sends nothing, not even its ticks each second, and closes nothing) is checked after timeout_ms
// of silence: if another node now leads, the watch moves there. The Python client's rules.
//
// Events wait in a buffer until read; with more than HIGH_WATER unread the socket is paused, so
// a slow reader slows the server's sending to it and, past its limit, gets SubscriptionClosed.

import { Address, formatAddress } from "./address";
import { Call, encode, readServerFrame, replyError } from "./codec";
import type { TransportOptions } from "./connection";
import { SundialError, unavailable } from "./errors";
import * as follow from "./follow";
import type { WatchEvent } from "./records";
import { WebSocketConnection, openWebSocket } from "./websocket";

const SUBSCRIBE_REQUEST_ID = 1;
const HIGH_WATER = 1000;
const LOW_WATER = 100;

/** Following a cluster: where the primary's HTTP port is, and which node at which epoch leads. */
export interface Located {
  address: Address;
  node: string;
  epoch: number;
}

export interface Following {
  locate(timeoutMs: number): Promise<Located>;
  retryBudgetMs: number;
}

/** One connection's subscription: settled once answered; `end` ends it (at most once). */
interface Session {
  ws: WebSocketConnection | null;
  acknowledge(): void;
  end(error: SundialError): void;
}

function now(): number {
  return performance.now();
}

/** Whether a following watch subscribes again after `error` (the connection or subscription ended, no node leads). */
function follows(error: SundialError): boolean {
  return error.code === "UNAVAILABLE" || error.code === "NOT_PRIMARY";
}

function asSundialError(e: unknown): SundialError {
  return e instanceof SundialError ? e : unavailable(`watch: ${(e as Error)?.message ?? String(e)}`);
}

export class Watch implements AsyncIterableIterator<WatchEvent> {
  /** Resolves once the server has accepted the subscription: events of changes after it follow. */
  readonly subscribed: Promise<void>;
  /** Following a cluster: how many times it subscribed again (the Resubscribed markers). */
  resubscriptions = 0;
  private session: Session | null = null;
  private readonly events: WatchEvent[] = [];
  private waiter: { resolve(r: IteratorResult<WatchEvent>): void; reject(e: unknown): void } | null = null;
  private failure: SundialError | null = null;
  private finished = false; // closed by the caller
  private paused = false;
  private acknowledge!: () => void;
  private refuse!: (error: SundialError) => void;
  private readonly headers: Record<string, string>;
  private heard = now(); // when the server last sent something
  private subscribedTo: Located | null = null; // following: the primary subscribed to
  private silenceTimer: NodeJS.Timeout | null = null;
  private backoffTimer: (() => void) | null = null;
  private at: string | null = null;

  /** Made by Client.watch(). */
  constructor(
    address: Address | null,
    private readonly transport: TransportOptions,
    token: string | undefined,
    private readonly subscribe: Call<void>,
    private readonly timeoutMs: number,
    private readonly following: Following | null = null,
  ) {
    this.subscribed = new Promise<void>((resolve, reject) => {
      this.acknowledge = resolve;
      this.refuse = reject;
    });
    this.subscribed.catch(() => undefined); // the iterator reports it too: never unhandled
    this.headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
    if (following !== null) {
      void this.follow(null);
    } else {
      this.open(address!).then(
        () => this.acknowledge(),
        (error: SundialError) => this.fail(error),
      );
    }
  }

  /** The HTTP address subscribed to (following a cluster: the primary's); null before the first try. */
  get address(): string | null {
    return this.at;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<WatchEvent>> {
    const event = this.events.shift();
    if (event !== undefined) {
      if (this.paused && this.events.length < LOW_WATER) {
        this.paused = false;
        this.session?.ws?.resume();
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
    this.stopTimers();
    this.session?.ws?.close();
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.resolve({ value: undefined, done: true });
  }

  /**
   * Connects to `at` and subscribes; resolves once the server accepted the Subscribe, rejects
   * when it could not (then the connection is closed). An end after that goes to lost().
   */
  private open(at: Address): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let answered = false;
      let ended = false;
      const timer = setTimeout(
        () => session.end(unavailable(`watch: ${formatAddress(at)}: no answer to subscribe within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      const session: Session = {
        ws: null,
        acknowledge: () => {
          if (answered || ended) return;
          answered = true;
          clearTimeout(timer);
          this.heard = now();
          resolve();
        },
        end: (error) => {
          if (ended) return;
          ended = true;
          clearTimeout(timer);
          session.ws?.close();
          if (!answered) reject(error);
          else if (this.session === session) this.lost(error);
        },
      };
      this.session = session;
      this.at = formatAddress(at);
      openWebSocket(at, this.transport, "/ws", this.headers, this.timeoutMs, {
        onMessage: (data) => this.onMessage(session, data),
        onClose: (error) => session.end(error ?? unavailable("watch: closed")),
      }).then(
        (ws) => {
          if (this.finished || ended) {
            ws.close();
            return;
          }
          session.ws = ws;
          // One WebSocket message is one protocol message: no length prefix.
          ws.send(encode(this.subscribe, SUBSCRIBE_REQUEST_ID, "durable").subarray(4));
        },
        (error: SundialError) => session.end(error),
      );
    });
  }

  /** A subscription that stood has ended with `error`. */
  private lost(error: SundialError): void {
    if (this.finished) return;
    if (this.following !== null && follows(error) && this.failure === null) {
      this.stopTimers();
      void this.follow(error);
    } else {
      this.fail(error);
    }
  }

  /**
   * Following: locates the primary and subscribes there, again after failures (backoff) until
   * the retry budget is spent. `ended`: the error that ended the last subscription (null for the
   * first, which has no gap to mark).
   */
  private async follow(ended: SundialError | null): Promise<void> {
    const { locate, retryBudgetMs } = this.following!;
    const start = now();
    const backoff = new follow.Backoff();
    for (let tries = 1; ; tries++) {
      if (this.finished) return;
      let located: Located;
      try {
        located = await locate(this.timeoutMs);
        if (this.finished) return;
        await this.open(located.address);
      } catch (e) {
        const error = asSundialError(e);
        const elapsed = now() - start;
        if (!follows(error) || elapsed >= retryBudgetMs) {
          this.fail(follows(error) ? follow.gaveUp(error, tries, elapsed) : error);
          return;
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(wake, backoff.next(start + retryBudgetMs - now()));
          const self = this;
          function wake() {
            clearTimeout(timer);
            self.backoffTimer = null;
            resolve();
          }
          this.backoffTimer = wake;
        });
        continue;
      }
      if (this.finished) {
        this.session?.ws?.close();
        return;
      }
      this.subscribedTo = located;
      this.armSilenceCheck();
      if (ended === null) {
        this.acknowledge();
      } else {
        this.resubscriptions++;
        this.push({
          type: "resubscribed",
          address: formatAddress(located.address),
          node: located.node,
          epoch: located.epoch,
          time: Date.now(),
          error: ended,
        });
      }
      return;
    }
  }

  /** Following: after timeout_ms of silence, is the node subscribed to still the primary? */
  private armSilenceCheck(): void {
    if (this.silenceTimer !== null) clearTimeout(this.silenceTimer);
    const due = this.heard + this.timeoutMs - now();
    this.silenceTimer = setTimeout(() => void this.checkSilence(), Math.max(due, 1));
    this.silenceTimer.unref();
  }

  private async checkSilence(): Promise<void> {
    this.silenceTimer = null;
    const session = this.session;
    const at = this.subscribedTo;
    if (this.finished || this.failure !== null || session === null || at === null) return;
    if (now() - this.heard < this.timeoutMs) {
      this.armSilenceCheck();
      return;
    }
    let located: Located | null = null;
    try {
      located = await this.following!.locate(this.timeoutMs);
    } catch {
      located = null; // no answer either: look again after another silence
    }
    if (this.finished || this.session !== session) return;
    this.heard = now();
    if (located !== null && (located.node !== at.node || located.epoch !== at.epoch)) {
      session.end(
        new SundialError(
          "NOT_PRIMARY",
          `watch: ${at.node} (epoch ${at.epoch}) is no longer the primary; ${located.node} is (epoch ${located.epoch})`,
          "connection",
        ),
      );
      return;
    }
    this.armSilenceCheck();
  }

  private stopTimers(): void {
    if (this.silenceTimer !== null) clearTimeout(this.silenceTimer);
    this.silenceTimer = null;
    this.backoffTimer?.();
  }

  private onMessage(session: Session, data: Buffer): void {
    this.heard = now();
    let frame;
    try {
      frame = readServerFrame(data);
    } catch (e) {
      session.end(new SundialError("INTERNAL", `watch: unreadable frame from the server (${(e as Error).message})`, "connection"));
      return;
    }
    if (frame === null) return;
    if (frame.kind === "response") {
      const id = Number(frame.response.requestId());
      if (id !== SUBSCRIBE_REQUEST_ID && id !== 0) return;
      const error = replyError(frame.response);
      if (error !== null) session.end(error);
      else session.acknowledge();
      return;
    }
    if (frame.kind === "closed") {
      session.end(new SundialError("UNAVAILABLE", frame.reason || "subscription closed by the server", "server"));
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
      this.session?.ws?.pause();
    }
  }

  private fail(error: SundialError): void {
    if (this.finished || this.failure !== null) return;
    this.failure = error;
    this.refuse(error);
    this.stopTimers();
    this.session?.ws?.close();
    const waiter = this.waiter;
    this.waiter = null;
    // Events already received are still read first; then the error.
    if (waiter !== null) waiter.reject(error);
  }
}
