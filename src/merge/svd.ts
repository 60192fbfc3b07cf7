/**
 * Truncated SVD of a dense matrix, pure (runs in a page): the k largest singular values of an m × n float32 matrix A
 * and their singular vectors, A ≈ U_k · diag(s_k) · Vᵀ_k, for LoRA extraction.
 *
 * Two methods, every sum in float64 (JavaScript numbers) over float32 storage:
 * - `exact`: the Gram matrix of the smaller side (AᵀA or AAᵀ, p × p with p = min(m, n)), its eigenvectors by
 *   Householder tridiagonalisation and the implicit QL algorithm, the other side's vectors as A·v / σ. This is the
 *   best rank-k approximation (Eckart–Young) up to float64 rounding of the Gram matrix: singular values below
 *   ~1e-8 · σ₁ lose relative accuracy, far below what a float32, float16 or bfloat16 factor holds. Work ~ m·n·p.
 * - `randomized`: subspace iteration (Halko, Martinsson & Tropp 2011, algorithm 4.4): a seeded Gaussian test matrix
 *   of k + oversample columns, `powerIterations` passes of A and Aᵀ with re-orthonormalisation, then the exact SVD of
 *   the small projected matrix. Work ~ m·n·(k + oversample)·(2·powerIterations + 2): for matrices whose exact SVD
 *   would take minutes. Its singular values converge to the exact ones at the rate (σ_{l+1} / σ_k)^(2q+1); a fine-tune
 *   whose update has a flat spectrum gets a near-optimal error, not the optimal vectors.
 * `auto` (the default) takes `exact` while m·n·p ≤ `exactMaxWork`.
 *
 * Memory: A itself, one transposed copy of it (float32) for the exact method's Gram products, the p × p Gram matrix
 * and its eigenvectors (float64); the randomized method adds m·l + n·l float64 for its bases.
 */

export type SvdMethod = "auto" | "exact" | "randomized";

export interface SvdOptions {
  method?: SvdMethod;
  /** `auto` takes the exact method while m · n · min(m, n) is at most this (default 2^29: about 2 s at 512 × 2048). */
  exactMaxWork?: number;
  /** Extra columns of the randomized test matrix (default 16). */
  oversample?: number;
  /** Passes of A and Aᵀ after the first product (default 4). */
  powerIterations?: number;
  /** Seed of the randomized test matrix (default 0): the same seed gives the same factors. */
  seed?: number;
}

export interface TruncatedSvd {
  /** The number of singular triplets returned: min(k, m, n). */
  readonly rank: number;
  /** Left singular vectors, m × rank, row-major. */
  readonly u: Float64Array;
  /** Singular values, largest first. */
  readonly s: Float64Array;
  /** Right singular vectors transposed, rank × n, row-major. */
  readonly vt: Float64Array;
  /** The method used. */
  readonly method: "exact" | "randomized";
}

/**
 * The exact method's eigensolver costs ~p³ with column-strided inner loops: measured 2026-12-02 (Node 20, load ~8 on 2
 * cores, indicative) 1.7 s at 512 × 512, 2.0 s at 512 × 2048 (work 2^29) and 165 s at 2048 × 2048, where the
 * randomized method takes 15 s at 4096 × 4096, rank 16 (torch.linalg.svd, mergekit's: 26 s on 2 threads).
 */
export const DEFAULT_EXACT_MAX_WORK = 2 ** 29;

/** Squared Frobenius norm of `a`, summed in float64. */
export function frobeniusSquared(a: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += a[i]! * a[i]!;
  return sum;
}

/**
 * Eigen-decomposition of the symmetric p × p matrix `g` (row-major, overwritten by the eigenvectors, one per
 * column): eigenvalues in ascending order. Householder reduction to tridiagonal form, then the implicit QL algorithm
 * with Wilkinson-style shifts (the textbook tred2 / tql2 pair).
 */
