/**
 * The production codec: ISA-L's GF(2^8) matrices and a SIMD kernel in WebAssembly, in
 * two builds: relaxed SIMD where the engine has it, SIMD128 everywhere else.
 */
import { allocOutput } from '#alloc';
import { ErasureCodecError } from './errors.js';
import {
  checkOutput,
  checkParams,
  checkParity,
  checkValue,
  checkValueLength,
  chooseFragments,
  type CodecParams,
  type ErasureCodec,
} from './params.js';
import { decodeBase64, instantiateRs, type RsModule } from './rs-module.js';
import { wasmBase64 as relaxedBase64 } from './wasm/powerstore-rs-relaxed.js';
import { wasmBase64 as simd128Base64 } from './wasm/powerstore-rs.js';

/** Kernel steps are up to 64 bytes; chunk strides are multiples of it. */
const STEP = 64;
/** Decode table sets kept per codec, one per erasure pattern seen. */
const DECODE_CACHE_ENTRIES = 64;

/**
 * Which WebAssembly build runs the GF(2^8) kernel. Both give the same bytes (the kernel
 * only looks up in-range indices, where the relaxed instruction is fully defined):
 *
 * - `'relaxed-simd'`: `i8x16.relaxed_swizzle`, a bare `pshufb` on x86; needs an engine
 *   that ships relaxed SIMD (Chrome/Edge 114+, Node 21+);
 * - `'simd128'`: `i8x16.swizzle`, which x86 engines must pad with out-of-range handling;
 *   runs wherever WebAssembly SIMD does.
 */
export type CodecKernel = 'relaxed-simd' | 'simd128';

/** Options of {@link createCodec}. */
export interface CodecOptions {
  /**
   * Forces a kernel instead of {@link preferredKernel}'s choice, for tests and
   * comparisons. Forcing one the engine cannot run rejects with `UNSUPPORTED_PLATFORM`.
   */
  readonly kernel?: CodecKernel;
}

/** The WebAssembly codec: an {@link ErasureCodec} that says which kernel it runs. */
export interface WasmErasureCodec extends ErasureCodec {
  /** The kernel this codec runs on. */
  readonly kernel: CodecKernel;
}

/** The relaxed build's bytes, decoded once: validated by preferredKernel, then instantiated. */
let relaxedBytes: Uint8Array<ArrayBuffer> | undefined;
let relaxedSupported: boolean | undefined;
const shared = new Map<CodecKernel, Promise<RsModule>>();

function relaxedModuleBytes(): Uint8Array<ArrayBuffer> {
  return (relaxedBytes ??= decodeBase64(relaxedBase64));
}

/**
 * The kernel {@link createCodec} uses by default: `'relaxed-simd'` when this engine
 * validates the relaxed-SIMD build (`WebAssembly.validate`, checked once per realm),
 * otherwise `'simd128'`. Node 20 validates it only with `--experimental-wasm-relaxed-simd`.
 */
export function preferredKernel(): CodecKernel {
  relaxedSupported ??= WebAssembly.validate(relaxedModuleBytes());
  return relaxedSupported ? 'relaxed-simd' : 'simd128';
}

function loadModule(kernel: CodecKernel): Promise<RsModule> {
  let module = shared.get(kernel);
  if (!module) {
    module = (
      kernel === 'relaxed-simd'
        ? instantiateRs(relaxedModuleBytes(), 'the relaxed-SIMD kernel needs WebAssembly relaxed SIMD (Chrome/Edge 114+, Node 21+)')
        : instantiateRs(simd128Base64)
    ).catch((e: unknown) => {
      shared.delete(kernel);
      throw e;
    });
    shared.set(kernel, module);
  }
  return module;
}

/**
 * Creates a Reed-Solomon codec with `n` fragments, any `k` of which rebuild a value.
 * Each WebAssembly build is instantiated at most once per JavaScript realm and shared
 * by all codecs on it; creating more codecs is cheap.
 *
 * Data fragments returned by `encode` are views of the value where the value covers
 * them whole (no copy); parity fragments share one buffer.
 */
