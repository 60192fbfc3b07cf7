/**
 * dtype codecs against tables generated from torch / ml_dtypes (scripts/gen_codec_tables.py, committed in
 * test/fixtures/codecs). No Python at test time; missing or truncated tables fail the suite.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { canDecode, canEncode, fromFloat32, toFloat32 } from "../src/codecs/index.js";
import { DTYPES, type Dtype, dtypeOf } from "../src/format/dtypes.js";
import { SafetensorError } from "../src/format/errors.js";

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "codecs");
const REGENERATE = "regenerate with `.venv-ref/bin/python scripts/gen_codec_tables.py`";

interface TableFile {
  file: string;
  bytes: number;
  count: number;
  width: number;
}
interface Manifest {
  cpuCapability: string;
  decode: Record<string, TableFile>;
  encode: Record<string, { inputs: TableFile; outputs: Record<string, TableFile> }>;
  numeric: Record<string, { inputs: TableFile; outputs: TableFile }>;
}

const FORMATS = [
  "F16",
  "BF16",
  "F8_E4M3",
  "F8_E5M2",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "F8_E8M0",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
] as const satisfies readonly Dtype[];
type Format = (typeof FORMATS)[number];

const BITS: Record<Format, number> = {
  F16: 16,
  BF16: 16,
  F8_E4M3: 8,
  F8_E5M2: 8,
  F8_E4M3FNUZ: 8,
  F8_E5M2FNUZ: 8,
  F8_E8M0: 8,
  F4: 4,
  F6_E2M3: 6,
  F6_E3M2: 6,
};

function loadManifest(): Manifest {
  const path = join(FIXTURES, "manifest.json");
  if (!existsSync(path)) throw new Error(`codec fixture manifest missing at ${path}; ${REGENERATE}`);
  return JSON.parse(readFileSync(path, "utf8")) as Manifest;
}

const manifest = loadManifest();

/** A table file as a typed array of its element width (little-endian on disk; the test host is little-endian). */
function load(entry: TableFile | undefined, what: string): Uint8Array | Uint16Array | Uint32Array {
  if (entry === undefined) throw new Error(`codec fixture ${what} not in the manifest; ${REGENERATE}`);
  const path = join(FIXTURES, entry.file);
  if (!existsSync(path)) throw new Error(`codec fixture ${entry.file} missing; ${REGENERATE}`);
  const buf = readFileSync(path);
  if (buf.byteLength !== entry.bytes) {
    throw new Error(`codec fixture ${entry.file} has ${buf.byteLength} bytes, manifest says ${entry.bytes}`);
  }
  const copy = new Uint8Array(buf).slice(); // own, aligned ArrayBuffer
  if (entry.width === 1) return copy;
  if (entry.width === 2) return new Uint16Array(copy.buffer);
  if (entry.width === 4) return new Uint32Array(copy.buffer);
  if (entry.width === 8) return copy; // 64-bit inputs: only ever used as raw storage bytes
  throw new Error(`unexpected width ${entry.width} for ${entry.file}`);
}

function load32(entry: TableFile | undefined, what: string): Uint32Array {
  const table = load(entry, what);
  assert.ok(table instanceof Uint32Array, `${what} must have 4-byte entries`);
  return table;
}

function hex(n: number, digits = 8): string {
  return `0x${(n >>> 0).toString(16).padStart(digits, "0")}`;
}

function isNaNBits(bits: number): boolean {
  return (bits & 0x7fffffff) > 0x7f800000;
}

/** Storage bytes holding the given element codes, packed the documented way (independent of the codec modules). */
function pack(dtype: Format, codes: ArrayLike<number>): Uint8Array {
  const bits = BITS[dtype];
  const out = new Uint8Array(Math.ceil((codes.length * bits) / 8));
  for (let i = 0; i < codes.length; i++) {
    for (let b = 0; b < bits; b++) {
      if ((codes[i]! >>> b) & 1) {
        const pos = i * bits + b; // little-endian bit stream: element i at bits [i*bits, (i+1)*bits)
        out[pos >>> 3]! |= 1 << (pos & 7);
      }
    }
  }
  return out;
}

/** Element codes from storage bytes, the inverse of `pack`. */
function unpack(dtype: Format, bytes: Uint8Array, count: number): number[] {
  const bits = BITS[dtype];
  const codes: number[] = [];
  for (let i = 0; i < count; i++) {
    let code = 0;
    for (let b = 0; b < bits; b++) {
      const pos = i * bits + b;
      code |= ((bytes[pos >>> 3]! >>> (pos & 7)) & 1) << b;
    }
    codes.push(code >>> 0);
  }
  return codes;
}