export function symmetricEigen(g: Float64Array, p: number): Float64Array {
  const d = new Float64Array(p);
  const e = new Float64Array(p);
  const V = g;
  for (let j = 0; j < p; j++) d[j] = V[(p - 1) * p + j]!;
  // Householder reduction to tridiagonal form.
  for (let i = p - 1; i > 0; i--) {
    let scale = 0;
    let h = 0;
    for (let k = 0; k < i; k++) scale += Math.abs(d[k]!);
    if (scale === 0) {
      e[i] = d[i - 1]!;
      for (let j = 0; j < i; j++) {
        d[j] = V[(i - 1) * p + j]!;
        V[i * p + j] = 0;
        V[j * p + i] = 0;
      }
    } else {
      for (let k = 0; k < i; k++) {
        d[k] = d[k]! / scale;
        h += d[k]! * d[k]!;
      }
      let f = d[i - 1]!;
      let gg = Math.sqrt(h);
      if (f > 0) gg = -gg;
      e[i] = scale * gg;
      h -= f * gg;
      d[i - 1] = f - gg;
      for (let j = 0; j < i; j++) e[j] = 0;
      for (let j = 0; j < i; j++) {
        f = d[j]!;
        V[j * p + i] = f;
        gg = e[j]! + V[j * p + j]! * f;
        for (let k = j + 1; k <= i - 1; k++) {
          gg += V[k * p + j]! * d[k]!;
          e[k] = e[k]! + V[k * p + j]! * f;
        }
        e[j] = gg;
      }
      f = 0;
      for (let j = 0; j < i; j++) {
        e[j] = e[j]! / h;
        f += e[j]! * d[j]!;
      }
      const hh = f / (h + h);
      for (let j = 0; j < i; j++) e[j] = e[j]! - hh * d[j]!;
      for (let j = 0; j < i; j++) {
        f = d[j]!;
        gg = e[j]!;
        for (let k = j; k <= i - 1; k++) V[k * p + j] = V[k * p + j]! - (f * e[k]! + gg * d[k]!);
        d[j] = V[(i - 1) * p + j]!;
        V[i * p + j] = 0;
      }
    }
    d[i] = h;
  }
  // Accumulate the transformations.
  for (let i = 0; i < p - 1; i++) {
    V[(p - 1) * p + i] = V[i * p + i]!;
    V[i * p + i] = 1;
    const h = d[i + 1]!;
    if (h !== 0) {
      for (let k = 0; k <= i; k++) d[k] = V[k * p + i + 1]! / h;
      for (let j = 0; j <= i; j++) {
        let gg = 0;
        for (let k = 0; k <= i; k++) gg += V[k * p + i + 1]! * V[k * p + j]!;
        for (let k = 0; k <= i; k++) V[k * p + j] = V[k * p + j]! - gg * d[k]!;
      }
    }
    for (let k = 0; k <= i; k++) V[k * p + i + 1] = 0;
  }
  for (let j = 0; j < p; j++) {
    d[j] = V[(p - 1) * p + j]!;
    V[(p - 1) * p + j] = 0;
  }
  if (p > 0) V[(p - 1) * p + (p - 1)] = 1;
  e[0] = 0;
  // Implicit QL on the tridiagonal matrix (d: diagonal, e: sub-diagonal shifted down by one).
  for (let i = 1; i < p; i++) e[i - 1] = e[i]!;
  if (p > 0) e[p - 1] = 0;
  let f = 0;
  let tst1 = 0;
  const eps = 2 ** -52;
  for (let l = 0; l < p; l++) {
    tst1 = Math.max(tst1, Math.abs(d[l]!) + Math.abs(e[l]!));
    let m = l;
    while (m < p) {
      if (Math.abs(e[m]!) <= eps * tst1) break;
      m++;
    }
    if (m > l) {
      let iterations = 0;
      do {
        if (++iterations > 60) throw new Error("symmetricEigen: no convergence");
        let gg = d[l]!;
        let pp = (d[l + 1]! - gg) / (2 * e[l]!);
        let r = Math.hypot(pp, 1);
        if (pp < 0) r = -r;
        d[l] = e[l]! / (pp + r);
        d[l + 1] = e[l]! * (pp + r);
        const dl1 = d[l + 1]!;
        let h = gg - d[l]!;
        for (let i = l + 2; i < p; i++) d[i] = d[i]! - h;
        f += h;
        pp = d[m]!;
        let c = 1;
        let c2 = c;
        let c3 = c;
        const el1 = e[l + 1]!;
        let s = 0;
        let s2 = 0;
        for (let i = m - 1; i >= l; i--) {
          c3 = c2;
          c2 = c;
          s2 = s;
          gg = c * e[i]!;
          h = c * pp;
          r = Math.hypot(pp, e[i]!);
          e[i + 1] = s * r;
          s = e[i]! / r;
          c = pp / r;
          pp = c * d[i]! - s * gg;
          d[i + 1] = h + s * (c * gg + s * d[i]!);
          for (let k = 0; k < p; k++) {
            h = V[k * p + i + 1]!;
            V[k * p + i + 1] = s * V[k * p + i]! + c * h;
            V[k * p + i] = c * V[k * p + i]! - s * h;
          }
        }
        pp = (-s * s2 * c3 * el1 * e[l]!) / dl1;
        e[l] = s * pp;
        d[l] = c * pp;
      } while (Math.abs(e[l]!) > eps * tst1);
    }
    d[l] = d[l]! + f;
    e[l] = 0;
  }
  // Sort ascending, with the vectors.
  for (let i = 0; i < p - 1; i++) {
    let k = i;
    let value = d[i]!;
    for (let j = i + 1; j < p; j++) {
      if (d[j]! < value) {
        k = j;
        value = d[j]!;
      }
    }
    if (k !== i) {
      d[k] = d[i]!;
      d[i] = value;
      for (let j = 0; j < p; j++) {
        const t = V[j * p + i]!;
        V[j * p + i] = V[j * p + k]!;
        V[j * p + k] = t;
      }
    }
  }
  return d;
}

