// SundialError: every failure the client reports, typed by the protocol's code names
// (docs/protocol.md#errors).

/** The protocol's `Code` enum names, by value (protocol/sundial.fbs). */
export const CODES = [
  "OK",
  "INVALID_ARGUMENT",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "FAILED_PRECONDITION",
  "RESOURCE_EXHAUSTED",
  "UNAVAILABLE",
  "UNAUTHENTICATED",
  "INTERNAL",
  "NOT_PRIMARY",
] as const;

/** A failure's code: what the caller should do follows from it (docs/clients/typescript.md). */
export type ErrorCode = Exclude<(typeof CODES)[number], "OK">;

/**
 * Where an error came from:
 * - `"server"`: the server refused the request (or one item of a batch);
 * - `"connection"`: the connection failed, the deadline passed, or a reply could not be read. A
 *   mutation that fails this way may or may not have been applied;
 * - `"local"`: the client refused the arguments before sending anything.
 */
export type ErrorOrigin = "server" | "connection" | "local";

/**
 * An error from the server, or one the client detected itself. `code` is the protocol's code
 * name (`"NOT_FOUND"`, `"FAILED_PRECONDITION"`, ...), `message` the text, which names the
 * offending field or limit; `String(error)` is `"SundialError: CODE: message"`.
 */
export class SundialError extends Error {
  readonly code: ErrorCode;
  readonly origin: ErrorOrigin;
  /** NOT_PRIMARY: the primary's client address ("host:port") when the node knows it; else null. */
  readonly primary: string | null;

  constructor(code: ErrorCode, message: string, origin: ErrorOrigin = "server", primary: string | null = null) {
    super(message);
    this.name = "SundialError";
    this.code = code;
    this.origin = origin;
    this.primary = primary;
  }

  override toString(): string {
    return `SundialError: ${this.code}: ${this.message}`;
  }
}

/** The name of a protocol Code value; one this client does not know (a newer server): INTERNAL. */
export function codeName(value: number): ErrorCode {
  return value > 0 && value < CODES.length ? (CODES[value] as ErrorCode) : "INTERNAL";
}

export function invalidArgument(message: string): SundialError {
  return new SundialError("INVALID_ARGUMENT", message, "local");
}

export function unavailable(message: string): SundialError {
  return new SundialError("UNAVAILABLE", message, "connection");
}