function bitsOf(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}

const nativeF16 = typeof (globalThis as { Float16Array?: unknown }).Float16Array === "function";

describe("codec fixtures", () => {
  test("manifest lists every format and every file is present with its recorded size", () => {
    for (const dtype of FORMATS) {
      const table = load32(manifest.decode[dtype], `decode_${dtype}`);
      assert.equal(table.length, 1 << BITS[dtype], `decode_${dtype} covers every bit pattern`);
    }
    for (const [name, set] of Object.entries(manifest.encode)) {
      const inputs = load(set.inputs, `${name} inputs`);
      for (const [dtype, entry] of Object.entries(set.outputs)) {
        assert.equal(load(entry, `${name} ${dtype}`).length, inputs.length);
      }
    }
    for (const dtype of FORMATS) {
      for (const set of ["special", `edge_${dtype}`, "narrow"]) {
        assert.ok(manifest.encode[set]?.outputs[dtype], `encode set ${set} has ${dtype}`);
      }
    }
    assert.ok((manifest.encode.wide?.inputs.count ?? 0) >= 100000, "wide random set present");
    // torch's scalar fallback encodes BF16 NaN differently (0x7FC0); the codecs follow its AVX2/AVX-512 kernels.
    assert.match(manifest.cpuCapability, /^AVX/, "tables must come from torch's vectorized CPU kernels");
  });
});

describe("toFloat32 decodes every bit pattern exactly as the reference", () => {
  for (const dtype of FORMATS) {
    test(dtype, () => {
      const expected = load32(manifest.decode[dtype], `decode_${dtype}`);
      const codes = Array.from({ length: expected.length }, (_, i) => i);
      const storage = pack(dtype, codes);
      for (const offset of [0, 1]) {
        // offset 1: the same bytes at an odd address.
        const bytes = new Uint8Array(storage.length + offset).subarray(offset);
        bytes.set(storage);
        const got = bitsOf(toFloat32(dtype, bytes));
        assert.equal(got.length, expected.length);
        let mismatches = 0;
        const examples: string[] = [];
        for (let c = 0; c < expected.length; c++) {
          const e = expected[c]!;
          const g = got[c]!;
          // NaN bits are compared exactly too (sign and payload are kept as the reference produces them), except on
          // the engine's native Float16Array path, where only NaN-ness and sign are promised.
          const same = dtype === "F16" && nativeF16 && isNaNBits(e) ? isNaNBits(g) && e >>> 31 === g >>> 31 : e === g;
          if (!same) {
            mismatches++;
            if (examples.length < 5) examples.push(`${hex(c, 4)}: got ${hex(g)}, want ${hex(e)}`);
          }
        }
        assert.equal(mismatches, 0, `${dtype} offset ${offset}: ${examples.join("; ")}`);
      }
    });
  }

  test("F16 table path (no native Float16Array) is bit-exact, NaN payloads included", async () => {
    const { decodeF16 } = await import("../src/codecs/half.js");
    const expected = load32(manifest.decode.F16, "decode_F16");
    const storage = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
    const out = new Float32Array(65536);
    decodeF16(storage, 65536, out, false);
    assert.deepEqual(bitsOf(out), expected);
    const odd = new Uint8Array(storage.length + 1).subarray(1);
    odd.set(storage);
    decodeF16(odd, 65536, out, false);
    assert.deepEqual(bitsOf(out), expected);
  });
});

describe("fromFloat32 encodes every sample exactly as the reference", () => {
  for (const [name, set] of Object.entries(manifest.encode)) {
    const inputs = load32(set.inputs, `${name} inputs`);
    const values = new Float32Array(inputs.buffer, inputs.byteOffset, inputs.length);
    for (const [dtypeName, entry] of Object.entries(set.outputs)) {
      const dtype = dtypeName as Format;
      test(`${name}: ${dtype} (${inputs.length} inputs)`, () => {
        const expected = load(entry, `${name} ${dtype}`);
        const encoded = fromFloat32(dtype, values);
        assert.equal(encoded.length, Math.ceil((inputs.length * BITS[dtype]) / 8));
        const got =
          BITS[dtype] === 16
            ? new Uint16Array(encoded.buffer, encoded.byteOffset, inputs.length)
            : BITS[dtype] === 8
              ? encoded
              : unpack(dtype, encoded, inputs.length);
        let mismatches = 0;
        const examples: string[] = [];
        for (let i = 0; i < inputs.length; i++) {
          if (got[i] !== expected[i]) {
            mismatches++;
            if (examples.length < 5) {
              examples.push(`${hex(inputs[i]!)} (${values[i]}): got ${hex(got[i]!, 2)}, want ${hex(expected[i]!, 2)}`);
            }
          }
        }
        assert.equal(mismatches, 0, `${mismatches} mismatches, e.g. ${examples.join("; ")}`);
      });
    }
  }
});

