/** The one thing the client needs from a WebSocket, whichever the platform provides. */
export interface Socket {
  send(frame: Uint8Array): void;
  /** Bytes queued but not yet on the wire: the client's backpressure signal. */
  readonly bufferedAmount: number;
  /** Closes gracefully (a closing handshake). */
  close(): void;
  /**
   * Drops the connection without a handshake, for one presumed dead: no further event is
   * needed from it (the caller has stopped listening).
   */
  abort(): void;
}

export interface SocketHandlers {
  onOpen(): void;
  onMessage(frame: Uint8Array): void;
  /** A short reason: `refused`, `unreachable`, an error message. */
  onError(reason: string): void;
  onClose(reason: string): void;
  /**
   * A message over `maxFrameBytes` arrived: it was discarded, nothing more is delivered
   * from this socket, and it is closing. `bytes` is the message's size and `head` a copy
   * of its first {@link OVERSIZED_HEAD_BYTES} bytes (its frame header) where the platform
   * shows them: a browser has received the whole message when it hands it over, while
   * Node's `ws` stops reading at the length the frame announces.
   */
  onOversized(bytes: number | undefined, head: Uint8Array | undefined): void;
}

/** How much of an oversized message a transport keeps: room for any frame header (type, key up to 1024 bytes, opId). */
export const OVERSIZED_HEAD_BYTES = 2048;

export type OpenSocket = (url: string, handlers: SocketHandlers, maxFrameBytes: number) => Socket;
