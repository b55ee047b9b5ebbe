import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decodePointer,
  encodePointer,
  HEADER_BYTES,
  POINTER_BYTES,
  recordBytes,
  ValueLog,
  ValueLogDamage,
  type SegmentRecord,
  type ValueLogOptions,
  type ValueLogPointer,
} from '../src/value-log.js';

const root = fs.mkdtempSync(join(tmpdir(), 'powerstore-value-log-'));
const logs: ValueLog[] = [];
afterAll(async () => {
  for (const log of logs) await log.close().catch(() => undefined);
  fs.rmSync(root, { recursive: true, force: true });
});
let dirs = 0;

async function open(options: Partial<ValueLogOptions> = {}): Promise<{ log: ValueLog; dir: string }> {
  const dir = options.dir ?? join(root, `log-${dirs++}`);
  const log = await ValueLog.open({ ...options, dir });
  logs.push(log);
  return { log, dir };
}
const segmentPath = (dir: string, segment: number) => join(dir, `${String(segment).padStart(8, '0')}.vlog`);
/** `length` bytes, different for every `seed`. */
const bytes = (length: number, seed: number) => Uint8Array.from({ length }, (_, i) => (i * 131 + seed * 17 + (i >> 9)) & 0xff);
const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);
async function walk(log: ValueLog, segment: number): Promise<SegmentRecord[]> {
  const out: SegmentRecord[] = [];
  for await (const r of log.records(segment)) out.push(r);
  return out;
}
const walked = (p: ValueLogPointer, name: string) => ({ offset: p.offset, name, nameLength: p.nameLength, dataLength: p.dataLength });
async function damaged(read: Promise<unknown>, message: RegExp): Promise<void> {
  const err = await read.catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ValueLogDamage);
  expect((err as Error).message).toMatch(message);
}

describe('value log pointers', () => {
  const p: ValueLogPointer = { segment: 4_000_000_000, offset: 2 ** 40 + 3, nameLength: 70, dataLength: 5_000_000, crc: 0xdeadbeef };

  it('encode and decode round-trip, also from a view inside a larger buffer; recordBytes counts header, name and data', () => {
    const b = encodePointer(p);
    expect(b.length).toBe(POINTER_BYTES);
    expect(decodePointer(b)).toEqual(p);
    const larger = new Uint8Array(POINTER_BYTES + 11);
    larger.set(b, 5);
    expect(decodePointer(larger.subarray(5, 5 + POINTER_BYTES))).toEqual(p);
  });

  it('decodePointer refuses a wrong length or an offset that is not a safe non-negative integer', () => {
    const b = encodePointer(p);
    expect(decodePointer(b.subarray(0, POINTER_BYTES - 1))).toBeUndefined();
    expect(decodePointer(new Uint8Array(POINTER_BYTES + 1))).toBeUndefined();
    expect(decodePointer(new Uint8Array(0))).toBeUndefined();
    for (const offset of [-1, 0.5, NaN, 2 ** 60]) {
      const bad = encodePointer(p);
      new DataView(bad.buffer).setFloat64(4, offset);
      expect(decodePointer(bad)).toBeUndefined();
    }
    expect(HEADER_BYTES).toBe(16);
    expect(recordBytes({ nameLength: 3, dataLength: 1000 })).toBe(HEADER_BYTES + 1003);
  });
});

describe('value log append and read', () => {
  it('appends of one event-loop turn form one group of consecutive records that read back byte for byte', async () => {
    const { log, dir } = await open();
    expect(log.active).toBeUndefined();
    const big = bytes(3 * 1024 * 1024 + 7, 3);
    const parent = bytes(1000, 9);
    const entries: [string, Uint8Array][] = [
      ['empty', new Uint8Array(0)],
      ['one', Uint8Array.of(0xa5)],
      ['ключ/é', bytes(1000, 2)],
      ['big', big],
      ['', bytes(10, 4)],
      ['view', parent.subarray(100, 300)],
    ];
    const pointers = await Promise.all(entries.map(([name, data]) => log.append(name, data)));
    let at = 0;
    for (const [i, p] of pointers.entries()) {
      const [name, data] = entries[i]!;
      expect(p).toMatchObject({ segment: log.active, offset: at, nameLength: Buffer.byteLength(name), dataLength: data.length });
      at += recordBytes(p);
    }
    expect(await log.size(log.active!)).toBe(at);
    expect(fs.readFileSync(segmentPath(dir, log.active!)).length).toBe(at);
    for (const [i, p] of pointers.entries()) {
      const [name, data] = entries[i]!;
      expect(same(await log.read(p, name), data)).toBe(true);
    }
  });

  it('a group is not split across segments; separate turns roll at segmentBytes', async () => {
    const { log } = await open({ segmentBytes: 4096 });
    const group = await Promise.all(Array.from({ length: 10 }, (_, i) => log.append(`g${i}`, bytes(1000, i))));
    expect(new Set(group.map((p) => p.segment)).size).toBe(1);
    expect(await log.size(group[0]!.segment)).toBeGreaterThan(4096);
    const next = await log.append('next', bytes(10, 1));
    expect(next.segment).toBe(group[0]!.segment + 1);
    expect(next.offset).toBe(0);
  });
});

