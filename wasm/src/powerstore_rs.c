/*
 * PowerStore's Reed-Solomon kernel for WebAssembly.
 *
 * The GF(2^8) matrix work (Cauchy generator, inversion, multiplication tables) is
 * ISA-L's own C, compiled alongside this file; what lives here is the bulk kernel and
 * the fixed memory layout the JavaScript side drives.
 *
 * Memory is static and never grows: the host streams a value through the arena in
 * column chunks (every output byte depends only on the same column of the inputs),
 * so a 1 GiB value and a 4 KiB value use the same few MiB, and a chunk's inputs are
 * still in cache when the kernel reads them.
 */
#include <stdint.h>
#include <string.h>

#include "erasure_code.h"

#define PS_MAX_FRAGMENTS 255
#define PS_ARENA_BYTES (1u << 20)
#define PS_TABLE_BYTES (PS_MAX_FRAGMENTS * PS_MAX_FRAGMENTS * 32u)
#define PS_MATRIX_BYTES (PS_MAX_FRAGMENTS * PS_MAX_FRAGMENTS)

static uint8_t arena[PS_ARENA_BYTES] __attribute__((aligned(64)));
static uint8_t tables[PS_TABLE_BYTES] __attribute__((aligned(64)));
static uint8_t matrix_a[PS_MATRIX_BYTES];
static uint8_t matrix_b[PS_MATRIX_BYTES];

uint8_t *ps_arena(void) { return arena; }
uint32_t ps_arena_bytes(void) { return PS_ARENA_BYTES; }
uint8_t *ps_tables(void) { return tables; }
uint8_t *ps_matrix_a(void) { return matrix_a; }
uint8_t *ps_matrix_b(void) { return matrix_b; }

/* Generator matrix (n x k) into matrix_a. */
void ps_gen_matrix(int n, int k) { gf_gen_cauchy1_matrix(matrix_a, n, k); }

/* Inverts the k x k matrix in matrix_a into matrix_b; 0 on success. */
int ps_invert_matrix(int k) { return gf_invert_matrix(matrix_a, matrix_b, k); }

/* Expands `rows` x `k` coefficients (at `coefficients`) into ISA-L's 32-byte tables. */
void ps_init_tables(int k, int rows, uint8_t *coefficients) {
  ec_init_tables(k, rows, coefficients, tables);
}

#ifdef PS_PORTABLE_KERNEL

/* Benchmark baseline: ISA-L's portable C, unchanged. */
void ps_encode(int len, int k, int rows, const uint8_t *tbls, uint8_t *src, int src_stride,
               uint8_t *dst, int dst_stride) {
  uint8_t *srcs[PS_MAX_FRAGMENTS];
  uint8_t *dsts[PS_MAX_FRAGMENTS];
  for (int j = 0; j < k; j++) srcs[j] = src + (size_t)j * src_stride;
  for (int r = 0; r < rows; r++) dsts[r] = dst + (size_t)r * dst_stride;
  ec_encode_data_base(len, k, rows, (unsigned char *)tbls, srcs, dsts);
}

#else

#include <wasm_simd128.h>

#ifndef PS_V1
#define PS_V1 4
#endif
#ifndef PS_V2
#define PS_V2 4
#endif
#ifndef PS_V3
#define PS_V3 2
#endif
#ifndef PS_V4
#define PS_V4 2
#endif

/*
 * The table lookup. Indices are nibbles (0..15), where i8x16.relaxed_swizzle is defined
 * exactly as i8x16.swizzle, so both builds give the same bytes; the relaxed form skips
 * the out-of-range handling that costs i8x16.swizzle a saturating add (or a compare and
 * blend) beside pshufb on x86. wasm_simd128.h in emcc 3.1.6 has no relaxed intrinsics,
 * hence the builtin.
 */
#ifdef PS_RELAXED_SIMD
#define PS_LOOKUP(table, index) ((v128_t)__builtin_wasm_relaxed_swizzle_i8x16((__i8x16)(table), (__i8x16)(index)))
#else
#define PS_LOOKUP(table, index) wasm_i8x16_swizzle((table), (index))
#endif

/*
 * Split-nibble multiplication: c * x = T_lo[x & 15] ^ T_hi[x >> 4], where T_lo and T_hi
 * are ISA-L's 16-byte tables for c, looked up sixteen lanes at a time by PS_LOOKUP.
 * R output rows share each load and nibble split of an input; two vectors per step give
 * the CPU independent chains. R <= 4 keeps 8 accumulators plus temporaries within the
 * 16 vector registers of x86-64, where the engine compiles this.
 */
static inline __attribute__((always_inline)) void kernel_rows(int R, int V, int len, int k,
                                                              const uint8_t *tbls,
                                                              const uint8_t *src, int src_stride,
                                                              uint8_t *dst, int dst_stride) {
  const v128_t low_mask = wasm_i8x16_splat(0x0f);
  for (int pos = 0; pos < len; pos += 16 * V) {
    v128_t acc[4][4];
    for (int r = 0; r < R; r++)
      for (int v = 0; v < V; v++) acc[r][v] = wasm_i64x2_splat(0);
    const uint8_t *in = src + pos;
    const uint8_t *t = tbls;
    for (int j = 0; j < k; j++, in += src_stride, t += 32) {
      for (int v = 0; v < V; v++) {
        v128_t x = wasm_v128_load(in + 16 * v);
        v128_t lo = wasm_v128_and(x, low_mask);
        /* 16-bit shift then mask: x86 has no 8-bit vector shift. */
        v128_t hi = wasm_v128_and(wasm_u16x8_shr(x, 4), low_mask);
        for (int r = 0; r < R; r++) {
          const uint8_t *tr = t + (size_t)r * k * 32;
          acc[r][v] = wasm_v128_xor(acc[r][v], wasm_v128_xor(PS_LOOKUP(wasm_v128_load(tr), lo),
                                                             PS_LOOKUP(wasm_v128_load(tr + 16), hi)));
        }
      }
    }
    for (int r = 0; r < R; r++)
      for (int v = 0; v < V; v++) wasm_v128_store(dst + (size_t)r * dst_stride + pos + 16 * v, acc[r][v]);
  }
}

/*
 * dst[r] = sum_j coefficient(r, j) * src[j] for `rows` outputs over `k` inputs laid out
 * at fixed strides. Works in steps of 32 bytes: the host pads strides and lengths to a
 * multiple of 32, and bytes past `len` in the outputs are scratch.
 */
void ps_encode(int len, int k, int rows, const uint8_t *tbls, const uint8_t *src, int src_stride,
               uint8_t *dst, int dst_stride) {
  while (rows > 0) {
    /* Groups of 4 rows, except that 5 and 6 split as 3+2 and 3+3 to keep groups full. */
    int group = rows >= 7 || rows == 4 ? 4 : rows >= 5 ? 3 : rows;
    switch (group) {
      case 4: kernel_rows(4, PS_V4, len, k, tbls, src, src_stride, dst, dst_stride); break;
      case 3: kernel_rows(3, PS_V3, len, k, tbls, src, src_stride, dst, dst_stride); break;
      case 2: kernel_rows(2, PS_V2, len, k, tbls, src, src_stride, dst, dst_stride); break;
      default: kernel_rows(1, PS_V1, len, k, tbls, src, src_stride, dst, dst_stride); break;
    }
    rows -= group;
    tbls += (size_t)group * k * 32;
    dst += (size_t)group * dst_stride;
  }
}

#endif
