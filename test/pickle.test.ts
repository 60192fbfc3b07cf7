/**
 * PyTorch pickle checkpoints: conversion equals torch.load(weights_only=True) byte for byte (golden hashes from
 * scripts/gen_pickle_fixtures.py), hostile files are refused with their globals named and nothing they carry runs,
 * and mutated pickles never crash or hang the reader.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { deserialize, isSafetensorError, MemorySource } from "../src/index.js";
import { saveFile, Tensor } from "../src/node.js";
import { openContainer } from "../src/pickle/container.js";
import { runPickle } from "../src/pickle/machine.js";
import { convertPickleFile, convertToTorchFile, scanPickleFile } from "../src/pickle/node-pickle.js";
import { planConversion } from "../src/pickle/plan.js";
import { scanSource } from "../src/pickle/scan.js";
import { PyBytes, PyDict, PyFloat, PyList, PySet, PyTuple, type PyValue } from "../src/pickle/values.js";
import { loaderArgs, modulePath } from "./helpers/compiled.js";
import { corpusAvailable, corpusDir, corpusMissingReason, repoRoot } from "./helpers/corpus.js";
import { runReference, skipWithoutReference } from "./helpers/reference.js";

const fixtures = path.join(repoRoot, "test/fixtures/pickle");
interface Expected {
  file: string;
  key?: string;
  tensors: Record<string, { dtype: string; shape: number[]; sha256: string }>;
  aliases?: Record<string, string>;
  /** Names of the entries that are not tensors, as the generator flattens the checkpoint (when recorded). */
  nonTensors?: string[];
}
const manifest = JSON.parse(fs.readFileSync(path.join(fixtures, "manifest.json"), "utf8")) as {
  marker: string;
  benign: Expected[];
  refused: { file: string; code: string; verdict: string; globals: string[] }[];
  protocols: { protocol: number; hex: string; value: unknown }[];
  corpus: Expected[];
};
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-pickle-"));

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function checkConverted(out: string, expected: Expected): void {
  const { tensors, metadata } = deserialize(fs.readFileSync(out));
  for (const [name, want] of Object.entries(expected.tensors)) {
    const kept = tensors.has(name) ? name : metadata?.get(name);
    assert.ok(kept !== undefined && tensors.has(kept), `${expected.file}: ${name} missing (and not an alias)`);
    const t = tensors.get(kept)!;
    assert.equal(t.dtype, want.dtype, `${expected.file}: ${name} dtype`);
    assert.deepEqual([...t.shape], want.shape, `${expected.file}: ${name} shape`);
    assert.equal(sha256(t.data as Uint8Array), want.sha256, `${expected.file}: ${name} bytes`);
  }
  for (const name of tensors.keys()) assert.ok(name in expected.tensors, `${expected.file}: unexpected tensor ${name}`);
}

function checkNonTensors(report: { nonTensors: readonly { name: string }[] }, expected: Expected): void {
  if (!expected.nonTensors) return;
  assert.deepEqual(report.nonTensors.map((e) => e.name).sort(), [...expected.nonTensors].sort(), expected.file);
}

