/**
 * In-place edits beyond one file's library API: the `edit` and `recover` commands (fill, .npy and raw input, the
 * locality proof in --json), strict .npy reading, sharded checkpoints (the handle finds the shard; a commit over
 * several shards is all or none, also across a crash at each step of it), and readers that warn or refuse while an
 * undo journal is present (openFile, validate).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, test } from "node:test";
import { fromFloat32 } from "../src/codecs/index.js";
import { writeCommitMarker } from "../src/edit/journal.js";
import { parseNpy } from "../src/edit/npy.js";
import {
  isSafetensorError,
  journalPathFor,
  openFile,
  openForEdit,
  recoverCheckpoint,
  type SafetensorErrorCode,
  saveFile,
  saveSharded,
  Tensor,
} from "../src/node.js";
import { fill } from "./helpers/fill.js";
import { cli } from "./helpers/run-cli.js";

let dir: string;
let file: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-edit-cli-"));
  file = path.join(dir, "m.safetensors");
  saveFile(file, {
    w: new Tensor("F16", [16, 8], fill(256, 1)),
    b: new Tensor("BF16", [4, 4], fill(32, 2)),
    i: new Tensor("I32", [3, 4], fill(48, 3)),
  });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function throwsCode(fn: () => unknown, code: SafetensorErrorCode): void {
  assert.throws(fn, (error: unknown) => isSafetensorError(error) && error.code === code);
}

/** A version 1.0 .npy file as numpy writes it (header padded to a multiple of 64 with spaces and a newline). */
function npy(descr: string, shape: number[], data: Uint8Array, fortran = false): Uint8Array {
  const dims = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  let header = `{'descr': '${descr}', 'fortran_order': ${fortran ? "True" : "False"}, 'shape': ${dims}, }`;
  header += `${" ".repeat(63 - ((10 + header.length) % 64))}\n`;
  const out = new Uint8Array(10 + header.length + data.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, header.length & 0xff, header.length >> 8]);
  out.set(new TextEncoder().encode(header), 10);
  out.set(data, 10 + header.length);
  return out;
}

function tensorBytes(target: string, name: string): Uint8Array {
  using reader = openFile(target, { backend: "pread" });
  return reader.getTensor(name, { memory: "owned" }).data.slice();
}

test("edit --fill and --from (.npy float32 rounded, raw bytes) change exactly the slice; --json carries the proof", async () => {
  const before = new Uint8Array(fs.readFileSync(file));
  const reader = openFile(file, { backend: "pread" });
  const w = reader.byteRange("w").offset;
  reader.close();
  const values = new Float32Array(16).map((_, k) => (k - 7) * 0.37);
  fs.writeFileSync(path.join(dir, "v.npy"), npy("<f4", [2, 8], new Uint8Array(values.buffer)));
  const out = await cli("edit", file, "w", "--slice", "3:5", "--from", path.join(dir, "v.npy"), "--json");
  assert.equal(out.code, 0, out.stderr);
  const report = JSON.parse(out.stdout);
  const expected = before.slice();
  expected.set(fromFloat32("F16", values), w + 3 * 16);
  const after = new Uint8Array(fs.readFileSync(file));
  assert.equal(sha(after), sha(expected));
  assert.equal(report.tensor, "w");
  assert.equal(report.elements, 16);
  assert.deepEqual(report.ranges, [[w + 48, w + 80]]);
  assert.equal(report.fsync, true);
  assert.equal(report.tensor_sha256_before, sha(before.subarray(w, w + 256)));
  assert.equal(report.tensor_sha256_after, sha(after.subarray(w, w + 256)));
  assert.equal(report.rest_of_file_checked, false);
  assert.ok(!fs.existsSync(journalPathFor(file)));

  // --fill on an integer tensor, --verify full proves the whole file.
  const full = await cli("edit", file, "i", "--slice", "..., ::2", "--fill", "-3", "--verify", "full", "--json");
  assert.equal(full.code, 0, full.stderr);
  const proof = JSON.parse(full.stdout);
  assert.equal(proof.rest_of_file_checked, true);
  assert.equal(proof.file_sha256_before, sha(after));
  assert.equal(proof.file_sha256_after, sha(fs.readFileSync(file)));
  const ints = new Int32Array(tensorBytes(file, "i").buffer);
  assert.deepEqual(
    [...ints].filter((_, k) => k % 2 === 0),
    Array(6).fill(-3),
  );

  // Raw bytes of exactly the slice's length (BF16, whose values numpy keeps untyped).
  fs.writeFileSync(path.join(dir, "raw.bin"), new Uint8Array(8).fill(0x3f));
  assert.equal((await cli("edit", file, "b", "--slice", "1", "--from", path.join(dir, "raw.bin"))).code, 0);
  assert.deepEqual([...tensorBytes(file, "b").subarray(8, 16)], Array(8).fill(0x3f));
  // Untyped items of the tensor's width (how ml_dtypes' bfloat16 arrays are saved) are copied as they are.
  fs.writeFileSync(path.join(dir, "bf.npy"), npy("<V2", [4], new Uint8Array(8).fill(0x41)));
  assert.equal((await cli("edit", file, "b", "--slice", "2", "--from", path.join(dir, "bf.npy"))).code, 0);
  assert.deepEqual([...tensorBytes(file, "b").subarray(16, 24)], Array(8).fill(0x41));
});

