#!/usr/bin/env node
/**
 * Renumbers relaxed-SIMD instructions in a WebAssembly module from the prototype opcodes
 * to the standardized ones.
 *
 *   node wasm/relaxed-opcodes.mjs <in.wasm> <out.wasm>
 *
 * Why: the LLVM behind Debian's emcc 3.1.6 (LLVM 14) emits relaxed SIMD with the
 * proposal's *prototype* opcodes, which were squeezed into holes of the SIMD128 opcode
 * space (`i8x16.relaxed_swizzle` was 0xfd 0xa2). The proposal then moved them to
 * 0xfd 0x100..0x113, and engines that ship relaxed SIMD (V8 11.4+, Chromium 114+, Node
 * 22+, Firefox 120+) accept only those: without this pass the module fails validation
 * everywhere and the loader would always fall back to the SIMD128 build.
 *
 * The pass decodes every instruction of every function body (so that bytes inside
 * immediates, such as a v128.const's 16 bytes, are never mistaken for opcodes), rewrites
 * the 0xfd sub-opcodes below, and re-encodes the body and section sizes. Anything it
 * cannot decode is an error rather than a guess: a wrong byte here would only surface as
 * an engine rejecting the module, or worse, executing a different instruction.
 *
 * Opcodes from the relaxed-simd proposal's binary-format table (Overview.md, "opcode"
 * and "prototype opcode" columns). The FMA pair is left out on purpose: LLVM 14 named
 * them fma/fms, whose operand order and sign convention were still in flux, so their
 * meaning is not guaranteed to survive a plain renumbering; the codec uses none of them.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** Prototype 0xfd sub-opcode → standardized one. */
export const RELAXED_OPCODES = new Map([
  [0xa2, 0x100], // i8x16.relaxed_swizzle
  [0xa5, 0x101], // i32x4.relaxed_trunc_f32x4_s
  [0xa6, 0x102], // i32x4.relaxed_trunc_f32x4_u
  [0xc5, 0x103], // i32x4.relaxed_trunc_f64x2_s_zero
  [0xc6, 0x104], // i32x4.relaxed_trunc_f64x2_u_zero
  [0xb2, 0x109], // i8x16.relaxed_laneselect
  [0xb3, 0x10a], // i16x8.relaxed_laneselect
  [0xd2, 0x10b], // i32x4.relaxed_laneselect
  [0xd3, 0x10c], // i64x2.relaxed_laneselect
  [0xb4, 0x10d], // f32x4.relaxed_min
  [0xe2, 0x10e], // f32x4.relaxed_max
  [0xd4, 0x10f], // f64x2.relaxed_min
  [0xee, 0x110], // f64x2.relaxed_max
]);
/** Prototype FMA opcodes (f32x4/f64x2 fma and fms), refused: see above. */
const REFUSED = new Map([
  [0xaf, 'f32x4.relaxed_fma'],
  [0xb0, 'f32x4.relaxed_fms'],
  [0xcf, 'f64x2.relaxed_fma'],
  [0xd0, 'f64x2.relaxed_fms'],
]);

const CODE_SECTION = 10;

class Reader {
  constructor(bytes, pos = 0, end = bytes.length) {
    this.bytes = bytes;
    this.pos = pos;
    this.end = end;
  }
  byte() {
    if (this.pos >= this.end) throw new Error(`unexpected end of input at byte ${this.pos}`);
    return this.bytes[this.pos++];
  }
  /** Unsigned LEB128 (up to 64 bits; values beyond 2^53 only need skipping here). */
  uleb() {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
    throw new Error(`LEB128 too long at byte ${this.pos}`);
  }
  /** Signed LEB128, skipped: no caller needs the value. */
  skipSleb() {
    for (let i = 0; i < 10; i++) if ((this.byte() & 0x80) === 0) return;
    throw new Error(`LEB128 too long at byte ${this.pos}`);
  }
  skip(n) {
    if (this.pos + n > this.end) throw new Error(`unexpected end of input at byte ${this.pos}`);
    this.pos += n;
  }
  memarg() {
    const align = this.uleb();
    // Multi-memory: bit 6 of the alignment says a memory index follows.
    if (align & 0x40) this.uleb();
    this.uleb();
  }
  blockType() {
    const b = this.bytes[this.pos];
    // 0x40 (empty) or a one-byte value type; otherwise a non-negative s33 type index.
    if (b === 0x40 || (b >= 0x6f && b <= 0x7f)) this.pos++;
    else this.skipSleb();
  }
}

