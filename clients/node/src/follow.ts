// The rules by which a Client follows a cluster's primary (docs/clients/typescript.md#clusters),
// without I/O: the same rules as the Python client's (clients/python/sundial/follow.py), so that
// every client of a cluster behaves alike.
//
// - clusterSeeds: whether the client was given a cluster (two or more distinct addresses).
// - PrimarySearch: one look for the primary: the order in which nodes are asked with the Cluster
//   request, which answer is the primary's, and the error when none is.
// - failure: after a call failed, whether it is sent again, where, and whether the connection is
//   still the primary's.
// - Backoff and gaveUp: the waits between tries, and the error after the retry budget.
// - primaryHttp: the primary's HTTP/WebSocket address, from a Cluster answer (watch()).

import { Address, DEFAULT_HTTP_PORT, formatAddress, parseAddress } from "./address";
import type { Call } from "./codec";
import { SundialError, unavailable } from "./errors";
import type { Cluster } from "./records";

export const RECONNECT_INITIAL_MS = 50;
export const RECONNECT_MAX_MS = 2_000;
/** Following a cluster: how long a call may keep retrying. */
export const DEFAULT_RETRY_BUDGET_MS = 20_000;

export interface Target {
  address: Address;
  text: string;
}

/** The distinct targets of `addresses`, in order; null when fewer than two (one server, not followed). */
export function clusterSeeds(addresses: Address[]): Target[] | null {
  const seeds: Target[] = [];
  for (const address of addresses) {
    const text = formatAddress(address);
    if (!seeds.some((seed) => seed.text === text)) seeds.push({ address, text });
  }
  return seeds.length >= 2 ? seeds : null;
}

/**
 * Whether a Cluster answer comes from the primary (a node outside a cluster is its own) at an
 * epoch no older than one seen already.
 */
export function answersAsPrimary(view: Cluster, highestEpoch: number): boolean {
  if (!view.cluster) return true;
  return view.primary !== "" && view.node === view.primary && view.epoch >= highestEpoch;
}

/**
 * One look for the primary. The caller asks the node it is connected to first (unless a node
 * named another: `hint`), then the targets of `order` in turn (it grows while walked), and reports
 * each answer to answered() or each failure to failed(); error() is what to throw when no node
 * answered as the primary.
 */
export class PrimarySearch {
  readonly order: Target[] = [];
  highestEpoch: number;
  private last: SundialError | null = null;
  private said: Cluster | null = null; // what the first node that answered said about the primary

  constructor(
    private readonly seeds: Target[],
    highestEpoch: number,
    hint: string | null = null,
  ) {
    this.highestEpoch = highestEpoch;
    if (hint !== null) this.add(hint);
  }

  add(text: string): void {
    let address: Address;
    try {
      address = parseAddress(text);
    } catch {
      return; // a node that names an address this client cannot parse: ignored
    }
    const formatted = formatAddress(address);
    if (!this.order.some((target) => target.text === formatted)) this.order.push({ address, text: formatted });
  }

  addSeeds(): void {
    for (const seed of this.seeds) this.add(seed.text);
  }

  /** Records `view` (a Cluster answer); whether it is the primary's. */
  answered(view: Cluster): boolean {
    this.highestEpoch = Math.max(this.highestEpoch, view.epoch);
    if (answersAsPrimary(view, this.highestEpoch)) return true;
    if (view.primary_addr) this.add(view.primary_addr);
    if (this.said === null) this.said = view;
    return false;
  }

  failed(error: SundialError): void {
    this.last = error;
  }

  error(): SundialError {
    const said = this.said;
    if (said !== null) {
      const why = said.primary
        ? `${said.node} names ${said.primary} as primary (epoch ${said.epoch}), which does not answer as one`
        : `${said.node} knows no primary (epoch ${said.epoch}): an election is under way`;
      return new SundialError("NOT_PRIMARY", `no node answers as the primary: ${why}`);
    }
    if (this.last !== null && this.last.code === "UNAUTHENTICATED") return this.last;
    const names = this.seeds.map((seed) => seed.text).join(", ");
    return unavailable(`cannot reach any of ${names}` + (this.last ? ` (last: ${this.last.message})` : ""));
  }
}

/**
 * What failure() decided: `again` (send the call again), `hint` (the address a node named as
 * the primary: try there at once, without a backoff), `lost` (the connection is no longer known
 * to be the primary's).
 */
export interface Retry {
  again: boolean;
  hint: string | null;
  lost: boolean;
}

/**
 * The rule after `call` failed with `error` on the connection to `address`. `fromServer`: the
 * server answered with `error` (else the connection failed or the deadline passed); `sent`: the
 * request may have reached the server. A refusal with NOT_PRIMARY applied nothing and is always
 * sent again; after an unknown outcome (a lost connection after the request was written, no reply
 * in time, the server's UNAVAILABLE) only a Call whose `resend` allows it.
 */
export function failure(
  call: Pick<Call<unknown>, "resend">,
  error: SundialError,
  how: { sent: boolean; fromServer: boolean; address: string },
): Retry {
  const code = error.code;
  let unknown: boolean;
  let lost: boolean;
  if (how.fromServer) {
    unknown = code === "UNAVAILABLE";
    lost = code === "NOT_PRIMARY" || code === "UNAVAILABLE";
  } else {
    unknown = how.sent;
    lost = true;
  }
  const again = (code === "NOT_PRIMARY" || code === "UNAVAILABLE") && (call.resend || !unknown);
  const hint =
    how.fromServer && code === "NOT_PRIMARY" && error.primary !== null && error.primary !== how.address ? error.primary : null;
  return { again, hint, lost };
}

/** The wait before the next try: 50 ms doubling to 2 s, each jittered to 50-100 %. */
export class Backoff {
  private delay = RECONNECT_INITIAL_MS;

  /** Milliseconds to wait now (at most `remaining`). */
  next(remaining: number): number {
    const wait = Math.min(this.delay * (0.5 + Math.random() / 2), Math.max(remaining, 0));
    this.delay = Math.min(this.delay * 2, RECONNECT_MAX_MS);
    return wait;
  }
}

/** The error a call rejects with once its retry budget is spent: the last one, saying so. */
export function gaveUp(error: SundialError, tries: number, elapsedMs: number): SundialError {
  return new SundialError(
    error.code,
    `${error.message} (gave up following the primary after ${tries} tries in ${(elapsedMs / 1000).toFixed(1)} s)`,
    error.origin,
    error.primary,
  );
}

/** The HTTP/WebSocket address of the primary a Cluster answer names; null while it names none. */
export function primaryHttp(view: Cluster): Address | null {
  if (!view.primary) return null;
  const member = view.members.find((m) => m.node === view.primary && m.http_addr);
  return member === undefined ? null : parseAddress(member.http_addr, DEFAULT_HTTP_PORT);
}
