/**
 * The WebAssembly side of the codec: instantiation and its fixed memory layout.
 * See wasm/src/powerstore_rs.c for what each export does.
 */
import { ErasureCodecError } from './errors.js';

interface RsExports {
  memory: WebAssembly.Memory;
  _initialize(): void;
  ps_arena(): number;
  ps_arena_bytes(): number;
  ps_tables(): number;
  ps_matrix_a(): number;
  ps_matrix_b(): number;
  ps_gen_matrix(n: number, k: number): void;
  ps_invert_matrix(k: number): number;
  ps_init_tables(k: number, rows: number, coefficients: number): void;
  ps_encode(len: number, k: number, rows: number, tables: number, src: number, srcStride: number, dst: number, dstStride: number): void;
}

/** One instantiated module. Its memory never grows, so `heap` stays valid. */
export interface RsModule {
  readonly heap: Uint8Array;
  readonly exports: RsExports;
  readonly arena: number;
  readonly arenaBytes: number;
  readonly tables: number;
  readonly matrixA: number;
  readonly matrixB: number;
  /** The table set last copied to `tables`, so codecs that alternate reload only on a switch. */
  loadedTables: Uint8Array | undefined;
}

/**
 * Instantiates a module from its base64 text, or from bytes already decoded (the loader
 * decodes the relaxed-SIMD build once to validate it). `requirement` names what the
 * engine lacks when the module does not validate.
 */
export async function instantiateRs(
  source: string | Uint8Array<ArrayBuffer>,
  requirement = 'WebAssembly SIMD128 is required (Node 16.4+, Chrome 91+, Firefox 89+, Safari 16.4+)',
): Promise<RsModule> {
  const bytes = typeof source === 'string' ? decodeBase64(source) : source;
  if (!WebAssembly.validate(bytes)) {
    throw new ErasureCodecError('UNSUPPORTED_PLATFORM', `this JavaScript engine cannot run the codec: ${requirement}`);
  }
  const { instance } = await WebAssembly.instantiate(bytes, {});
  const exports = instance.exports as unknown as RsExports;
  exports._initialize();
  return {
    heap: new Uint8Array(exports.memory.buffer),
    exports,
    arena: exports.ps_arena(),
    arenaBytes: exports.ps_arena_bytes(),
    tables: exports.ps_tables(),
    matrixA: exports.ps_matrix_a(),
    matrixB: exports.ps_matrix_b(),
    loadedTables: undefined,
  };
}

/** Base64 to bytes with `atob`, which every target (browsers, Node 16+) has. */
export function decodeBase64(s: string): Uint8Array<ArrayBuffer> {
  const binary = atob(s);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}