describe("pickle conversion matches torch.load", () => {
  for (const expected of manifest.benign) {
    test(expected.file, () => {
      const out = path.join(tmp, `${expected.file}.safetensors`);
      const report = convertPickleFile(path.join(fixtures, expected.file), out);
      checkConverted(out, expected);
      assert.deepEqual(Object.fromEntries(report.aliases), expected.aliases ?? {});
      checkNonTensors(report, expected);
      if (expected.key) {
        assert.deepEqual(report.key, [expected.key]);
        assert.equal(report.keyFound, "automatic");
      }
    });
  }

  test("tied weights: written once with the alias in the metadata, or in full with cloneShared", () => {
    const input = path.join(fixtures, "tied-params.pt");
    const once = path.join(tmp, "tied-once.safetensors");
    const twice = path.join(tmp, "tied-twice.safetensors");
    convertPickleFile(input, once);
    convertPickleFile(input, twice, { cloneShared: true });
    const a = deserialize(fs.readFileSync(once));
    const b = deserialize(fs.readFileSync(twice));
    assert.deepEqual([...a.tensors.keys()].sort(), ["bias", "embed.weight"]);
    assert.equal(a.metadata?.get("lm_head.weight"), "embed.weight");
    assert.equal(a.metadata?.get("format"), "pt");
    assert.deepEqual([...b.tensors.keys()].sort(), ["bias", "embed.weight", "lm_head.weight"]);
    assert.equal(
      sha256(b.tensors.get("lm_head.weight")!.data as Uint8Array),
      sha256(b.tensors.get("embed.weight")!.data as Uint8Array),
    );
  });

  test("--key selects the entry; a missing key is a coded error", () => {
    const input = path.join(fixtures, "lightning.ckpt");
    const report = convertPickleFile(input, path.join(tmp, "key.safetensors"), { key: "state_dict" });
    assert.equal(report.keyFound, "given");
    assert.ok(report.otherEntries.includes("epoch"));
    assert.throws(() => convertPickleFile(input, path.join(tmp, "nokey.safetensors"), { key: "nope" }), {
      code: "InvalidCheckpoint",
    });
    assert.equal(fs.existsSync(path.join(tmp, "nokey.safetensors")), false);
  });
});

describe("real pickles from the corpus", () => {
  for (const expected of manifest.corpus ?? []) {
    test(expected.file, { skip: corpusAvailable ? false : corpusMissingReason }, () => {
      const out = path.join(tmp, `corpus-${expected.file}.safetensors`);
      const report = convertPickleFile(path.join(corpusDir, expected.file), out);
      checkConverted(out, expected);
      if (expected.file.startsWith("tinypellm")) assert.equal(report.aliases.size, 1);
      // The trainer's RNG state: the torch state and numpy's MT19937 key (numpy.1) are tensors, the rest of the
      // python and numpy generator states are reported by name.
      checkNonTensors(report, expected);
    });
  }
});

describe("refused files", () => {
  for (const refused of manifest.refused) {
    test(`${refused.file}: ${refused.code}`, () => {
      const out = path.join(tmp, `${refused.file}.safetensors`);
      assert.throws(
        () => convertPickleFile(path.join(fixtures, refused.file), out),
        (error: unknown) => {
          assert.ok(isSafetensorError(error), String(error));
          assert.equal(error.code, refused.code, error.message);
          for (const g of refused.globals) assert.ok(error.message.includes(g), `${error.message} names ${g}`);
          return true;
        },
      );
      assert.equal(fs.existsSync(out), false);
      const report = scanPickleFile(path.join(fixtures, refused.file));
      assert.equal(report.verdict, refused.verdict);
      for (const g of refused.globals)
        assert.ok(
          report.globals.some((f) => f.global === g),
          `scan names ${g}`,
        );
    });
  }

  test("allowUnknown converts what is allowlisted and lists what was dropped; dangerous stays refused", () => {
    assert.throws(
      () =>
        convertPickleFile(path.join(fixtures, "hostile-os-system.pt"), path.join(tmp, "x.safetensors"), {
          allowUnknown: true,
        }),
      { code: "UnsafePickle" },
    );
    // A whole pickled module is an object built from unknown globals: nothing to convert even when allowed.
    assert.throws(
      () =>
        convertPickleFile(path.join(fixtures, "whole-module.pt"), path.join(tmp, "m.safetensors"), {
          allowUnknown: true,
        }),
      { code: "UnsafePickle" },
    );
  });

  test("the CLI refuses every hostile file, names the globals, writes nothing, and no payload runs", () => {
    const runs: string[][] = [];
    const outputs: string[] = [];
    for (const refused of manifest.refused) {
      const out = path.join(tmp, `cli-${refused.file}.safetensors`);
      outputs.push(out);
      runs.push(["scan", path.join(fixtures, refused.file)]);
      runs.push(["convert", path.join(fixtures, refused.file), out]);
      runs.push(["convert", path.join(fixtures, refused.file), out, "--allow-unknown"]);
    }
    runs.push(["scan", "--json", ...manifest.refused.map((r) => path.join(fixtures, r.file))]);
    const result = spawnSync(
      process.execPath,
      [...loaderArgs, modulePath(path.join(repoRoot, "test/helpers/run-cli-batch.ts")), JSON.stringify(runs)],
      {
        encoding: "utf8",
        cwd: repoRoot,
        timeout: 120_000,
      },
    );
    const all = result.stdout + result.stderr;
    assert.equal(result.status, 0, all);
    assert.ok(!all.includes(manifest.marker), "a payload ran");
    assert.ok(!all.includes("CRASH"), all);
    const exits = [...result.stdout.matchAll(/^EXIT (\d+)$/gm)].map((m) => Number(m[1]));
    assert.equal(exits.length, runs.length);
    for (let i = 0; i < manifest.refused.length; i++) {
      const safe = manifest.refused[i]!.verdict === "safe";
      assert.equal(exits[3 * i], safe ? 0 : 1, `scan ${manifest.refused[i]!.file} exits ${safe ? 0 : 1}`);
      assert.equal(exits[3 * i + 1], 1, `convert ${manifest.refused[i]!.file} exits 1`);
      for (const g of manifest.refused[i]!.globals)
        assert.ok(result.stdout.includes(g) && result.stderr.includes(g), `${g} named`);
    }
    for (const out of outputs) assert.equal(fs.existsSync(out), false, `${out} was written`);
    const json = JSON.parse(
      result.stdout
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .pop()!,
    );
    assert.equal(json.verdict, "dangerous");
  });
});