describe('value log damage', () => {
  async function one(name = 'victim', data = bytes(500, 1)) {
    const { log, dir } = await open();
    const p = await log.append(name, data);
    return { log, file: segmentPath(dir, p.segment), p, name, data };
  }
  function flip(file: string, position: number, mask: number): void {
    const b = fs.readFileSync(file);
    expect(position).toBeLessThan(b.length);
    b[position] = b[position]! ^ mask;
    fs.writeFileSync(file, b);
  }

  it('a flipped data byte fails the CRC when asked to verify (and is returned as stored otherwise); a changed CRC in the header fails always', async () => {
    const a = await one();
    expect(same(await a.log.read(a.p, a.name, { verify: true }), a.data)).toBe(true);
    flip(a.file, a.p.offset + HEADER_BYTES + a.p.nameLength + 123, 0x01);
    await damaged(a.log.read(a.p, a.name, { verify: true }), /CRC/);
    // Unverified, as LevelDB's reads: the hash against the cross-checksum finds it.
    const unverified = await a.log.read(a.p, a.name);
    expect(unverified[123]).toBe(a.data[123]! ^ 0x01);
    const b = await one();
    flip(b.file, b.p.offset + 12, 0x80);
    await damaged(b.log.read(b.p, b.name), /CRC/);
  });

  it('a record under another name is refused', async () => {
    const { log, p } = await one('victim');
    await damaged(log.read(p, 'victin'), /another record/);
    await damaged(log.read(p, 'other'), /another record/);
  });

  it('a segment truncated inside the record, or deleted, is refused', async () => {
    const a = await one();
    fs.truncateSync(a.file, a.p.offset + HEADER_BYTES + a.p.nameLength + 10);
    await damaged(a.log.read(a.p, a.name), /ends inside/);
    const b = await one();
    fs.unlinkSync(b.file);
    await damaged(b.log.read(b.p, b.name), /gone/);
  });

  it('a pointer into the middle of a record finds no header', async () => {
    const { log } = await open();
    const [big, small] = await Promise.all([log.append('big', bytes(4000, 1)), log.append('small', bytes(100, 2))]);
    const inside = { ...small, offset: big.offset + HEADER_BYTES + 40 };
    expect(inside.offset + recordBytes(inside)).toBeLessThan(small.offset);
    await damaged(log.read(inside, 'small'), /no record header/);
    expect(same(await log.read(small, 'small'), bytes(100, 2))).toBe(true);
  });
});

describe('value log segments', () => {
  it('roll at segmentBytes; a reopened log starts past every segment and old pointers still read', async () => {
    const { log, dir } = await open({ segmentBytes: 4096 });
    const pointers: ValueLogPointer[] = [];
    for (let i = 0; i < 10; i++) pointers.push(await log.append(`r${i}`, bytes(1000, i)));
    const perSegment = Math.floor(4096 / recordBytes(pointers[0]!));
    expect(pointers.map((p) => p.segment)).toEqual(pointers.map((_, i) => 1 + Math.floor(i / perSegment)));
    const used = [...new Set(pointers.map((p) => p.segment))];
    expect(used.length).toBeGreaterThan(2);
    expect(await log.segments()).toEqual(used);
    for (const s of used) expect(await log.size(s)).toBeLessThanOrEqual(4096);
    await log.close();

    const again = (await open({ dir, segmentBytes: 4096 })).log;
    expect(again.active).toBeUndefined();
    expect(await again.segments()).toEqual(used);
    const after = await again.append('after', bytes(10, 1));
    expect(after).toMatchObject({ segment: used.at(-1)! + 1, offset: 0 });
    for (const [i, p] of pointers.entries()) expect(same(await again.read(p, `r${i}`), bytes(1000, i))).toBe(true);
    await again.close();

    // A reopen without appends adds no segment, and the next still goes past all of them.
    await (await open({ dir })).log.close();
    const third = (await open({ dir })).log;
    expect((await third.append('third', bytes(1, 1))).segment).toBe(after.segment + 1);
    expect(await third.segments()).toEqual([...used, after.segment, after.segment + 1]);
  });
});

