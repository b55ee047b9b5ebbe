/**
 * A server as the operation host sees it: somewhere to send frames, and what is known of
 * its health. `ServerConnection` is the real one (a WebSocket that reconnects); the
 * simulator's links put frames on its seeded network. What arrives on a link is handed to
 * the host by whoever owns the link ({@link OperationHost.receive}, `opened`, `oversized`).
 */

/** How a server looks from this client. */
export type ServerState = 'connecting' | 'open' | 'closed';

/** A snapshot for status displays and error messages. */
export interface ServerStatus {
  /** 1-based id, as in the cluster file. */
  readonly id: number;
  readonly url: string;
  readonly state: ServerState;
  /** Why the connection last failed or closed, if it did. */
  readonly lastError: string | undefined;
  /**
   * Why this server was last caught misbehaving, if it was: fragments that do not match
   * their checksum, candidates that are not valid, frames that do not decode or are over
   * the size limit when no correct server's would be, replies of the wrong type, or
   * refusals (ERROR replies) of requests that `n − t` other servers accepted, with the
   * code and message it gave.
   */
  readonly misbehaving: string | undefined;
  /** Bytes queued to it and not yet sent. */
  readonly bufferedBytes: number;
  /** Round-trip time of its last answer, in milliseconds. */
  readonly lastRoundTripMs: number | undefined;
}

/** One server's connection, as the operation host uses it. */
export interface Link {
  readonly state: ServerState;
  /** Bytes queued to this server and not yet sent. */
  readonly bufferedBytes: number;
  /**
   * Sends a frame if the server is connected and not too far behind (`highWaterBytes`
   * already queued); returns whether it was sent. A frame not sent is resent by the host
   * when the link opens again.
   */
  send(frame: Uint8Array, highWaterBytes: number): boolean;
  /**
   * Connection attempts the server refused outright (nothing listening at its address) so
   * far; absent where that cannot be told (browsers say only that a connection failed).
   */
  readonly refusals?: number;
  /** Evidence against the server, for status displays. */
  markMisbehaving(reason: string): void;
  noteRoundTrip(ms: number): void;
  status(): ServerStatus;
  close(): void;
}