describe("toFloat32 of plain numeric dtypes rounds once to nearest float32, as torch", () => {
  for (const [dtypeName, entry] of Object.entries(manifest.numeric)) {
    const dtype = dtypeName as Dtype;
    test(dtype, () => {
      const inputs = load(entry.inputs, `numeric ${dtype} inputs`);
      const expected = load32(entry.outputs, `numeric ${dtype}`);
      const storage = new Uint8Array(inputs.buffer, inputs.byteOffset, inputs.byteLength);
      for (const offset of [0, 3]) {
        const bytes = new Uint8Array(storage.length + offset).subarray(offset);
        bytes.set(storage);
        const got = bitsOf(toFloat32(dtype, bytes));
        assert.equal(got.length, expected.length);
        for (let i = 0; i < expected.length; i++) {
          const e = expected[i]!;
          const g = got[i]!;
          // NaN: F64 NaNs stay NaN with their sign; the payload goes through JS numbers and is not promised.
          if (isNaNBits(e)) assert.ok(isNaNBits(g) && e >>> 31 === g >>> 31, `${dtype}[${i}] NaN`);
          else if (g !== e) assert.fail(`${dtype}[${i}] offset ${offset}: got ${hex(g)}, want ${hex(e)}`);
        }
      }
    });
  }

  test("small integers, BOOL and F32", () => {
    assert.deepEqual(Array.from(toFloat32("U8", new Uint8Array([0, 1, 255]))), [0, 1, 255]);
    assert.deepEqual(Array.from(toFloat32("I8", new Uint8Array([0, 1, 255, 128]))), [0, 1, -1, -128]);
    assert.deepEqual(Array.from(toFloat32("BOOL", new Uint8Array([0, 1, 2, 255]))), [0, 1, 1, 1]);
    const i16 = new Uint8Array(new Int16Array([0, -1, 32767, -32768]).buffer);
    assert.deepEqual(Array.from(toFloat32("I16", i16)), [0, -1, 32767, -32768]);
    const u16 = new Uint8Array(new Uint16Array([0, 65535, 1234]).buffer);
    assert.deepEqual(Array.from(toFloat32("U16", u16)), [0, 65535, 1234]);
    for (const [dtype, bytes] of [
      ["I16", i16],
      ["U16", u16],
    ] as const) {
      const odd = new Uint8Array(bytes.length + 1).subarray(1);
      odd.set(bytes);
      assert.deepEqual(toFloat32(dtype, odd), toFloat32(dtype, bytes));
    }
    // F32 is copied bit for bit, signaling NaN payloads included, from any offset.
    const raw = new Uint32Array([0x7f800001, 0xffc12345, 0x3f800000, 0x80000000, 1]);
    const rawBytes = new Uint8Array(raw.buffer);
    assert.deepEqual(bitsOf(toFloat32("F32", rawBytes)), raw);
    const odd = new Uint8Array(rawBytes.length + 1).subarray(1);
    odd.set(rawBytes);
    assert.deepEqual(bitsOf(toFloat32("F32", odd)), raw);
  });
});

describe("packing", () => {
  test("F4: element 0 in the low nibble (torch float4_e2m1fn_x2)", () => {
    // 0.5 = code 1, 1.0 = code 2, -6 = code 0xF, 3 = code 5
    assert.deepEqual(Array.from(fromFloat32("F4", [0.5, 1, -6, 3])), [0x21, 0x5f]);
    assert.deepEqual(Array.from(toFloat32("F4", new Uint8Array([0x21, 0x5f]))), [0.5, 1, -6, 3]);
    // Odd count: the last high nibble is unused, written as 0 and ignored when reading.
    assert.deepEqual(Array.from(fromFloat32("F4", [0.5, 1, -6])), [0x21, 0x0f]);
    assert.deepEqual(Array.from(toFloat32("F4", new Uint8Array([0x21, 0xaf]), { count: 3 })), [0.5, 1, -6]);
  });

  test("F6: little-endian bit stream, element i at bits [6i, 6i+6)", () => {
    // F6_E2M3 codes: 1.0 = 0x08, 7.5 = 0x1F, -0.125 = 0x21, 2.0 = 0x10
    const codes = [0x08, 0x1f, 0x21, 0x10];
    const bytes = fromFloat32("F6_E2M3", [1, 7.5, -0.125, 2]);
    const expected = [
      codes[0]! | ((codes[1]! & 0x03) << 6),
      (codes[1]! >>> 2) | ((codes[2]! & 0x0f) << 4),
      (codes[2]! >>> 4) | (codes[3]! << 2),
    ];
    assert.deepEqual(Array.from(bytes), expected);
    assert.deepEqual(Array.from(bytes), Array.from(pack("F6_E2M3", codes)));
    assert.deepEqual(Array.from(toFloat32("F6_E2M3", bytes)), [1, 7.5, -0.125, 2]);
    // Partial groups.
    for (let n = 0; n <= 9; n++) {
      const source = [1, 7, -0.125, 2, 0.5, -3, 6, 0.25, -1.5].slice(0, n);
      const values = source;
      const packed = fromFloat32("F6_E2M3", values);
      assert.equal(packed.length, Math.ceil((n * 6) / 8));
      assert.deepEqual(Array.from(toFloat32("F6_E2M3", packed, { count: n })), source);
      const e3m2 = fromFloat32("F6_E3M2", values);
      assert.deepEqual(Array.from(toFloat32("F6_E3M2", e3m2, { count: n })), source);
    }
  });
});