describe('value log records', () => {
  async function written() {
    const { log, dir } = await open();
    const names = ['first', 'ключ', 'empty-data', '', 'last'];
    const pointers = await Promise.all(names.map((n, i) => log.append(n, bytes(n === 'empty-data' ? 0 : 300 + i, i))));
    return {
      log,
      file: segmentPath(dir, pointers[0]!.segment),
      segment: pointers[0]!.segment,
      expected: pointers.map((p, i) => walked(p, names[i]!)),
    };
  }

  it('walks every record', async () => {
    const { log, segment, expected } = await written();
    expect(await walk(log, segment)).toEqual(expected);
  });

  it('stops cleanly at a torn tail', async () => {
    const record = (file: string) => fs.readFileSync(file).subarray(0, HEADER_BYTES + 3); // "first": header and part of its name
    const tails: ((file: string) => Uint8Array)[] = [
      () => Uint8Array.of(0x50, 0x53, 0x56), // part of a header
      (file) => record(file).subarray(0, HEADER_BYTES - 1),
      (file) => record(file), // a whole header, but the name is cut
      () => bytes(64, 5), // garbage
    ];
    for (const tail of tails) {
      const { log, file, segment, expected } = await written();
      fs.appendFileSync(file, tail(file));
      expect(await walk(log, segment)).toEqual(expected);
    }
  });
});

describe('value log erase', () => {
  it('zeroes the CRCs, names and data of records, keeps the rest of their headers, and leaves the others readable', async () => {
    const { log, dir } = await open();
    const secret = Buffer.from('SECRET-PAYLOAD-7Q'.repeat(100));
    const huge = new Uint8Array(2.5 * 1024 * 1024 + 3).fill(0xee);
    const entries: [string, Uint8Array][] = [
      ['keep-1', bytes(200, 1)],
      ['victim-name-QX7', secret],
      ['keep-2', bytes(200, 2)],
      ['huge-victim', huge],
      ['keep-3', bytes(200, 3)],
    ];
    const pointers = await Promise.all(entries.map(([n, d]) => log.append(n, d)));
    const [k1, victim, k2, hugeVictim, k3] = pointers;
    const file = segmentPath(dir, k1!.segment);
    const before = fs.readFileSync(file);
    expect(before.indexOf(secret.subarray(0, 34))).toBeGreaterThan(0);
    expect(before.indexOf('victim-name-QX7')).toBeGreaterThan(0);

    await log.erase([victim!, hugeVictim!]);
    const after = fs.readFileSync(file);
    expect(after.length).toBe(before.length);
    expect(after.indexOf(secret.subarray(0, 17))).toBe(-1);
    expect(after.indexOf('victim-name-QX7')).toBe(-1);
    for (const v of [victim!, hugeVictim!]) {
      // Magic and lengths stay; the CRC (which would confirm a guess of the data) goes.
      expect(after.subarray(v.offset, v.offset + 12).equals(before.subarray(v.offset, v.offset + 12))).toBe(true);
      expect(before.subarray(v.offset + 12, v.offset + HEADER_BYTES).some((b) => b !== 0)).toBe(true);
      expect(after.subarray(v.offset + 12, v.offset + recordBytes(v)).every((b) => b === 0)).toBe(true);
    }
    for (const i of [0, 2, 4]) expect(same(await log.read(pointers[i]!, entries[i]![0]), entries[i]![1])).toBe(true);
    await damaged(log.read(victim!, 'victim-name-QX7'), /another record/);
    await damaged(log.read(hugeVictim!, 'huge-victim'), /another record/);
    expect(await walk(log, k1!.segment)).toEqual([
      walked(k1!, 'keep-1'),
      walked(victim!, '\0'.repeat(victim!.nameLength)),
      walked(k2!, 'keep-2'),
      walked(hugeVictim!, '\0'.repeat(hugeVictim!.nameLength)),
      walked(k3!, 'keep-3'),
    ]);
  });

  it('skips records of a removed segment and still erases the others', async () => {
    const { log, dir } = await open({ segmentBytes: 4096 });
    const gone = await log.append('gone', bytes(4000, 1));
    const live = await log.append('live', Buffer.from('LIVE-MARKER'.repeat(10)));
    expect(live.segment).toBe(gone.segment + 1);
    await log.remove(gone.segment);
    await log.erase([gone, live]);
    expect(fs.existsSync(segmentPath(dir, gone.segment))).toBe(false);
    expect(fs.readFileSync(segmentPath(dir, live.segment)).indexOf('LIVE-MARKER')).toBe(-1);
    await expect(log.erase([gone])).resolves.toBeUndefined();
  });
});