test("edit refuses, before writing anything: a .npy of another shape or type, raw bytes of another length", async () => {
  const before = sha(fs.readFileSync(file));
  const cases: [string, Uint8Array, string][] = [
    ["shape.npy", npy("<f4", [3, 8], new Uint8Array(96)), "InvalidTensor"],
    ["type.npy", npy("<c8", [2, 8], new Uint8Array(128)), "InvalidTensor"],
    ["int.npy", npy("<i4", [2, 8], new Uint8Array(64)), "InvalidTensor"],
    ["big.npy", npy(">f2", [2, 8], new Uint8Array(32)), "InvalidTensor"],
    ["fortran.npy", npy("<f2", [2, 8], new Uint8Array(32), true), "InvalidTensor"],
    ["short.npy", npy("<f2", [2, 8], new Uint8Array(31)), "InvalidTensor"],
    ["raw.bin", new Uint8Array(31), "InvalidTensor"],
  ];
  for (const [name, bytes, code] of cases) {
    fs.writeFileSync(path.join(dir, name), bytes);
    const out = await cli("edit", file, "w", "--slice", "3:5", "--from", path.join(dir, name));
    assert.equal(out.code, 1, name);
    assert.match(out.stderr, new RegExp(`error\\[${code}\\]`), name);
  }
  assert.equal((await cli("edit", file, "w", "--slice", "3:17", "--fill", "0")).code, 1, "never clamps");
  assert.equal((await cli("edit", file, "i", "--slice", "0", "--fill", "0.5")).code, 1, "integers are exact");
  assert.equal((await cli("edit", file, "w", "--slice", "0")).code, 2, "--fill or --from");
  assert.equal(sha(fs.readFileSync(file)), before);
  assert.ok(!fs.existsSync(journalPathFor(file)));
});

test("parseNpy: versions 1 and 2, strict header", () => {
  const v1 = npy("<f2", [2, 3], new Uint8Array(12).fill(1));
  assert.deepEqual(parseNpy(v1).shape, [2, 3]);
  const v2 = new Uint8Array(v1.length + 2);
  v2.set(v1.subarray(0, 6));
  v2.set([2, 0, v1[8]!, v1[9]!, 0, 0], 6);
  v2.set(v1.subarray(10), 12);
  assert.equal(parseNpy(v2).descr, "<f2");
  const bad = (text: string) => throwsCode(() => parse(text), "InvalidTensor");
  const parse = (text: string) => {
    const header = `${text}\n`;
    const out = new Uint8Array(10 + header.length + 2);
    out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, header.length, 0]);
    out.set(new TextEncoder().encode(header), 10);
    return parseNpy(out);
  };
  bad("{'descr': '<f2', 'fortran_order': False}");
  bad("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), 'extra': 1}");
  bad("{'descr': '<f2', 'descr': '<f2', 'fortran_order': False, 'shape': (1,)}");
  bad("{'descr': [('a', '<f2')], 'fortran_order': False, 'shape': (1,)}");
  assert.deepEqual(parse("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }").shape, [1]);
});

