/**
 * Small, pure helpers for hosts and the JSON files tools read, shared by the server (its
 * `init`, its demo static server), the client (which refuses plaintext to other machines)
 * and the CLI. Only `URL` is used, which browsers and Node both have.
 */

/**
 * Whether `host` names this machine's loopback interface: `localhost`, an IPv4 address in
 * 127.0.0.0/8, or `::1` (bracketed or not, in any spelling, including IPv4-mapped
 * `::ffff:127.x.y.z`). Traffic to these never leaves the machine, so plaintext there is
 * no exposure; anything else (names included, since DNS may point them anywhere) is
 * treated as remote. `URL` normalizes the spellings (`127.1`, `0x7f.0.0.1`,
 * `[0:0:0:0:0:0:0:1]`, upper case) first.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  // Only characters of a host name or address: anything else ('@', '/', '#', …) would make
  // URL read a different host than the one written.
  if (!/^[A-Za-z0-9.:-]+$/.test(bare)) return false;
  let hostname: string;
  try {
    hostname = new URL(`http://${bare.includes(':') ? `[${bare}]` : bare}/`).hostname;
  } catch {
    return false;
  }
  return (
    hostname === 'localhost' ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname) ||
    hostname === '[::1]' ||
    // ::ffff:127.0.0.0/104, which URL writes as ::ffff:7fxx:xxxx.
    /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/.test(hostname)
  );
}

/**
 * Where a `JSON.parse` error happened, as "line L, column C", without any of the text:
 * engines quote the text around the error in some messages (V8: `Unexpected token '}',
 * "…" is not valid JSON`), and when the file holds a secret key that quote may be part of
 * it. Reads V8's `at position N` (and its end-of-input error) and Firefox's `at line L
 * column C`; `undefined` when the message names no position (then say only that the file
 * is not valid JSON).
 */
export function jsonErrorPosition(text: string, error: unknown): string | undefined {
  const message = error instanceof Error ? error.message : '';
  const lineColumn = /\bline (\d+) column (\d+)\b/.exec(message);
  if (lineColumn) return `line ${lineColumn[1]}, column ${lineColumn[2]}`;
  const position = / at position (\d+)\b/.exec(message);
  // V8 names no position when the text ends early (a file cut short): the error is at its end.
  const offset = position ? Math.min(Number(position[1]), text.length) : /end of JSON input/.test(message) ? text.length : undefined;
  if (offset === undefined) return undefined;
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  const column = offset - (before.lastIndexOf('\n') + 1) + 1;
  return `line ${line}, column ${column}`;
}