describe("the way back: safetensors to a torch checkpoint", () => {
  const DTYPES = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64"];
  const F8 = ["F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"];
  const source = path.join(tmp, "every-dtype.safetensors");
  const back = path.join(tmp, "every-dtype.bin");
  const again = path.join(tmp, "every-dtype-again.safetensors");
  const tensors = new Map<string, Tensor>();
  for (const [i, dtype] of [...DTYPES, ...F8].entries()) {
    const size = F8.includes(dtype) || dtype === "BOOL" ? 1 : Number(/\d+/.exec(dtype)![0]) / 8;
    const data = new Uint8Array(6 * size).map((_, k) => (dtype === "BOOL" ? (k + i) % 2 : (k * 37 + i * 11) & 0x3f));
    tensors.set(`t.${dtype}`, new Tensor(dtype, [2, 3], data));
  }
  tensors.set("scalar", new Tensor("F32", [], new Uint8Array([0, 0, 128, 63])));
  tensors.set("empty", new Tensor("F32", [0, 4], new Uint8Array(0)));

  test("every dtype round-trips through our own reader; tied names become one tensor again", () => {
    saveFile(source, tensors, { "tied.copy": "t.F32" });
    const report = convertToTorchFile(source, back);
    assert.equal(report.tensors, tensors.size);
    assert.deepEqual([...report.aliases], [["tied.copy", "t.F32"]]);
    const scan = scanPickleFile(back);
    assert.equal(scan.verdict, "safe", JSON.stringify(scan.globals));
    const converted = convertPickleFile(back, again);
    assert.deepEqual([...converted.aliases], [["tied.copy", "t.F32"]]);
    const { tensors: read } = deserialize(fs.readFileSync(again));
    for (const [name, t] of tensors) {
      const got = read.get(name)!;
      assert.equal(got.dtype, t.dtype, name);
      assert.deepEqual([...got.shape], [...t.shape], name);
      assert.deepEqual(Buffer.from(got.data as Uint8Array), Buffer.from(t.data as Uint8Array), name);
    }
    // Stored records, data aligned to 64 bytes: every local header's data offset.
    const bytes = fs.readFileSync(back);
    for (let at = 0; bytes.readUInt32LE(at) === 0x04034b50; ) {
      const data = at + 30 + bytes.readUInt16LE(at + 26) + bytes.readUInt16LE(at + 28);
      assert.equal(data % 64, 0, `record at ${at}`);
      at = data + bytes.readUInt32LE(at + 18);
    }
  });

  test("F4 and F6 have no torch dtype: refused, nothing written", () => {
    const f4 = path.join(tmp, "f4.safetensors");
    saveFile(f4, { x: new Tensor("F4", [4], new Uint8Array(2)) });
    assert.throws(() => convertToTorchFile(f4, path.join(tmp, "f4.bin")), { code: "UnsupportedDtype" });
    assert.equal(fs.existsSync(path.join(tmp, "f4.bin")), false);
  });
});