export async function createCodec(params: CodecParams, options: CodecOptions = {}): Promise<WasmErasureCodec> {
  const checked = checkParams(params);
  const kernel = options.kernel ?? preferredKernel();
  if (kernel !== 'relaxed-simd' && kernel !== 'simd128') {
    throw new ErasureCodecError('INVALID_ARGUMENT', `kernel must be 'relaxed-simd' or 'simd128', got ${String(kernel)}`);
  }
  return new WasmCodec(await loadModule(kernel), checked, kernel);
}

/**
 * A codec on a module of the caller's choice. For the benchmark, which runs ISA-L's
 * portable C through the same harness.
 * @internal
 */
export async function createCodecFromModule(base64: string, params: CodecParams): Promise<ErasureCodec> {
  return new WasmCodec(await instantiateRs(base64), checkParams(params), 'custom');
}

class WasmCodec<K extends string> implements ErasureCodec {
  readonly k: number;
  readonly n: number;
  readonly kernel: K;
  readonly #rs: RsModule;
  /** The n × k generator matrix, row-major. */
  readonly #generator: Uint8Array;
  /** ISA-L tables for the parity rows. */
  readonly #encodeTables: Uint8Array;
  readonly #decodeTables = new Map<string, Uint8Array>();

  constructor(rs: RsModule, { k, n }: CodecParams, kernel: K) {
    this.k = k;
    this.n = n;
    this.kernel = kernel;
    this.#rs = rs;
    const { exports, heap, matrixA, tables } = rs;
    exports.ps_gen_matrix(n, k);
    this.#generator = heap.slice(matrixA, matrixA + n * k);
    exports.ps_init_tables(k, n - k, matrixA + k * k);
    this.#encodeTables = heap.slice(tables, tables + (n - k) * k * 32);
    rs.loadedTables = this.#encodeTables;
  }

  fragmentLength(valueLength: number): number {
    return Math.ceil(checkValueLength(valueLength) / this.k);
  }

  encode(value: Uint8Array): Uint8Array[] {
    const len = this.fragmentLength(checkValue(value).length);
    const rows = this.n - this.k;
    const parity = allocOutput(rows * len);
    const views: Uint8Array[] = [];
    for (let r = 0; r < rows; r++) views.push(parity.subarray(r * len, (r + 1) * len));
    return this.#encode(value, len, views);
  }

  encodeInto(value: Uint8Array, parity: readonly Uint8Array[]): Uint8Array[] {
    const len = this.fragmentLength(checkValue(value).length);
    return this.#encode(value, len, checkParity(this, parity, len));
  }