/** `rows` × `cols` row-major float32 → its transpose, cols × rows. */
function transpose(a: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  const block = 64;
  for (let i0 = 0; i0 < rows; i0 += block) {
    const i1 = Math.min(rows, i0 + block);
    for (let j0 = 0; j0 < cols; j0 += block) {
      const j1 = Math.min(cols, j0 + block);
      for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) t[j * rows + i] = a[i * cols + j]!;
    }
  }
  return t;
}

/** G = X·Xᵀ for X of p rows of length len (row-major), in float64. */
function gramOfRows(x: Float32Array | Float64Array, p: number, len: number): Float64Array {
  const g = new Float64Array(p * p);
  for (let i = 0; i < p; i++) {
    const oi = i * len;
    for (let j = i; j < p; j++) {
      const oj = j * len;
      let s0 = 0;
      let s1 = 0;
      let s2 = 0;
      let s3 = 0;
      let t = 0;
      for (; t + 3 < len; t += 4) {
        s0 += x[oi + t]! * x[oj + t]!;
        s1 += x[oi + t + 1]! * x[oj + t + 1]!;
        s2 += x[oi + t + 2]! * x[oj + t + 2]!;
        s3 += x[oi + t + 3]! * x[oj + t + 3]!;
      }
      for (; t < len; t++) s0 += x[oi + t]! * x[oj + t]!;
      const s = s0 + s1 + s2 + s3;
      g[i * p + j] = s;
      g[j * p + i] = s;
    }
  }
  return g;
}

/**
 * From the eigenvectors of the Gram matrix of X's rows (p rows of length len, X = the small side's view of A):
 * the top k singular values, the small side's vectors (k × p, from the eigenvectors) and the long side's (k × len,
 * Xᵀ·w / σ). Directions of zero singular value (below 1e-13 · σ₁) get zero vectors: they add nothing to U·S·Vᵀ.
 */
function fromGram(
  x: Float32Array | Float64Array,
  p: number,
  len: number,
  k: number,
): { s: Float64Array; small: Float64Array; long: Float64Array } {
  const g = gramOfRows(x, p, len);
  const values = symmetricEigen(g, p);
  const s = new Float64Array(k);
  const small = new Float64Array(k * p);
  const long = new Float64Array(k * len);
  const top = Math.sqrt(Math.max(values[p - 1] ?? 0, 0));
  for (let r = 0; r < k; r++) {
    const col = p - 1 - r;
    const sigma = Math.sqrt(Math.max(values[col]!, 0));
    if (!(sigma > top * 1e-13) || sigma === 0) continue;
    s[r] = sigma;
    for (let i = 0; i < p; i++) small[r * p + i] = g[i * p + col]!;
    const out = long.subarray(r * len, (r + 1) * len);
    for (let i = 0; i < p; i++) {
      const w = small[r * p + i]! / sigma;
      if (w === 0) continue;
      const oi = i * len;
      for (let t = 0; t < len; t++) out[t] = out[t]! + w * x[oi + t]!;
    }
  }
  return { s, small, long };
}

/** Row-major k × rows → rows × k. */
function transpose64(a: Float64Array, rows: number, cols: number): Float64Array {
  const t = new Float64Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = a[i * cols + j]!;
  return t;
}

function exactSvd(a: Float32Array, m: number, n: number, k: number): TruncatedSvd {
  if (n <= m) {
    // Rows of Aᵀ are A's columns: Gram AᵀA (n × n); its eigenvectors are V, and U = A·V / σ.
    const at = transpose(a, m, n);
    const { s, small, long } = fromGram(at, n, m, k);
    return { rank: k, u: transpose64(long, k, m), s, vt: small, method: "exact" };
  }
  // Gram AAᵀ (m × m): eigenvectors U, and Vᵀ rows = Uᵀ·A / σ.
  const { s, small, long } = fromGram(a, m, n, k);
  return { rank: k, u: transpose64(small, k, m), s, vt: long, method: "exact" };
}