function uleb(value) {
  const out = [];
  do {
    let b = value & 0x7f;
    value = Math.floor(value / 128);
    if (value !== 0) b |= 0x80;
    out.push(b);
  } while (value !== 0);
  return out;
}

/** Skips the immediates of a one-byte (MVP, sign-extension, reference-type) opcode. */
function skipPlainImmediates(r, op) {
  switch (op) {
    case 0x02: // block
    case 0x03: // loop
    case 0x04: // if
      return r.blockType();
    case 0x0c: // br
    case 0x0d: // br_if
    case 0x10: // call
    case 0x12: // return_call
    case 0x20: // local.get
    case 0x21: // local.set
    case 0x22: // local.tee
    case 0x23: // global.get
    case 0x24: // global.set
    case 0x25: // table.get
    case 0x26: // table.set
    case 0xd2: // ref.func
      return r.uleb();
    case 0x0e: {
      // br_table: a vector of labels and the default.
      const count = r.uleb();
      for (let i = 0; i <= count; i++) r.uleb();
      return;
    }
    case 0x11: // call_indirect: type, table
    case 0x13: // return_call_indirect
      r.uleb();
      return r.uleb();
    case 0x1c: {
      // select with types
      const count = r.uleb();
      r.skip(count);
      return;
    }
    case 0x3f: // memory.size
    case 0x40: // memory.grow
      return r.uleb();
    case 0x41: // i32.const
    case 0x42: // i64.const
      return r.skipSleb();
    case 0x43: // f32.const
      return r.skip(4);
    case 0x44: // f64.const
      return r.skip(8);
    case 0xd0: // ref.null
      return r.skip(1);
    default:
      if (op >= 0x28 && op <= 0x3e) return r.memarg(); // loads and stores
      if (
        op === 0x00 || // unreachable
        op === 0x01 || // nop
        op === 0x05 || // else
        op === 0x0b || // end
        op === 0x0f || // return
        op === 0x1a || // drop
        op === 0x1b || // select
        op === 0xd1 || // ref.is_null
        (op >= 0x45 && op <= 0xc4) // numeric and sign-extension operators
      ) {
        return;
      }
      throw new Error(`unknown opcode 0x${op.toString(16)} at byte ${r.pos - 1}`);
  }
}

/** Immediates of a 0xfc-prefixed instruction (saturating truncation, bulk memory, tables). */
function skipMiscImmediates(r, sub) {
  if (sub <= 7) return; // trunc_sat
  switch (sub) {
    case 8: // memory.init: data index, memory
    case 10: // memory.copy: two memories
    case 12: // table.init: element index, table
    case 14: // table.copy: two tables
      r.uleb();
      return r.uleb();
    case 9: // data.drop
    case 11: // memory.fill
    case 13: // elem.drop
    case 15: // table.grow
    case 16: // table.size
    case 17: // table.fill
      return r.uleb();
    default:
      throw new Error(`unknown 0xfc opcode ${sub} at byte ${r.pos}`);
  }
}

/** Immediates of a 0xfd-prefixed (SIMD) instruction. */
function skipSimdImmediates(r, sub) {
  if (sub <= 0x0b || sub === 0x5c || sub === 0x5d) return r.memarg(); // loads, stores, load_zero
  if (sub === 0x0c || sub === 0x0d) return r.skip(16); // v128.const, i8x16.shuffle
  if (sub >= 0x15 && sub <= 0x22) return r.skip(1); // extract_lane / replace_lane
  if (sub >= 0x54 && sub <= 0x5b) {
    // load_lane / store_lane: memarg, lane
    r.memarg();
    return r.skip(1);
  }
  // Every other SIMD and relaxed-SIMD instruction has no immediate.
}

