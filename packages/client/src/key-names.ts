/**
 * What a key name, and a `list` prefix, must be before anything is sent: well-formed
 * Unicode of at most `MAX_KEY_LENGTH` bytes of UTF-8.
 */
import { MAX_KEY_LENGTH } from '@powerstore/protocol';
import { invalid } from './errors.js';

/** A lone surrogate, which UTF-8 cannot carry: it would reach the servers as U+FFFD, another key. */
const LONE_SURROGATE = /\p{Cs}/u;

/** `INVALID_ARGUMENT` unless `key` is a non-empty string the servers would store under that very name. */
export function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw invalid('key must be a non-empty string');
  checkKeyText(key, 'key');
}

/** What keys and list prefixes share: well-formed Unicode, at most `MAX_KEY_LENGTH` bytes of UTF-8. */
export function checkKeyText(text: string, what: 'key' | 'prefix'): void {
  if (LONE_SURROGATE.test(text)) throw invalid(`${what} must be well-formed Unicode: it holds a lone surrogate (half of a UTF-16 pair)`);
  const bytes = new TextEncoder().encode(text).length;
  if (bytes > MAX_KEY_LENGTH) throw invalid(`${what} is ${bytes} bytes of UTF-8, the maximum is ${MAX_KEY_LENGTH}`);
}