describe("API contract", () => {
  test("errors", () => {
    const code = (f: () => unknown): string => {
      try {
        f();
      } catch (error) {
        assert.ok(error instanceof SafetensorError, String(error));
        return error.code;
      }
      return "no error";
    };
    assert.equal(
      code(() => toFloat32("C64", new Uint8Array(8))),
      "UnsupportedDtype",
    );
    assert.equal(
      code(() => fromFloat32("I32", [1])),
      "UnsupportedDtype",
    );
    assert.equal(
      code(() => fromFloat32("C64", [1])),
      "UnsupportedDtype",
    );
    assert.equal(
      code(() => toFloat32("F16", new Uint8Array(3))),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F64", new Uint8Array(12))),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F6_E2M3", new Uint8Array(4))),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F4", new Uint8Array(2), { count: 5 })),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F4", new Uint8Array(2), { count: 2 })),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F16", new Uint8Array(4), { count: 1 })),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F16", new Uint8Array(4), { count: -2 })),
      "InvalidTensor",
    );
    assert.equal(
      code(() => toFloat32("F16", new Uint8Array(4), new Float32Array(1))),
      "InvalidTensor",
    );
    assert.equal(
      code(() => fromFloat32("F16", [1, 2], { out: new Uint8Array(3) })),
      "InvalidTensor",
    );
    assert.match(
      (() => {
        try {
          toFloat32("F6_E3M2", new Uint8Array(4));
        } catch (error) {
          return (error as Error).message;
        }
        return "";
      })(),
      /4 bytes is not a whole number of F6_E3M2 elements.*count/,
    );
  });

  test("counts: F4 2 per byte and F6 4 per 3 bytes by default; count overrides", () => {
    assert.equal(toFloat32("F4", new Uint8Array(5)).length, 10);
    assert.equal(toFloat32("F6_E2M3", new Uint8Array(6)).length, 8);
    assert.equal(toFloat32("F6_E2M3", new Uint8Array(4), { count: 5 }).length, 5);
    assert.equal(toFloat32("F6_E2M3", new Uint8Array(5), { count: 6 }).length, 6);
    assert.equal(toFloat32("BF16", new Uint8Array(0)).length, 0);
    assert.equal(fromFloat32("F6_E3M2", []).length, 0);
  });

  test("out: filled in place, shorthand and options forms, larger buffers give a prefix view", () => {
    const bytes = fromFloat32("BF16", [1, 2, 3]);
    const out = new Float32Array(3);
    assert.equal(toFloat32("BF16", bytes, out), out);
    assert.deepEqual(Array.from(out), [1, 2, 3]);
    const big = new Float32Array(5).fill(9);
    const view = toFloat32("BF16", bytes, { out: big });
    assert.equal(view.buffer, big.buffer);
    assert.deepEqual(Array.from(big), [1, 2, 3, 9, 9]);
    const outBytes = new Uint8Array(10).fill(7);
    const enc = fromFloat32("F16", [1, -2], { out: outBytes.subarray(1) });
    assert.deepEqual(Array.from(enc), [0x00, 0x3c, 0x00, 0xc0]);
    assert.deepEqual(Array.from(outBytes.subarray(0, 6)), [7, 0x00, 0x3c, 0x00, 0xc0, 7]);
    // F4 into a dirty buffer: the packed bytes are cleared first.
    assert.deepEqual(Array.from(fromFloat32("F4", [1], { out: new Uint8Array([0xff]) })), [0x02]);
  });

  test("F32 and F64 encode exactly; number arrays are rounded to float32 first", () => {
    const f32 = new Float32Array(new Uint32Array([0x7f800001, 0x3f800001, 0x80000000]).buffer);
    assert.deepEqual(
      new Uint32Array(fromFloat32("F32", f32).slice().buffer),
      new Uint32Array([0x7f800001, 0x3f800001, 0x80000000]),
    );
    const f64 = fromFloat32("F64", [0.1, -0]);
    const back = new Float64Array(f64.slice().buffer);
    assert.equal(back[0], Math.fround(0.1));
    assert.ok(Object.is(back[1], -0));
    assert.deepEqual(Array.from(fromFloat32("F16", [65519.99])), [0xff, 0x7b]); // fround(65519.99) < 65520
  });

  test("canDecode / canEncode", () => {
    for (const dtype of DTYPES) {
      assert.equal(canDecode(dtype), dtype !== "C64");
      assert.equal(canEncode(dtype), dtype.startsWith("F") || dtype === "BF16");
    }
  });
});