/** A seeded standard normal generator (xorshift and Box–Muller): the same seed gives the same numbers. */
export function gaussian(seed: number): () => number {
  let s0 = (seed ^ 0x9e3779b9) >>> 0 || 1;
  let s1 = (Math.imul(seed, 0x85ebca6b) ^ 0xc2b2ae35) >>> 0 || 2;
  // Marsaglia's two-word xorshift (shifts 10, 13, 10: period 2^64 - 1).
  const next = () => {
    const t = (s0 ^ (s0 << 10)) >>> 0;
    s0 = s1;
    s1 = (s1 ^ (s1 >>> 10) ^ t ^ (t >>> 13)) >>> 0;
    return (s1 + 0.5) / 4294967296;
  };
  let spare: number | null = null;
  return () => {
    if (spare !== null) {
      const v = spare;
      spare = null;
      return v;
    }
    const u1 = next();
    const u2 = next();
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
}

/** Orthonormalise the l columns of Y (stored as l rows of length len) in place: Gram–Schmidt done twice. */
function orthonormalize(y: Float64Array, l: number, len: number): void {
  for (let j = 0; j < l; j++) {
    const yj = y.subarray(j * len, (j + 1) * len);
    for (let pass = 0; pass < 2; pass++) {
      for (let i = 0; i < j; i++) {
        const yi = y.subarray(i * len, (i + 1) * len);
        let dot = 0;
        for (let t = 0; t < len; t++) dot += yi[t]! * yj[t]!;
        for (let t = 0; t < len; t++) yj[t] = yj[t]! - dot * yi[t]!;
      }
    }
    let norm = 0;
    for (let t = 0; t < len; t++) norm += yj[t]! * yj[t]!;
    norm = Math.sqrt(norm);
    if (norm > 0) for (let t = 0; t < len; t++) yj[t] = yj[t]! / norm;
  }
}

/** Z (l × m, rows) = (A · Q)ᵀ for Q given as l rows of length n. */
function timesA(a: Float32Array, m: number, n: number, q: Float64Array, l: number): Float64Array {
  const z = new Float64Array(l * m);
  for (let i = 0; i < m; i++) {
    const oi = i * n;
    for (let j = 0; j < l; j++) {
      const oq = j * n;
      let s = 0;
      for (let t = 0; t < n; t++) s += a[oi + t]! * q[oq + t]!;
      z[j * m + i] = s;
    }
  }
  return z;
}

/** Z (l × n, rows) = (Aᵀ · Q)ᵀ for Q given as l rows of length m. */
function timesAt(a: Float32Array, m: number, n: number, q: Float64Array, l: number): Float64Array {
  const z = new Float64Array(l * n);
  for (let i = 0; i < m; i++) {
    const oi = i * n;
    for (let j = 0; j < l; j++) {
      const w = q[j * m + i]!;
      if (w === 0) continue;
      const oz = j * n;
      for (let t = 0; t < n; t++) z[oz + t] = z[oz + t]! + w * a[oi + t]!;
    }
  }
  return z;
}

function randomizedSvd(a: Float32Array, m: number, n: number, k: number, options: SvdOptions): TruncatedSvd {
  const l = Math.min(Math.min(m, n), k + (options.oversample ?? 16));
  const random = gaussian(options.seed ?? 0);
  const omega = new Float64Array(l * n);
  for (let i = 0; i < omega.length; i++) omega[i] = random();
  let q = timesA(a, m, n, omega, l); // l × m: the range basis, as rows
  orthonormalize(q, l, m);
  for (let it = 0; it < (options.powerIterations ?? 4); it++) {
    const z = timesAt(a, m, n, q, l);
    orthonormalize(z, l, n);
    q = timesA(a, m, n, z, l);
    orthonormalize(q, l, m);
  }
  // B = Qᵀ·A (l × n); its SVD B = W·S·Vᵀ through the l × l Gram matrix; U = Q·W.
  const b = timesAt(a, m, n, q, l);
  const { s, small, long } = fromGram(b, l, n, k);
  const u = new Float64Array(m * k);
  for (let r = 0; r < k; r++) {
    for (let i = 0; i < l; i++) {
      const w = small[r * l + i]!;
      if (w === 0) continue;
      for (let t = 0; t < m; t++) u[t * k + r] = u[t * k + r]! + w * q[i * m + t]!;
    }
  }
  return { rank: k, u, s, vt: long, method: "randomized" };
}

/** The `k` largest singular triplets of the m × n row-major matrix `a` (k is clamped to min(m, n)). */
export function truncatedSvd(a: Float32Array, m: number, n: number, k: number, options: SvdOptions = {}): TruncatedSvd {
  if (a.length !== m * n) throw new RangeError(`truncatedSvd: ${a.length} values for a ${m} × ${n} matrix`);
  const rank = Math.max(0, Math.min(k, m, n));
  const method = options.method ?? "auto";
  const work = m * n * Math.min(m, n);
  const exact = method === "exact" || (method === "auto" && work <= (options.exactMaxWork ?? DEFAULT_EXACT_MAX_WORK));
  if (rank === 0)
    return { rank, u: new Float64Array(0), s: new Float64Array(0), vt: new Float64Array(0), method: "exact" };
  return exact ? exactSvd(a, m, n, rank) : randomizedSvd(a, m, n, rank, options);
}
