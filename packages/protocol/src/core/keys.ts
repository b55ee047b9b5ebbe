/**
 * Key names: their order and the ranges a LIST names. Servers return keys in this order,
 * storage backends scan in it (LevelDB's byte order of UTF-8), and listings check every
 * answer against it, so all of them share this one definition.
 */
/** Orders key names by code point, which is also the order of their UTF-8 bytes (LevelDB's). */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // Surrogates (0xd800–0xdfff) stand for code points above 0xffff: they sort after
    // every other UTF-16 unit, though they are numerically below 0xe000–0xffff.
    const sx = x >= 0xd800 && x <= 0xdfff;
    const sy = y >= 0xd800 && y <= 0xdfff;
    if (sx !== sy) return sx ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/** Whether `key` belongs to the range a LIST asks for. */
export function inListRange(key: string, prefix: string, after: string): boolean {
  return key.startsWith(prefix) && compareKeys(key, after) > 0;
}
