/**
 * Property tests (fast-check, fixed seeds):
 *  - serialize → deserialize round trips random tensor maps (any Unicode names incl. `__proto__`, every dtype,
 *    scalars and zero-size dims, metadata) to identical tensors and metadata, and re-serializes to the same bytes;
 *  - mutated valid files (bit flips, truncation, insertion, deletion, header-length edits, JSON token edits) and
 *    arbitrary headers only ever yield a SafetensorError with a format-group code — never another exception, never a
 *    hang. Those run in a worker thread so a hang can be cut off and reported with the input that caused it; each
 *    parse is also time-boxed.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import fc from "fast-check";
import {
  DTYPES,
  type Dtype,
  deserialize,
  dtypeOf,
  HEADER_ERROR_CODES,
  isSafetensorError,
  MemorySource,
  type SafetensorErrorCode,
  SafetensorsFile,
  serialize,
} from "../src/index.js";
import { moduleUrl, runsCompiled } from "./helpers/compiled.js";
import { fill } from "./helpers/fill.js";

const FORMAT_CODES: ReadonlySet<SafetensorErrorCode> = new Set<SafetensorErrorCode>(HEADER_ERROR_CODES);

const bitsOf = (dtype: Dtype) => dtypeOf(dtype).bits;

interface InputTensor {
  dtype: Dtype;
  shape: number[];
  data: Uint8Array;
}

const nameArb = fc.oneof(
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 12 }) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength: 8 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "__proto__",
      "constructor",
      "toString",
      "",
      "\u0000",
      '"',
      "\\",
      "\x7f",
      "\uE000",
      "\uFFFF",
      "\u{10FFFF}",
      "\u{1F600}",
      "__metadata",
    ),
  },
);

const tensorArb: fc.Arbitrary<InputTensor> = fc
  .record({
    dtype: fc.constantFrom(...DTYPES),
    shape: fc.array(
      fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 1, max: 4 }) }, { weight: 1, arbitrary: fc.constant(0) }),
      {
        maxLength: 4,
      },
    ),
    seed: fc.integer(),
  })
  .map(({ dtype, shape, seed }) => {
    let elements = shape.reduce((a, b) => a * b, 1);
    if ((elements * bitsOf(dtype)) % 8 !== 0) {
      shape = [...shape, 4];
      elements *= 4;
    }
    return { dtype, shape, data: fill((elements * bitsOf(dtype)) / 8, seed) };
  });

const tensorMapArb = fc
  .uniqueArray(fc.tuple(nameArb, tensorArb), {
    selector: ([name]) => name,
    maxLength: 8,
  })
  .map((entries) => entries.filter(([name]) => name !== "__metadata__"));

const metadataArb = fc.option(
  fc.uniqueArray(fc.tuple(fc.string({ unit: "binary", maxLength: 8 }), fc.string({ unit: "binary", maxLength: 16 })), {
    selector: ([key]) => key,
    maxLength: 5,
  }),
  { nil: null },
);

// ---------------------------------------------------------------------------------------------------------------
// Worker side: parse untrusted inputs, report failures. A SharedArrayBuffer holds the input being parsed, so the
// main thread can report it if the worker hangs.

interface WorkerJob {
  property: "mutations" | "arbitrary";
  seed: number;
  numRuns: number;
  current: SharedArrayBuffer;
}

interface WorkerResult {
  ok: boolean;
  message?: string;
  parsed: number;
  accepted: number;
  codes: Record<string, number>;
  slowestMs: number;
}

const PARSE_BUDGET_MS = 1000;

function parseChecked(file: Uint8Array, current: Uint8Array, stats: WorkerResult): void {
  const view = new DataView(current.buffer);
  const n = Math.min(file.length, current.length - 4);
  view.setUint32(0, n, true);
  current.set(file.subarray(0, n), 4);
  const started = performance.now();
  let code: string | null = null;
  let parsed: ReturnType<typeof deserialize> | null = null;
  try {
    parsed = deserialize(file);
  } catch (error) {
    if (!isSafetensorError(error)) throw new Error(`not a SafetensorError: ${(error as Error)?.stack ?? error}`);
    if (!FORMAT_CODES.has(error.code)) throw new Error(`unexpected code ${error.code}: ${error.message}`);
    code = error.code;
  }
  // The lazy reader over the same bytes reaches the same verdict.
  let lazyCode: string | null = null;
  try {
    SafetensorsFile.open(new MemorySource(file)).close();
  } catch (error) {
    if (!isSafetensorError(error)) throw new Error(`lazy reader: not a SafetensorError: ${error}`);
    lazyCode = error.code;
  }
  if (lazyCode !== code) throw new Error(`deserialize gave ${code}, SafetensorsFile.open gave ${lazyCode}`);
  const elapsed = performance.now() - started;
  stats.slowestMs = Math.max(stats.slowestMs, elapsed);
  if (elapsed > PARSE_BUDGET_MS) throw new Error(`parse took ${elapsed.toFixed(1)} ms (budget ${PARSE_BUDGET_MS})`);
  stats.parsed++;
  if (code) {
    stats.codes[code] = (stats.codes[code] ?? 0) + 1;
    return;
  }
  stats.accepted++;
  // An accepted file: tensors tile the data region, and (when representable) it re-serializes to equal tensors.
  const { header, tensors, metadata } = parsed!;
  let at = 0;
  for (const info of header.tensors.values()) {
    if (info.dataOffsets[0] !== at) throw new Error("accepted file with a gap");
    at = info.dataOffsets[1];
  }
  if (header.dataStart + at !== file.length) throw new Error("accepted file not covered exactly");
  const representable =
    [...header.tensors.values()].every((info) => !info.exactShape) && !(tensors.size === 0 && metadata?.size === 0);
  if (representable) {
    const again = deserialize(serialize(tensors, metadata));
    if (again.tensors.size !== tensors.size) throw new Error("re-serialization lost tensors");
    for (const [name, tensor] of tensors) {
      const other = again.tensors.get(name);
      if (!other || other.dtype !== tensor.dtype || Buffer.compare(other.data, tensor.data) !== 0) {
        throw new Error(`re-serialization changed ${JSON.stringify(name)}`);
      }
    }
  }
}

const TOKENS = [
  "{",
  "}",
  "[",
  "]",
  ":",
  ",",
  '""',
  '"__metadata__"',
  '"dtype"',
  '"shape"',
  '"data_offsets"',
  '"F32"',
  '"F4"',
  '"F6_E2M3"',
  '"BOOL"',
  '"E8M0"',
  '"f32"',
  "null",
  "true",
  "0",
  "1",
  "-1",
  "-0",
  "4.0",
  "1e400",
  "18446744073709551615",
  "18446744073709551616",
  "9007199254740993",
  "1099511627776",
  '"\\ud800"',
  '"\\u0000"',
  " ",
  "\t",
  "\n",
  "\f",
  "\u00a0",
  "\ufeff",
  "[0,0]",
  "{}",
  "[]",
  "[[[[[[[[[[[[[[[[",
  '"a"',
  '{"F32":null}',
  '["U8",[0],[0,0]]',
];

const TOKEN_RE = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[{}[\]:,]|\s+|true|false|null|./gsu;

type Mutation =
  | { kind: "flip"; pos: number; bit: number }
  | { kind: "truncate"; len: number }
  | { kind: "insert"; pos: number; bytes: Uint8Array; fixN: boolean }
  | { kind: "delete"; pos: number; count: number; fixN: boolean }
  | { kind: "setN"; value: bigint }
  | { kind: "deltaN"; delta: number }
  | { kind: "token"; index: number; token: string; fixN: boolean }
  | { kind: "repeatToken"; index: number; times: number; fixN: boolean }
  | { kind: "swap"; a: number; b: number }
  | { kind: "number"; index: number; value: string }
  | { kind: "dtype"; index: number; dtype: string }
  | { kind: "duplicate"; index: number; metadata: boolean };

const numberArb = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 80 }).map(String) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "1099511627776",
      "9007199254740993",
      "18446744073709551615",
      "18446744073709551616",
      "2305843009213693952",
      "-1",
      "1.0",
    ),
  },
);

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("number" as const), index: fc.nat(), value: numberArb }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("dtype" as const),
      index: fc.nat(),
      dtype: fc.constantFrom(...DTYPES, "E8M0", "f32", "F8_E4M3FN", ""),
    }),
  },
  fc.record({ kind: fc.constant("duplicate" as const), index: fc.nat(), metadata: fc.boolean() }),
  fc.record({ kind: fc.constant("flip" as const), pos: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant("truncate" as const), len: fc.nat() }),
  fc.record({
    kind: fc.constant("insert" as const),
    pos: fc.nat(),
    bytes: fc.uint8Array({ minLength: 1, maxLength: 8 }),
    fixN: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("delete" as const),
    pos: fc.nat(),
    count: fc.integer({ min: 1, max: 8 }),
    fixN: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("setN" as const),
    value: fc.oneof(
      fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
      fc.constantFrom(0n, 1n, 7n, 8n, 100_000_000n, 100_000_001n, 2n ** 63n, 2n ** 64n - 1n),
    ),
  }),
  fc.record({ kind: fc.constant("deltaN" as const), delta: fc.integer({ min: -9, max: 9 }) }),
  fc.record({
    kind: fc.constant("token" as const),
    index: fc.nat(),
    token: fc.constantFrom(...TOKENS),
    fixN: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant("repeatToken" as const),
    index: fc.nat(),
    times: fc.integer({ min: 2, max: 3 }),
    fixN: fc.boolean(),
  }),
  fc.record({ kind: fc.constant("swap" as const), a: fc.nat(), b: fc.nat() }),
);

function readN(file: Uint8Array): bigint {
  return file.length >= 8 ? new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true) : 0n;
}

function writeN(file: Uint8Array, n: bigint): void {
  if (file.length >= 8) new DataView(file.buffer, file.byteOffset, 8).setBigUint64(0, BigInt.asUintN(64, n), true);
}

/** Apply one mutation; positions wrap around the current length. */
function mutate(file: Uint8Array, m: Mutation): Uint8Array {
  const len = file.length;
  const n = readN(file);
  const inHeader = (pos: number) => pos >= 8 && BigInt(pos) < 8n + n;
  switch (m.kind) {
    case "flip": {
      if (len === 0) return file;
      const out = file.slice();
      out[m.pos % len]! ^= 1 << m.bit;
      return out;
    }
    case "truncate":
      return file.slice(0, len === 0 ? 0 : m.len % len);
    case "insert": {
      const pos = m.pos % (len + 1);
      const out = new Uint8Array(len + m.bytes.length);
      out.set(file.subarray(0, pos));
      out.set(m.bytes, pos);
      out.set(file.subarray(pos), pos + m.bytes.length);
      if (m.fixN && inHeader(pos)) writeN(out, n + BigInt(m.bytes.length));
      return out;
    }
    case "delete": {
      if (len === 0) return file;
      const pos = m.pos % len;
      const count = Math.min(m.count, len - pos);
      const out = new Uint8Array(len - count);
      out.set(file.subarray(0, pos));
      out.set(file.subarray(pos + count), pos);
      if (m.fixN && inHeader(pos) && pos >= 8) writeN(out, n - BigInt(count));
      return out;
    }
    case "setN": {
      const out = file.slice();
      writeN(out, m.value);
      return out;
    }
    case "deltaN": {
      const out = file.slice();
      writeN(out, n + BigInt(m.delta));
      return out;
    }
    case "token":
    case "repeatToken":
    case "number":
    case "dtype": {
      if (len < 8 || 8n + n > BigInt(len)) return file;
      const header = Buffer.from(file.subarray(8, 8 + Number(n))).toString("utf8");
      const tokens = header.match(TOKEN_RE) ?? [];
      if (tokens.length === 0) return file;
      if (m.kind === "number" || m.kind === "dtype") {
        const wanted = m.kind === "number" ? /^-?\d/ : /^"[A-Z0-9_]+"$/;
        const candidates = tokens.flatMap((token, i) => (wanted.test(token) ? [i] : []));
        if (candidates.length === 0) return file;
        const i = candidates[m.index % candidates.length]!;
        tokens[i] = m.kind === "number" ? m.value : JSON.stringify(m.dtype);
      } else {
        const i = m.index % tokens.length;
        tokens[i] = m.kind === "token" ? m.token : tokens[i]!.repeat(m.times);
      }
      const text = new TextEncoder().encode(tokens.join(""));
      const out = new Uint8Array(8 + text.length + (len - 8 - Number(n)));
      out.set(file.subarray(0, 8));
      out.set(text, 8);
      out.set(file.subarray(8 + Number(n)), 8 + text.length);
      if (m.kind === "number" || m.kind === "dtype" || m.fixN) writeN(out, BigInt(text.length));
      return out;
    }
    case "duplicate": {
      // Repeat one tensor entry (or metadata key) verbatim: only a duplicate-key check can tell.
      if (len < 8 || 8n + n > BigInt(len)) return file;
      const text = Buffer.from(file.subarray(8, 8 + Number(n))).toString("utf8");
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(text);
      } catch {
        return file;
      }
      const meta = parsed.__metadata__ as Record<string, string> | undefined;
      let edited: string;
      if (m.metadata && meta && Object.keys(meta).length > 0) {
        const keys = Object.keys(meta);
        const key = keys[m.index % keys.length]!;
        edited = text.replace(
          '"__metadata__":{',
          `"__metadata__":{${JSON.stringify(key)}:${JSON.stringify(meta[key])},`,
        );
      } else {
        const keys = Object.keys(parsed).filter((k) => k !== "__metadata__");
        if (keys.length === 0) return file;
        const key = keys[m.index % keys.length]!;
        edited = `{${JSON.stringify(key)}:${JSON.stringify(parsed[key])},${text.trimStart().slice(1)}`;
      }
      const bytes = new TextEncoder().encode(edited);
      const out = new Uint8Array(8 + bytes.length + (len - 8 - Number(n)));
      out.set(bytes, 8);
      out.set(file.subarray(8 + Number(n)), 8 + bytes.length);
      writeN(out, BigInt(bytes.length));
      return out;
    }
    case "swap": {
      if (len === 0) return file;
      const out = file.slice();
      const a = m.a % len;
      const b = m.b % len;
      [out[a], out[b]] = [out[b]!, out[a]!];
      return out;
    }
  }
}

