// Server addresses: "host:port", "host", ":port", "[v6]:port" or "[v6]", as the CLI and the
// other clients take them (docs/clients/typescript.md#client).

import { invalidArgument } from "./errors";

export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_PORT = 7400;
export const DEFAULT_HTTP_PORT = 7401;

export interface Address {
  host: string;
  port: number;
}

/** One address, or INVALID_ARGUMENT (local) naming what is wrong. */
export function parseAddress(text: unknown, defaultPort: number = DEFAULT_PORT): Address {
  if (typeof text === "object" && text !== null && "host" in text && "port" in text) {
    const { host, port } = text as { host: unknown; port: unknown };
    if (typeof host !== "string") throw invalidArgument("address: host must be a string");
    return { host: host || DEFAULT_HOST, port: checkPort(String(port), JSON.stringify(text)) };
  }
  if (typeof text !== "string") {
    throw invalidArgument(`address: must be "host:port", not ${describe(text)}`);
  }
  let host: string;
  let port: string;
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    if (end < 0) throw invalidArgument(`address "${text}": unclosed '['`);
    host = text.slice(1, end);
    const rest = text.slice(end + 1);
    if (rest && !rest.startsWith(":")) {
      throw invalidArgument(`address "${text}": expected ':port' after ']'`);
    }
    port = rest.slice(1);
  } else if (text.split(":").length > 2) {
    throw invalidArgument(`address "${text}": an IPv6 address needs brackets: [${text}]:port`);
  } else {
    const colon = text.indexOf(":");
    host = colon < 0 ? text : text.slice(0, colon);
    port = colon < 0 ? "" : text.slice(colon + 1);
  }
  return { host: host || DEFAULT_HOST, port: port ? checkPort(port, text) : defaultPort };
}

/**
 * A list of addresses: one (a string or {host, port}), a list, or a comma-separated string as
 * the CLI's `--addr a:7400,b:7400`. The list is kept in order; following the primary of a
 * replicated cluster (the `cluster` request) will pick among them once the server has
 * replication (docs/clients/typescript.md#client).
 */
export function parseAddresses(value: unknown, defaultPort: number = DEFAULT_PORT): Address[] {
  let list: unknown[];
  if (Array.isArray(value)) {
    list = value;
  } else if (typeof value === "string" && value.includes(",")) {
    list = value.split(",").map((part) => part.trim());
  } else {
    list = [value === undefined ? `${DEFAULT_HOST}:${defaultPort}` : value];
  }
  if (list.length === 0) throw invalidArgument("address: the list is empty");
  return list.map((item) => parseAddress(item, defaultPort));
}

export function formatAddress(address: Address): string {
  return address.host.includes(":")
    ? `[${address.host}]:${address.port}`
    : `${address.host}:${address.port}`;
}

function checkPort(port: string, text: string): number {
  if (!/^[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    throw invalidArgument(`address "${text}": port "${port}" is not a number in 1..65535`);
  }
  return Number(port);
}

export function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}
