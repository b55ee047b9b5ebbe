/** Browser transport: the platform's `WebSocket`. */
import type { OpenSocket, SocketHandlers } from './socket.js';

export const openSocket: OpenSocket = (url: string, handlers: SocketHandlers) => {
  const ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  ws.onopen = () => handlers.onOpen();
  ws.onmessage = (e: MessageEvent) => {
    if (e.data instanceof ArrayBuffer) handlers.onMessage(new Uint8Array(e.data));
  };
  // Browsers hide the reason of a failed connection; the close event follows.
  ws.onerror = () => handlers.onError('unreachable');
  ws.onclose = (e: CloseEvent) => handlers.onClose(e.reason ? `closed (${e.code} ${e.reason})` : `closed (${e.code})`);
  return {
    send: (frame) => ws.send(frame as Uint8Array<ArrayBuffer>),
    get bufferedAmount() {
      return ws.bufferedAmount;
    },
    close: () => ws.close(1000),
  };
};
