/** Node transport: the `ws` library, receiving Buffers without a copy, and no message over `maxFrameBytes`. */
import WebSocket from 'ws';
import type { OpenSocket, SocketHandlers } from './socket.js';

export const openSocket: OpenSocket = (url: string, handlers: SocketHandlers, maxFrameBytes: number) => {
  const ws = new WebSocket(url, { maxPayload: maxFrameBytes, perMessageDeflate: false });
  ws.binaryType = 'nodebuffer';
  ws.on('open', () => handlers.onOpen());
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) handlers.onMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  });
  ws.on('error', (err: Error & { code?: string }) => {
    // ws refuses a message over maxPayload as soon as its frame announces the length, before
    // reading any of it, and closes the connection with 1009.
    if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') handlers.onOversized(undefined, undefined);
    else handlers.onError(err.code === 'ECONNREFUSED' ? 'refused' : err.message);
  });
  ws.on('close', (code: number, reason: Buffer) => handlers.onClose(describeClose(code, reason.toString())));
  return {
    send: (frame) => ws.send(frame, { binary: true }),
    get bufferedAmount() {
      return ws.bufferedAmount;
    },
    close: () => ws.close(1000),
    abort: () => ws.terminate(),
  };
};

function describeClose(code: number, reason: string): string {
  return reason ? `closed (${code} ${reason})` : `closed (${code})`;
}
