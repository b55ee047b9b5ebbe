/**
 * Arithmetic in GF(2^8) with ISA-L's field: polynomial x^8+x^4+x^3+x^2+1 (0x11d),
 * generator 2. Scalar and table-driven on purpose: this is the test oracle and the
 * matrix code, never the bulk path.
 */

const EXP = new Uint8Array(512);
const LOG = new Uint8Array(256);
{
  let x = 1;
  for (let i = 0; i < 255; i++) {
    EXP[i] = x;
    LOG[x] = i;
    x <<= 1;
    if (x & 0x100) x ^= 0x11d;
  }
  // Doubling the exponent table lets gfMul skip the `mod 255`.
  for (let i = 255; i < 512; i++) EXP[i] = EXP[i - 255]!;
}

/** Product of two field elements. */
export function gfMul(a: number, b: number): number {
  if (a === 0 || b === 0) return 0;
  return EXP[LOG[a]! + LOG[b]!]!;
}

/** Multiplicative inverse; `gfInv(0)` is 0, as in ISA-L. */
export function gfInv(a: number): number {
  if (a === 0) return 0;
  return EXP[255 - LOG[a]!]!;
}

/**
 * ISA-L's `gf_gen_cauchy1_matrix`: an `m × k` row-major matrix whose top `k` rows are
 * the identity and whose row `i ≥ k`, column `j` is `1 / (i ⊕ j)`. Every `k × k`
 * submatrix is invertible for `m ≤ 256`, so any `k` fragments rebuild the value.
 */
export function cauchyMatrix(m: number, k: number): Uint8Array {
  const a = new Uint8Array(m * k);
  for (let i = 0; i < k; i++) a[k * i + i] = 1;
  for (let i = k; i < m; i++) {
    for (let j = 0; j < k; j++) a[k * i + j] = gfInv(i ^ j);
  }
  return a;
}

/**
 * Inverse of an `n × n` row-major matrix by Gauss–Jordan elimination, or `undefined`
 * when it is singular.
 */
export function invertMatrix(input: Uint8Array, n: number): Uint8Array | undefined {
  const a = Uint8Array.from(input);
  const inv = new Uint8Array(n * n);
  for (let i = 0; i < n; i++) inv[i * n + i] = 1;
  for (let col = 0; col < n; col++) {
    let pivot = col;
    while (pivot < n && a[pivot * n + col] === 0) pivot++;
    if (pivot === n) return undefined;
    if (pivot !== col) {
      for (let j = 0; j < n; j++) {
        swap(a, pivot * n + j, col * n + j);
        swap(inv, pivot * n + j, col * n + j);
      }
    }
    const scale = gfInv(a[col * n + col]!);
    for (let j = 0; j < n; j++) {
      a[col * n + j] = gfMul(a[col * n + j]!, scale);
      inv[col * n + j] = gfMul(inv[col * n + j]!, scale);
    }
    for (let row = 0; row < n; row++) {
      if (row === col) continue;
      const f = a[row * n + col]!;
      if (f === 0) continue;
      for (let j = 0; j < n; j++) {
        a[row * n + j]! ^= gfMul(f, a[col * n + j]!);
        inv[row * n + j]! ^= gfMul(f, inv[col * n + j]!);
      }
    }
  }
  return inv;
}

function swap(x: Uint8Array, i: number, j: number): void {
  const t = x[i]!;
  x[i] = x[j]!;
  x[j] = t;
}