function fixedBases(): Uint8Array[] {
  const u8 = (...v: number[]) => new Uint8Array(v);
  return [
    serialize({}),
    serialize({ a: { dtype: "F32", shape: [2], data: new Float32Array([1, 2]) } }),
    serialize(
      new Map([
        ["__proto__", { dtype: "U8", shape: [1], data: u8(1) }],
        ["w", { dtype: "F4", shape: [2, 2], data: u8(1, 2) }],
        ["z", { dtype: "F64", shape: [0, 3], data: u8() }],
        ["s", { dtype: "BF16", shape: [], data: u8(1, 2) }],
        ["x", { dtype: "F6_E3M2", shape: [4], data: u8(1, 2, 3) }],
      ]),
      { format: "pt", b: "\u{1F600}" },
    ),
    serialize({ '\u00e9\u{1F600}"\\': { dtype: "I64", shape: [1, 1], data: new BigInt64Array([-1n]) } }, { "": "" }),
  ];
}

function runWorker(job: WorkerJob): WorkerResult {
  const current = new Uint8Array(job.current);
  const stats: WorkerResult = { ok: true, parsed: 0, accepted: 0, codes: {}, slowestMs: 0 };
  const bases = fixedBases();
  const baseArb = fc.oneof(
    { weight: 2, arbitrary: fc.constantFrom(...bases) },
    {
      weight: 3,
      arbitrary: fc.tuple(tensorMapArb, metadataArb).map(([entries, metadata]) => {
        try {
          return serialize(entries, metadata === null ? null : new Map(metadata));
        } catch {
          return serialize(entries);
        }
      }),
    },
  );
  const params = { seed: job.seed, numRuns: job.numRuns, endOnFailure: false };
  const check = () =>
    job.property === "mutations"
      ? fc.assert(
          fc.property(baseArb, fc.array(mutationArb, { minLength: 1, maxLength: 4 }), (base, mutations) => {
            let file = base;
            for (const m of mutations) file = mutate(file, m);
            parseChecked(file, current, stats);
          }),
          params,
        )
      : fc.assert(
          fc.property(
            fc.oneof(
              fc.string({ unit: "binary", maxLength: 64 }),
              fc.json({ maxDepth: 4 }),
              fc.stringMatching(/^[ \t\n\r{}[\]:,"0-9a-zA-Z_\\-]{0,40}$/),
              fc.string({ unit: fc.constantFrom(...TOKENS), maxLength: 24 }),
            ),
            fc.integer({ min: 0, max: 40 }),
            fc.boolean(),
            (text, dataLength, exactN) => {
              const header = new TextEncoder().encode(text);
              const file = new Uint8Array(8 + header.length + dataLength);
              writeN(file, BigInt(exactN ? header.length : header.length + (dataLength % 7)));
              file.set(header, 8);
              parseChecked(file, current, stats);
            },
          ),
          params,
        );
  try {
    check();
  } catch (error) {
    stats.ok = false;
    stats.message = String((error as Error).message ?? error);
  }
  return stats;
}

if (!isMainThread && (workerData as { fuzzWorker?: boolean } | null)?.fuzzWorker) {
  parentPort!.postMessage(runWorker((workerData as { job: WorkerJob }).job));
}

/** Run a parse property in a worker; cut it off after `timeoutMs` and report the input it was stuck on. */
async function inWorker(property: WorkerJob["property"], seed: number, numRuns: number, timeoutMs: number) {
  const current = new SharedArrayBuffer(1 << 16);
  const job: WorkerJob = { property, seed, numRuns, current };
  const self = JSON.stringify(moduleUrl(fileURLToPath(import.meta.url)));
  // Under tsx, the worker registers tsx's loader first (Node 20's workers do not inherit --import hooks).
  const boot = runsCompiled
    ? `import(${self});`
    : `import("tsx/esm/api").then(({ register }) => { register(); return import(${self}); });`;
  const worker = new Worker(boot, { eval: true, workerData: { fuzzWorker: true, job } });
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise<WorkerResult>((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
      timer = setTimeout(() => {
        const view = new DataView(current);
        const n = view.getUint32(0, true);
        const hex = Buffer.from(new Uint8Array(current, 4, n)).toString("hex");
        reject(new Error(`${property}: no answer after ${timeoutMs} ms (a hang?) while parsing hex ${hex}`));
      }, timeoutMs);
    });
  } finally {
    clearTimeout(timer);
    await worker.terminate();
  }
}

if (isMainThread) {
  describe("round trip", () => {
    test("serialize → deserialize gives identical tensors and metadata (fixed seed)", () => {
      fc.assert(
        fc.property(tensorMapArb, metadataArb, (entries, metadataEntries) => {
          const metadata = metadataEntries === null ? null : new Map(metadataEntries);
          if (entries.length === 0 && metadata?.size === 0) {
            assert.throws(() => serialize(entries, metadata), { code: "InvalidMetadata" });
            return;
          }
          const file = serialize(entries, metadata);
          const parsed = deserialize(file);
          assert.equal(parsed.tensors.size, entries.length);
          for (const [name, input] of entries) {
            const out = parsed.tensors.get(name);
            assert.ok(out, `tensor ${JSON.stringify(name)}`);
            assert.equal(out.dtype, input.dtype);
            assert.deepEqual([...out.shape], input.shape);
            assert.equal(Buffer.compare(out.data, input.data), 0);
          }
          if (metadata === null) assert.equal(parsed.metadata, null);
          else assert.deepEqual(new Map(parsed.metadata!), metadata);
          // Re-serializing what we read gives the same bytes, whatever the input order.
          assert.equal(Buffer.compare(serialize(parsed.tensors, parsed.metadata), file), 0);
          assert.equal(Buffer.compare(serialize(entries.slice().reverse(), metadata), file), 0);
          // Exact overflow mode agrees on valid files.
          assert.equal(deserialize(file, { overflowCheck: "exact" }).tensors.size, entries.length);
        }),
        { seed: 0x5afe, numRuns: 400 },
      );
    });
  });

  describe("malformed input never escapes as another exception, never hangs", () => {
    test("mutations of valid files (bit flips, truncation, insertion, header length, JSON tokens)", async () => {
      const result = await inWorker("mutations", 0x7e57, 4000, 20_000);
      assert.ok(result.ok, result.message);
      assert.equal(result.parsed, 4000);
      // The mutations reach deep checks, not just the first one.
      for (const code of [
        "HeaderTooLarge",
        "InvalidHeaderLength",
        "InvalidHeaderJson",
        "InvalidOffset",
        "MetadataIncompleteBuffer",
      ]) {
        assert.ok((result.codes[code] ?? 0) > 0, `mutations reached ${code}: ${JSON.stringify(result.codes)}`);
      }
      assert.ok(result.accepted > 0, "some mutations stay valid");
    });

    test("arbitrary headers (unicode strings, JSON values, token soup)", async () => {
      const result = await inWorker("arbitrary", 0xbad5eed, 3000, 20_000);
      assert.ok(result.ok, result.message);
      assert.equal(result.parsed, 3000);
    });
  });
}