describe("live check against torch", () => {
  test("converted fixtures and corpus pickles equal torch.load(weights_only=True)", {
    skip: skipWithoutReference(),
  }, () => {
    const pairs = [
      ...manifest.benign.filter((b) => !/tar-format|protocol[45]/.test(b.file)).map((b) => ({ dir: fixtures, ...b })),
      ...(corpusAvailable ? manifest.corpus.map((c) => ({ dir: corpusDir, ...c })) : []),
    ].map((b) => {
      const out = path.join(tmp, `live-${b.file}.safetensors`);
      convertPickleFile(path.join(b.dir, b.file), out);
      return { pt: path.join(b.dir, b.file), safetensors: out, key: b.key ?? null };
    });
    // The way back: our .bin of every dtype, read by torch, against the safetensors file it came from.
    const everyDtype = path.join(tmp, "every-dtype.safetensors");
    if (fs.existsSync(everyDtype)) {
      convertToTorchFile(everyDtype, path.join(tmp, "every-dtype-live.bin"));
      pairs.push({ pt: path.join(tmp, "every-dtype-live.bin"), safetensors: everyDtype, key: null });
    }
    const results = runReference<{ pt: string; compared: number; mismatches: string[] }[]>(
      path.join(repoRoot, "scripts/torch_load_check.py"),
      [],
      pairs,
    );
    for (const r of results) {
      assert.ok(r.compared > 0, r.pt);
      assert.deepEqual(r.mismatches, [], r.pt);
    }
  });
});

/** Our symbolic values rendered like the generator's `canonical()`. */
function canonical(v: PyValue): unknown {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "bigint") return { int: String(v) };
  if (v instanceof PyFloat) return { float: pyRepr(v.value) };
  if (v instanceof PyBytes) return { [v.mutable ? "bytearray" : "bytes"]: Buffer.from(v.bytes).toString("hex") };
  if (v instanceof PyTuple) return { tuple: v.items.map(canonical) };
  if (v instanceof PyList) return { list: v.items.map(canonical) };
  if (v instanceof PySet) {
    return {
      [v.frozen ? "frozenset" : "set"]: v.items.map(canonical).sort((a, b) => (pyJson(a) < pyJson(b) ? -1 : 1)),
    };
  }
  if (v instanceof PyDict) return { dict: v.entries.map(([k, x]) => [canonical(k), canonical(x)]) };
  throw new Error(`unexpected ${String(v)}`);
}

function pyRepr(x: number): string {
  if (x === Number.POSITIVE_INFINITY) return "inf";
  if (Number.isInteger(x) && Math.abs(x) < 1e16) return x.toFixed(1);
  return String(x).replace("e+", "e+");
}

/** json.dumps with Python's default separators, for sorting set members alike. */
function pyJson(v: unknown): string {
  return JSON.stringify(v).replace(/,/g, ", ").replace(/:/g, ": ");
}