describe('value log remove', () => {
  it('deletes the file; its pointers then fail; the active segment cannot be removed', async () => {
    const { log, dir } = await open({ segmentBytes: 4096 });
    const pointers: ValueLogPointer[] = [];
    for (let i = 0; i < 6; i++) pointers.push(await log.append(`r${i}`, bytes(1500, i)));
    const first = pointers[0]!;
    expect(same(await log.read(first, 'r0'), bytes(1500, 0))).toBe(true); // leaves a read handle open
    await log.remove(first.segment);
    expect(fs.existsSync(segmentPath(dir, first.segment))).toBe(false);
    expect(await log.segments()).not.toContain(first.segment);
    expect(await log.size(first.segment)).toBe(0);
    for (const [i, p] of pointers.entries()) {
      if (p.segment === first.segment) await damaged(log.read(p, `r${i}`), /gone/);
      else expect(same(await log.read(p, `r${i}`), bytes(1500, i))).toBe(true);
    }
    await expect(log.remove(first.segment)).resolves.toBeUndefined();
    await expect(log.remove(log.active!)).rejects.toThrow(/takes appends/);
    expect(fs.existsSync(segmentPath(dir, log.active!))).toBe(true);
  });

  it('a read or an erase racing remove neither keeps the removed file open nor fails the erase', async () => {
    const { log } = await open({ segmentBytes: 4096, sync: false });
    const pointers: ValueLogPointer[] = [];
    for (let i = 0; i < 20; i++) pointers.push(await log.append(`r${i}`, bytes(3000, i)));
    for (const [i, p] of pointers.slice(0, -1).entries()) {
      const racing = i % 2 ? log.read(p, `r${i}`).catch((e: unknown) => expect(e).toBeInstanceOf(ValueLogDamage)) : log.erase([p]);
      await log.remove(p.segment);
      await racing;
      await damaged(log.read(p, `r${i}`), /gone/);
    }
  });
});

describe('value log read handles', () => {
  /** Read handles of `dir` open in this process, where /proc tells. */
  const handlesOf = (dir: string) =>
    fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir);
      } catch {
        return false; // the descriptor readdir itself used
      }
    }).length;

  it('with openFiles 2, reads across many segments keep working, one by one and all at once', async () => {
    const { log, dir } = await open({ segmentBytes: 4096, openFiles: 2, sync: false });
    const pointers: ValueLogPointer[] = [];
    for (let i = 0; i < 40; i++) pointers.push(await log.append(`r${i}`, bytes(1500 + i, i)));
    expect((await log.segments()).length).toBeGreaterThanOrEqual(15);
    const check = async (i: number) => expect(same(await log.read(pointers[i]!, `r${i}`), bytes(1500 + i, i))).toBe(true);
    for (let i = 0; i < 40; i++) await check(i);
    for (let i = 39; i >= 0; i--) await check(i);
    if (fs.existsSync('/proc/self/fd')) {
      await new Promise((r) => setTimeout(r, 50)); // evicted handles close in the background
      expect(handlesOf(dir)).toBeLessThanOrEqual(3); // two read handles and the active segment
    }
    // All at once, scattered and then each record three times in a row, so that reads of a
    // segment race to open it while others evict.
    await Promise.all(Array.from({ length: 120 }, (_, k) => check((k * 7) % 40)));
    for (let round = 0; round < 5; round++)
      await Promise.all(Array.from({ length: 120 }, (_, k) => check((Math.floor(k / 3) + round) % 40)));
    const all = await Promise.all(
      pointers.map((p, i) => walk(log, p.segment).then((rs) => rs.find((r) => r.offset === p.offset)?.name === `r${i}`)),
    );
    expect(all.every(Boolean)).toBe(true);
  });
});

describe('value log close', () => {
  it('waits for appends in flight; appends after close reject', async () => {
    const { log, dir } = await open();
    let settled = 0;
    const appends = Array.from({ length: 5 }, (_, i) => log.append(`c${i}`, bytes(100, i)).then((p) => (settled++, p)));
    await log.close();
    expect(settled).toBe(5);
    await expect(log.append('late', bytes(1, 1))).rejects.toThrow(/closed/);
    const pointers = await Promise.all(appends);
    const again = (await open({ dir })).log;
    for (const [i, p] of pointers.entries()) expect(same(await again.read(p, `c${i}`), bytes(100, i))).toBe(true);
  });
});
