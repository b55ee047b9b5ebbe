/**
 * Browser transport: the platform's `WebSocket`. Browsers put no limit on a message's
 * size, so the cap Node's `ws` enforces as `maxPayload` is enforced here on delivery: a
 * message over `maxFrameBytes` is dropped unread (only its header is kept, to say whose
 * answer it was), reported, and the socket closed. One server cannot make the page decode
 * or hold on to more than any honest answer carries.
 */
import { OVERSIZED_HEAD_BYTES, type OpenSocket, type SocketHandlers } from './socket.js';

/**
 * Close code for "message too big". Scripts may send only 1000 and 3000–4999, so this is
 * 1009 (what `ws` sends in Node) moved into the application range.
 */
const CLOSE_TOO_BIG = 4009;

export const openSocket: OpenSocket = (url: string, handlers: SocketHandlers, maxFrameBytes: number) => {
  const ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  /** Set by an oversized message: what the socket delivers after it is not read either. */
  let refused = false;
  ws.onopen = () => handlers.onOpen();
  ws.onmessage = (e: MessageEvent) => {
    if (refused || !(e.data instanceof ArrayBuffer)) return;
    const size = e.data.byteLength;
    if (size > maxFrameBytes) {
      refused = true;
      // A copy, so the large buffer is garbage as soon as this handler returns.
      handlers.onOversized(size, new Uint8Array(e.data, 0, Math.min(size, OVERSIZED_HEAD_BYTES)).slice());
      ws.close(CLOSE_TOO_BIG, 'message too big');
      return;
    }
    handlers.onMessage(new Uint8Array(e.data));
  };
  // Browsers hide the reason of a failed connection; the close event follows.
  ws.onerror = () => handlers.onError('unreachable');
  ws.onclose = (e: CloseEvent) => handlers.onClose(e.reason ? `closed (${e.code} ${e.reason})` : `closed (${e.code})`);
  return {
    send: (frame) => ws.send(frame),
    get bufferedAmount() {
      return ws.bufferedAmount;
    },
    close: () => ws.close(1000),
    // Scripts cannot drop a connection outright; the close event is not waited for.
    abort: () => ws.close(1000),
  };
};