describe("properties", () => {
  for (const dtype of FORMATS) {
    const bits = BITS[dtype];
    test(`${dtype}: decode(encode(decode(x))) == decode(x), encode(decode(c)) == c for non-NaN codes`, () => {
      const codeArb = fc.integer({ min: 0, max: (1 << bits) - 1 });
      fc.assert(
        fc.property(fc.array(codeArb, { maxLength: 40 }), (codes) => {
          const storage = pack(dtype, codes);
          const decoded = toFloat32(dtype, storage, { count: codes.length });
          const reencoded = fromFloat32(dtype, decoded);
          const again = toFloat32(dtype, reencoded, { count: codes.length });
          const a = bitsOf(decoded);
          const b = bitsOf(again);
          const back = unpack(dtype, reencoded, codes.length);
          for (let i = 0; i < codes.length; i++) {
            if (isNaNBits(a[i]!)) {
              assert.ok(isNaNBits(b[i]!), `${dtype} code ${hex(codes[i]!, 2)} NaN stays NaN`);
            } else {
              assert.equal(b[i], a[i], `${dtype} code ${hex(codes[i]!, 2)}`);
              assert.equal(back[i], codes[i], `${dtype} code ${hex(codes[i]!, 2)} round-trips`);
            }
          }
        }),
        { numRuns: 200 },
      );
    });

    test(`${dtype}: encoding is monotonic in the value and symmetric in the sign`, () => {
      fc.assert(
        fc.property(fc.float({ noNaN: true }), fc.float({ noNaN: true }), (x, y) => {
          // F8_E8M0 is unsigned and drops the sign: monotonic in |x|.
          if (dtype === "F8_E8M0") [x, y] = [Math.abs(x), Math.abs(y)];
          const [lo, hi] = x <= y ? [x, y] : [y, x];
          const d = toFloat32(dtype, fromFloat32(dtype, [lo, hi, -hi]), { count: 3 });
          assert.ok(!(d[0]! > d[1]!), `${dtype}: enc(${lo}) = ${d[0]} > enc(${hi}) = ${d[1]}`);
          if (dtype === "F8_E8M0") return; // unsigned: the sign is dropped
          if (Number.isNaN(d[1]!)) assert.ok(Number.isNaN(d[2]!));
          else assert.equal(Math.abs(d[2]!), Math.abs(d[1]!));
        }),
        { numRuns: 300 },
      );
    });
  }

  test("decoding at any byte offset equals decoding aligned storage", () => {
    const dtypes = DTYPES.filter((d) => d !== "C64");
    fc.assert(
      fc.property(
        fc.constantFrom(...dtypes),
        fc.uint8Array({ maxLength: 48 }),
        fc.integer({ min: 1, max: 7 }),
        (dtype, raw, offset) => {
          const bits = dtype === "F4" ? 8 : dtype === "F6_E2M3" || dtype === "F6_E3M2" ? 24 : dtypeOf(dtype).bits;
          const usable = raw.subarray(0, raw.length - (raw.length % (bits / 8)));
          const aligned = new Uint8Array(usable);
          const shifted = new Uint8Array(usable.length + offset).subarray(offset);
          shifted.set(usable);
          const a = bitsOf(toFloat32(dtype, aligned));
          const b = bitsOf(toFloat32(dtype, shifted));
          assert.equal(a.length, b.length);
          for (let i = 0; i < a.length; i++) {
            if (isNaNBits(a[i]!)) assert.ok(isNaNBits(b[i]!));
            else assert.equal(b[i], a[i]);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