describe("symbolic machine", () => {
  for (const sample of manifest.protocols) {
    test(`protocol ${sample.protocol}: every opcode Python emits for plain data`, () => {
      const result = runPickle(Buffer.from(sample.hex, "hex"));
      assert.deepEqual(canonical(result.value), sample.value);
      assert.equal(result.protocol, sample.protocol >= 2 ? sample.protocol : 0);
    });
  }

  const bytes = (...parts: (string | number[])[]) =>
    Uint8Array.from(parts.flatMap((p) => (typeof p === "string" ? [...Buffer.from(p, "latin1")] : p)));
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (error) {
      assert.ok(isSafetensorError(error), String(error));
      return error.code;
    }
    return "ok";
  };

  test("limits are named options and raise PickleLimit", () => {
    const list = bytes([0x80, 2], "]", ...Array.from({ length: 50 }, () => "K\x01a"), ".");
    assert.equal(
      code(() => runPickle(list)),
      "ok",
    );
    assert.equal(
      code(() => runPickle(list, 0, { maxObjects: 20 })),
      "PickleLimit",
    );
    const memo = bytes([0x80, 2], "]", ...Array.from({ length: 10 }, (_, i) => `q${String.fromCharCode(i)}`), ".");
    assert.equal(
      code(() => runPickle(memo, 0, { maxMemo: 5 })),
      "PickleLimit",
    );
    const marks = bytes([0x80, 2], "(".repeat(30), "N", ".");
    assert.equal(
      code(() => runPickle(marks, 0, { maxMarks: 10 })),
      "PickleLimit",
    );
    const stack = bytes([0x80, 2], "N".repeat(30), ".");
    assert.equal(
      code(() => runPickle(stack, 0, { maxStack: 10 })),
      "PickleLimit",
    );
    const long = bytes([0x80, 2, 0x8b], [0, 4, 0, 0], new Array(1024).fill(1), ".");
    assert.equal(
      code(() => runPickle(long, 0, { maxIntBytes: 16 })),
      "PickleLimit",
    );
  });

  test("lengths past the bytes left, NEXT_BUFFER, unknown opcodes and bad STOPs are InvalidPickle", () => {
    assert.equal(
      code(() => runPickle(bytes([0x80, 4, 0x8d], [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], "."))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 4, 0x95], [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], "N."))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 5, 0x97], "."))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 2, 0xff]))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 2], "NN."))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 2], "h\x05."))),
      "InvalidPickle",
    );
    assert.equal(
      code(() => runPickle(bytes([0x80, 2], "N"))),
      "InvalidPickle",
    );
  });

  test("globals are never resolved: a call of os.system is a record, with where it was used", () => {
    const result = runPickle(bytes([0x80, 2], "cos\nsystem\n(X", [4, 0, 0, 0], "echotR."));
    const record = result.globals.get("os.system")!;
    assert.equal(record.verdict, "dangerous");
    assert.ok(record.uses.has("call"));
    assert.deepEqual(record.offsets, [2]);
  });
});

describe("fuzzing mutated pickles", () => {
  test("never a crash or a hang; every reject coded", () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    const inputs = [...manifest.benign.map((b) => b.file), ...manifest.refused.map((r) => r.file)].map((f) =>
      fs.readFileSync(path.join(fixtures, f)),
    );
    const pickles = manifest.protocols.map((p) => Buffer.from(p.hex, "hex"));
    let rejected = 0;
    for (let i = 0; i < 800; i++) {
      const fromPickles = i % 2 === 0;
      const base = fromPickles ? pickles[rand(pickles.length)]! : inputs[rand(inputs.length)]!;
      const b = Buffer.from(base);
      const region = fromPickles ? b.length : Math.min(b.length, 1200);
      let mutated: Buffer = b;
      const kind = rand(5);
      if (kind === 0) for (let k = 0; k < 1 + rand(4); k++) b[rand(region)] = rand(256);
      else if (kind === 1) mutated = b.subarray(0, rand(b.length));
      else if (kind === 2) {
        const at = rand(region);
        mutated = Buffer.concat([b.subarray(0, at), Buffer.from([rand(256), rand(256)]), b.subarray(at)]);
      } else if (kind === 3) {
        const at = rand(region);
        mutated = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + rand(8))]);
      } else {
        const at = rand(region);
        const len = 1 + rand(16);
        mutated = Buffer.concat([b.subarray(0, at + len), b.subarray(at, at + len), b.subarray(at + len)]);
      }
      const report = scanSource(new MemorySource(mutated));
      assert.ok(["safe", "unknown", "dangerous"].includes(report.verdict));
      if (report.errors.length) assert.notEqual(report.verdict, "safe");
      try {
        planConversion(openContainer(new MemorySource(mutated)));
      } catch (error) {
        assert.ok(isSafetensorError(error), `mutation ${i}: ${(error as Error).stack}`);
        rejected++;
      }
    }
    assert.ok(rejected > 100, `only ${rejected} rejects: are mutations reaching the parser?`);
  });
});