/**
 * Rewrites one function body's instruction stream; returns the new bytes and how many
 * instructions were renumbered.
 */
function rewriteExpression(bytes, start, end) {
  const r = new Reader(bytes, start, end);
  const out = [];
  let copied = start;
  let renumbered = 0;
  while (r.pos < end) {
    const op = r.byte();
    if (op === 0xfc) {
      skipMiscImmediates(r, r.uleb());
    } else if (op === 0xfd) {
      const subStart = r.pos;
      const sub = r.uleb();
      if (REFUSED.has(sub)) {
        throw new Error(`${REFUSED.get(sub)} (prototype opcode 0x${sub.toString(16)}) at byte ${subStart}: not renumbered, see the header`);
      }
      const final = RELAXED_OPCODES.get(sub);
      if (final !== undefined) {
        for (let i = copied; i < subStart; i++) out.push(bytes[i]);
        out.push(...uleb(final));
        copied = r.pos;
        renumbered++;
      }
      skipSimdImmediates(r, sub);
    } else if (op === 0xfe) {
      throw new Error(`threads/atomics opcode at byte ${r.pos - 1}: not expected in this module`);
    } else {
      skipPlainImmediates(r, op);
    }
  }
  for (let i = copied; i < end; i++) out.push(bytes[i]);
  return { body: out, renumbered };
}

/** Returns the module with relaxed-SIMD opcodes renumbered, and the count. */
export function renumberRelaxedSimd(input) {
  const bytes = input instanceof Uint8Array ? input : new Uint8Array(input);
  const magic = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
  if (!magic.every((b, i) => bytes[i] === b)) throw new Error('not a WebAssembly 1.0 module');
  const out = [...bytes.subarray(0, 8)];
  let renumbered = 0;
  const r = new Reader(bytes, 8);
  while (r.pos < bytes.length) {
    const id = r.byte();
    const size = r.uleb();
    const start = r.pos;
    const end = start + size;
    if (end > bytes.length) throw new Error(`section ${id} runs past the end of the module`);
    if (id !== CODE_SECTION) {
      out.push(id, ...uleb(size), ...bytes.subarray(start, end));
    } else {
      const section = new Reader(bytes, start, end);
      const count = section.uleb();
      const content = [...uleb(count)];
      for (let f = 0; f < count; f++) {
        const bodySize = section.uleb();
        const bodyStart = section.pos;
        const bodyEnd = bodyStart + bodySize;
        const body = new Reader(bytes, bodyStart, bodyEnd);
        // Locals: count, then (repeat, type) pairs.
        const groups = body.uleb();
        for (let g = 0; g < groups; g++) {
          body.uleb();
          body.skip(1);
        }
        const rewritten = rewriteExpression(bytes, body.pos, bodyEnd);
        const newBody = [...bytes.subarray(bodyStart, body.pos), ...rewritten.body];
        content.push(...uleb(newBody.length), ...newBody);
        renumbered += rewritten.renumbered;
        section.pos = bodyEnd;
      }
      if (section.pos !== end) throw new Error('code section has trailing bytes');
      out.push(id, ...uleb(content.length), ...content);
    }
    r.pos = end;
  }
  return { bytes: Uint8Array.from(out), renumbered };
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const [inFile, outFile] = process.argv.slice(2);
  if (!inFile || !outFile) {
    console.error('usage: node wasm/relaxed-opcodes.mjs <in.wasm> <out.wasm>');
    process.exit(2);
  }
  const { bytes, renumbered } = renumberRelaxedSimd(readFileSync(inFile));
  if (renumbered === 0) {
    console.error(`relaxed-opcodes: ${inFile} has no relaxed-SIMD instruction: was it built with -mrelaxed-simd?`);
    process.exit(1);
  }
  writeFileSync(outFile, bytes);
  console.error(`relaxed-opcodes: ${outFile}: ${renumbered} relaxed-SIMD instructions renumbered to the standard opcodes`);
}