test("recover rolls an interrupted edit back; validate and openFile report the journal meanwhile", async () => {
  const before = sha(fs.readFileSync(file));
  const edit = openForEdit(file);
  edit.write("w", "::2", { fill: 1 });
  // The process "dies" here: the journal stays (close() would roll back). Simulated by copying the state.
  const crashed = path.join(dir, "c.safetensors");
  fs.copyFileSync(file, crashed);
  fs.copyFileSync(journalPathFor(file), journalPathFor(crashed));
  edit.close();
  const validate = await cli("validate", crashed);
  assert.equal(validate.code, 1);
  assert.match(validate.stderr, /error\[InterruptedEdit\].*safetensors recover/);
  throwsCode(() => openFile(crashed, { interruptedEdit: "error" }), "InterruptedEdit");
  const warnings: Error[] = [];
  const onWarning = (warning: Error) => warnings.push(warning);
  process.on("warning", onWarning);
  openFile(crashed).close();
  openFile(crashed).close(); // once per file per process
  openFile(crashed, { interruptedEdit: "ignore" }).close();
  await new Promise((resolve) => setImmediate(resolve));
  process.off("warning", onWarning);
  assert.equal(warnings.length, 1);
  assert.equal((warnings[0] as Error & { code?: string }).code, "SAFETENSORS_INTERRUPTED_EDIT");
  assert.equal(warnings[0]!.name, "SafetensorsWarning");

  const recovered = await cli("recover", crashed, "--json");
  assert.equal(recovered.code, 0, recovered.stderr);
  assert.equal(JSON.parse(recovered.stdout).recovered, true);
  assert.equal(sha(fs.readFileSync(crashed)), before);
  assert.equal((await cli("validate", crashed)).code, 0);
  assert.match((await cli("recover", crashed)).stdout, /no interrupted edit/);
});

test("sharded checkpoints: the handle edits the shard holding the tensor; a commit over shards is all or none", async () => {
  const ckpt = path.join(dir, "ckpt");
  const tensors = new Map<string, Tensor>();
  for (let k = 0; k < 6; k++) tensors.set(`t${k}`, new Tensor("F32", [64, 16], fill(4096, 10 + k)));
  saveSharded(ckpt, tensors, { maxShardSize: 10000 });
  const shards = fs
    .readdirSync(ckpt)
    .filter((f) => f.endsWith(".safetensors"))
    .sort();
  assert.ok(shards.length >= 3);
  const snapshot = () => new Map(shards.map((s) => [s, sha(fs.readFileSync(path.join(ckpt, s)))]));
  const original = snapshot();

  // CLI edit of a directory finds the shard.
  const out = await cli("edit", ckpt, "t4", "--slice", "0:2", "--fill", "2.5", "--json");
  assert.equal(out.code, 0, out.stderr);
  const report = JSON.parse(out.stdout);
  const edited = path.basename(report.file);
  for (const [s, digest] of snapshot()) assert.equal(digest === original.get(s), s !== edited, s);
  assert.deepEqual([...new Float32Array(tensorBytes(report.file, "t4").slice(0, 128).buffer)], Array(32).fill(2.5));

  // A transaction over two shards, interrupted at each step of its commit, recovers to all-old or all-new.
  const base = snapshot();
  const editor = openForEdit(ckpt);
  assert.notEqual(editor.fileOf("t0"), editor.fileOf("t5"));
  editor.write("t0", "5", { fill: -1 });
  editor.write("t5", "7", { fill: -2 });
  const journals = [editor.fileOf("t0"), editor.fileOf("t5")].map((f) => journalPathFor(f));
  // The group id is in each journal's header: magic (8) · file size (8) · group length (8) · group.
  const header = fs.readFileSync(journals[0]!);
  const group = header.subarray(24, 24 + Number(header.readBigUInt64LE(16))).toString();
  const frozen = (name: string) => {
    const copy = path.join(dir, name);
    fs.cpSync(ckpt, copy, { recursive: true });
    return copy;
  };
  const beforeMarker = frozen("a");
  const afterMarker = frozen("b");
  writeCommitMarker(afterMarker, group, false);
  const oneJournalGone = frozen("c");
  writeCommitMarker(oneJournalGone, group, false);
  fs.unlinkSync(path.join(oneJournalGone, path.basename(journals[0]!)));
  const otherGroup = frozen("d");
  writeCommitMarker(otherGroup, "0123456789abcdef01234567", false);
  editor.commit();
  editor.close();
  const committed = snapshot();
  assert.notDeepEqual(committed, base);
  for (const [copy, expected] of [
    [beforeMarker, base],
    [afterMarker, committed],
    [oneJournalGone, committed],
    [otherGroup, base],
  ] as const) {
    recoverCheckpoint(copy);
    assert.deepEqual(snapshotOf(copy, shards), expected, path.basename(copy));
    assert.deepEqual(
      fs.readdirSync(copy).filter((f) => f.startsWith(".")),
      [],
      `${path.basename(copy)}: no journal or marker left`,
    );
  }
});

function snapshotOf(directory: string, shards: readonly string[]): Map<string, string> {
  return new Map(shards.map((s) => [s, sha(fs.readFileSync(path.join(directory, s)))]));
}
