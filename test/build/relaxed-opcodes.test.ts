/**
 * wasm/relaxed-opcodes.mjs, which turns LLVM 14's prototype relaxed-SIMD opcodes into the
 * standardized ones: it must rewrite opcodes and nothing else (not bytes inside
 * immediates that happen to look like one), and refuse what it cannot map faithfully.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { wasmBase64 as relaxedBase64 } from '../../packages/erasure/src/wasm/powerstore-rs-relaxed.js';

const script = join(import.meta.dirname, '..', '..', 'wasm', 'relaxed-opcodes.mjs');
const dir = mkdtempSync(join(tmpdir(), 'powerstore-relaxed-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
}

/** A module with one function `() -> v128` whose body is `body` (without the final `end`). */
function moduleWith(body: number[]): Uint8Array {
  const section = (id: number, content: number[]) => [id, ...uleb(content.length), ...content];
  const code = [0x00, ...body, 0x0b]; // no locals
  return Uint8Array.from([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, [1, 0x60, 0, 1, 0x7b]), // type 0: () -> v128
    ...section(3, [1, 0]), // function 0 has type 0
    ...section(10, [1, ...uleb(code.length), ...code]),
  ]);
}

function run(input: Uint8Array): { status: number | null; stderr: string; output?: Uint8Array } {
  const inFile = join(dir, 'in.wasm');
  const outFile = join(dir, 'out.wasm');
  rmSync(outFile, { force: true });
  writeFileSync(inFile, input);
  const r = spawnSync(process.execPath, [script, inFile, outFile], { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr, output: r.status === 0 ? new Uint8Array(readFileSync(outFile)) : undefined };
}

// A v128.const whose immediate bytes spell the prototype relaxed_swizzle (fd a2 01):
// only a decoder that skips immediates leaves them alone.
const decoy = [0xfd, 0x0c, 0xfd, 0xa2, 0x01, ...Array<number>(13).fill(0xfd)];

it('renumbers i8x16.relaxed_swizzle from the prototype 0xfd 0xa2 to the standard 0xfd 0x100, and only the opcode', () => {
  const r = run(moduleWith([...decoy, ...decoy, 0xfd, 0xa2, 0x01]));
  expect(r.status, r.stderr).toBe(0);
  expect(r.stderr).toContain('1 relaxed-SIMD instructions renumbered');
  expect([...r.output!]).toEqual([...moduleWith([...decoy, ...decoy, 0xfd, 0x80, 0x02])]);
});

it('refuses the prototype FMA opcodes, whose meaning a renumbering does not carry over', () => {
  const r = run(moduleWith([...decoy, ...decoy, ...decoy, 0xfd, 0xaf, 0x01]));
  expect(r.status).not.toBe(0);
  expect(r.stderr).toContain('f32x4.relaxed_fma');
});

it('refuses a module it cannot decode, and one with nothing to renumber', () => {
  expect(run(moduleWith([0xff])).stderr).toContain('unknown opcode 0xff');
  const plain = run(moduleWith([...decoy]));
  expect(plain.status).not.toBe(0);
  expect(plain.stderr).toContain('has no relaxed-SIMD instruction');
});

it('left the built relaxed module with standard opcodes only', () => {
  // Running the pass again finds no prototype opcode to rewrite.
  const r = run(new Uint8Array(Buffer.from(relaxedBase64, 'base64')));
  expect(r.status).not.toBe(0);
  expect(r.stderr).toContain('has no relaxed-SIMD instruction');
});
