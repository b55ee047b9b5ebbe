import { describe, expect, it } from 'vitest';
import { describeValue, identityFromJson, isLoopbackHost, jsonErrorPosition } from '../src/index.js';

describe('isLoopbackHost', () => {
  it('accepts localhost, 127.0.0.0/8 and ::1 in their spellings', () => {
    for (const h of [
      'localhost',
      'LOCALHOST',
      '127.0.0.1',
      '127.1.2.3',
      '127.255.255.254',
      '127.1',
      '0x7f.0.0.1',
      '::1',
      '[::1]',
      '0:0:0:0:0:0:0:1',
      '::ffff:127.0.0.1',
      '[::ffff:7f00:1]',
    ]) {
      expect(isLoopbackHost(h), h).toBe(true);
    }
  });

  it('refuses other addresses, names, and hosts smuggled past a parser', () => {
    for (const h of [
      '10.0.0.1',
      '192.168.1.5',
      '0.0.0.0',
      '128.0.0.1',
      '::',
      '::2',
      '[::ffff:10.0.0.1]',
      'example.com',
      'localhost.example.com',
      '127.0.0.1.nip.io',
      'evil@127.0.0.1',
      '127.0.0.1/x',
      '127.0.0.1#',
      '',
      '1270.0.0.1',
    ]) {
      expect(isLoopbackHost(h), h).toBe(false);
    }
  });
});

describe('jsonErrorPosition', () => {
  const where = (text: string) => {
    try {
      JSON.parse(text);
    } catch (e) {
      return jsonErrorPosition(text, e);
    }
    throw new Error('parsed');
  };

  it('says where a syntax error is, as line and column', () => {
    expect(where('{\n  "a": 1,\n  "b": 2,\n}')).toBe('line 4, column 1');
    // Cut short: the error is at the end.
    expect(where('{\n  "secretKey": "abcd')).toBe('line 2, column 21');
    expect(where('{ "a": 1 "b": 2 }')).toBe('line 1, column 10');
  });

  it('reads Firefox-style messages, and gives up on messages without a position', () => {
    expect(jsonErrorPosition('', new SyntaxError('JSON.parse: expected property name at line 3 column 5 of the JSON data'))).toBe(
      'line 3, column 5',
    );
    expect(jsonErrorPosition('x', new SyntaxError('JSON Parse error: Unexpected identifier "x"'))).toBeUndefined();
    expect(jsonErrorPosition('x', 'not an error')).toBeUndefined();
  });
});

describe('identity files', () => {
  it('describe a bad field without quoting it: a secret may have been pasted there', () => {
    const secret = 'Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg';
    expect(() => identityFromJson({ kind: 'powerstore-identity', version: secret })).toThrow(
      /"version" must be 2.*a string of 43 characters/,
    );
    try {
      identityFromJson({ kind: 'powerstore-identity', version: secret });
    } catch (e) {
      expect((e as Error).message).not.toContain(secret.slice(0, 8));
    }
    expect(describeValue(2)).toBe('2');
    expect(describeValue(12345678901234567000)).toBe('a number');
    expect(describeValue([secret])).toBe('a list');
    expect(describeValue(undefined)).toBe('nothing');
  });
});