  #encode(value: Uint8Array, len: number, parity: readonly Uint8Array[]): Uint8Array[] {
    const { k } = this;
    const fragments: Uint8Array[] = [];
    for (let j = 0; j < k; j++) {
      const start = j * len;
      if (start + len <= value.length) {
        fragments.push(value.subarray(start, start + len));
      } else {
        const padded = new Uint8Array(len);
        if (start < value.length) padded.set(value.subarray(start));
        fragments.push(padded);
      }
    }
    if (parity.length > 0 && len > 0) this.#run(this.#encodeTables, len, fragments, parity);
    fragments.push(...parity);
    return fragments;
  }

  decode(fragments: readonly (Uint8Array | undefined)[], valueLength: number): Uint8Array {
    const len = this.fragmentLength(valueLength);
    const chosen = chooseFragments(this, fragments, len);
    return this.#decode(fragments, chosen, len, valueLength, allocOutput(valueLength));
  }

  decodeInto(fragments: readonly (Uint8Array | undefined)[], valueLength: number, out: Uint8Array): Uint8Array {
    const len = this.fragmentLength(valueLength);
    const chosen = chooseFragments(this, fragments, len);
    return this.#decode(fragments, chosen, len, valueLength, checkOutput(out, valueLength).subarray(0, valueLength));
  }

  /** Fills `value` completely: callers may pass uninitialised memory. */
  #decode(
    fragments: readonly (Uint8Array | undefined)[],
    chosen: number[],
    len: number,
    valueLength: number,
    value: Uint8Array,
  ): Uint8Array {
    const { k } = this;
    // chosen is sorted, so data fragment d is present exactly when chosen[d] === d.
    const missing: number[] = [];
    for (let d = 0; d < k; d++) {
      if (chosen[d] === d) {
        const start = d * len;
        if (start < valueLength) value.set(fragments[d]!.subarray(0, Math.min(len, valueLength - start)), start);
      } else {
        missing.push(d);
      }
    }
    if (missing.length === 0 || len === 0) return value;
    const inputs = chosen.map((i) => fragments[i]!);
    const tables = this.#decodeTablesFor(chosen, missing);
    // Rebuilt data fragment d lands at d * len in the value; clipping happens in #run.
    const outputs = missing.map((d) => value.subarray(Math.min(d * len, valueLength), Math.min((d + 1) * len, valueLength)));
    this.#run(tables, len, inputs, outputs);
    return value;
  }

  /**
   * Streams `inputs` (k fragments of `len` bytes) through the arena in column chunks,
   * multiplies them by `tables` and writes output row r to `outputs[r]`, which may be
   * shorter than `len` (the clipped tail of a value).
   */
  #run(tables: Uint8Array, len: number, inputs: readonly Uint8Array[], outputs: readonly Uint8Array[]): void {
    const { k } = this;
    const rows = outputs.length;
    const rs = this.#rs;
    const { heap, arena, exports } = rs;
    if (rs.loadedTables !== tables) {
      heap.set(tables, rs.tables);
      rs.loadedTables = tables;
    }
    // Stride per fragment so that k inputs and `rows` outputs fit the arena together.
    const stride = Math.floor(rs.arenaBytes / (k + rows) / STEP) * STEP;
    const outBase = arena + k * stride;
    for (let col = 0; col < len; col += stride) {
      const width = Math.min(stride, len - col);
      for (let j = 0; j < k; j++) {
        heap.set(inputs[j]!.subarray(col, col + width), arena + j * stride);
      }
      exports.ps_encode(Math.ceil(width / STEP) * STEP, k, rows, rs.tables, arena, stride, outBase, stride);
      for (let r = 0; r < rows; r++) {
        const out = outputs[r]!;
        const n = Math.min(width, out.length - col);
        if (n > 0) out.set(heap.subarray(outBase + r * stride, outBase + r * stride + n), col);
      }
    }
  }

  #decodeTablesFor(chosen: readonly number[], missing: readonly number[]): Uint8Array {
    const key = chosen.join(',');
    const cached = this.#decodeTables.get(key);
    if (cached) {
      // Re-insert to keep the map in least-recently-used order.
      this.#decodeTables.delete(key);
      this.#decodeTables.set(key, cached);
      return cached;
    }
    const { k } = this;
    const { heap, exports, matrixA, matrixB, tables } = this.#rs;
    chosen.forEach((idx, row) => heap.set(this.#generator.subarray(idx * k, idx * k + k), matrixA + row * k));
    if (exports.ps_invert_matrix(k) !== 0) {
      throw new ErasureCodecError('INVALID_PARAMS', `internal: singular decode matrix for fragments ${key}`);
    }
    // Row d of the inverse rebuilds data fragment d from the chosen fragments.
    missing.forEach((d, row) => heap.copyWithin(matrixA + row * k, matrixB + d * k, matrixB + d * k + k));
    exports.ps_init_tables(k, missing.length, matrixA);
    const result = heap.slice(tables, tables + missing.length * k * 32);
    // ps_init_tables wrote into the shared table area.
    this.#rs.loadedTables = result;
    if (this.#decodeTables.size >= DECODE_CACHE_ENTRIES) {
      this.#decodeTables.delete(this.#decodeTables.keys().next().value!);
    }
    this.#decodeTables.set(key, result);
    return result;
  }
}
