/** The one thing the client needs from a WebSocket, whichever the platform provides. */
export interface Socket {
  send(frame: Uint8Array): void;
  /** Bytes queued but not yet on the wire: the client's backpressure signal. */
  readonly bufferedAmount: number;
  close(): void;
}

export interface SocketHandlers {
  onOpen(): void;
  onMessage(frame: Uint8Array): void;
  /** A short reason: `refused`, `unreachable`, an error message. */
  onError(reason: string): void;
  onClose(reason: string): void;
}

export type OpenSocket = (url: string, handlers: SocketHandlers, maxFrameBytes: number) => Socket;
