/**
 * The undo journal, version 3: CRC-32C (the addon's and the JavaScript one agree, and are the standard CRC-32C), a
 * journal cut short while it was created is dropped with the file untouched, a journal written with the addon and
 * one written without it read the same, an existing journal is never replaced, and version 2 journals (SHA-256
 * chained, left by earlier versions) still roll back.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, test } from "node:test";
import fc from "fast-check";
import { crc32c } from "../src/edit/crc32c.js";
import { editFastNative } from "../src/edit/edit-native.js";
import { encodeJournal, splitRanges } from "../src/edit/journal.js";
import type { EditHandle } from "../src/edit/region.js";
import { loadNative } from "../src/io/native.js";
import { journalPathFor, openForEdit, recoverFile, type SafetensorErrorCode, saveFile, Tensor } from "../src/node.js";
import { loaderArgs, moduleUrl } from "./helpers/compiled.js";
import { hasCode } from "./helpers/errors.js";
import { fill } from "./helpers/fill.js";

let dir: string;
let file: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-journal-"));
  file = path.join(dir, "m.safetensors");
  saveFile(file, {
    a: new Tensor("F16", [64, 64], fill(64 * 64 * 2, 1)),
    b: new Tensor("F32", [16, 16], fill(16 * 16 * 4, 2)),
  });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

const throwsCode = (fn: () => unknown, code: SafetensorErrorCode) => assert.throws(fn, hasCode(code));

const native = loadNative() as { crc32c?: (bytes: Uint8Array, crc: number) => number } | null;

test("CRC-32C: the standard check value, continuation, and the addon's value equal the JavaScript one", (t) => {
  const check = new TextEncoder().encode("123456789");
  assert.equal(crc32c(check), 0xe3069283);
  assert.equal(crc32c(check.subarray(4), crc32c(check.subarray(0, 4))), 0xe3069283);
  if (typeof native?.crc32c !== "function") {
    t.skip("the native addon (with crc32c) is not built: only the JavaScript CRC was checked");
    return;
  }
  const addonCrc = native.crc32c.bind(native);
  assert.equal(addonCrc(check, 0), 0xe3069283);
  // Lengths around the addon's three-stream threshold (12 KiB) and odd tails, any seed.
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 0, maxLength: 40_000 }),
      fc.integer({ min: 0, max: 2 ** 32 - 1 }),
      (bytes, seed) => addonCrc(bytes, seed) === crc32c(bytes, seed),
    ),
    { numRuns: 60 },
  );
  const big = fill(3 * 4096 * 5 + 13, 9);
  for (const cut of [0, 1, 12_287, 12_288, 20_001, big.length]) {
    assert.equal(addonCrc(big.subarray(0, cut), 7), crc32c(big.subarray(0, cut), 7), `length ${cut}`);
  }
});

test("a journal cut short while it was created (inside its header, or empty) is dropped; the file is untouched", () => {
  const bytes = new Uint8Array(fs.readFileSync(file));
  const journal = encodeJournal({ fileSize: bytes.length, records: [{ offset: 100, bytes: new Uint8Array(64) }] });
  const headerLength = 8 + 16 + 4 + 4;
  for (let cut = 0; cut < headerLength; cut++) {
    fs.writeFileSync(journalPathFor(file), journal.subarray(0, cut));
    assert.deepEqual(recoverFile(file), { recovered: true, records: 0, bytes: 0 }, `cut at ${cut}`);
    assert.ok(!fs.existsSync(journalPathFor(file)));
    assert.equal(sha(new Uint8Array(fs.readFileSync(file))), sha(bytes));
  }
  // Cut inside its only record: the record is dropped (its data write never began).
  fs.writeFileSync(journalPathFor(file), journal.subarray(0, headerLength + 30));
  assert.deepEqual(recoverFile(file), { recovered: true, records: 0, bytes: 0 });
  assert.equal(sha(new Uint8Array(fs.readFileSync(file))), sha(bytes));
  // A damaged length is told from a record cut short by the CRC after it: refused, never dropped.
  const damaged = journal.slice();
  damaged[headerLength + 8]! ^= 0x40;
  fs.writeFileSync(journalPathFor(file), damaged);
  throwsCode(() => recoverFile(file), "JournalCorrupt");
  // A header that fails its CRC is refused too, and a short file that is not the start of a journal.
  const badHeader = journal.slice();
  badHeader[9]! ^= 1;
  for (const bad of [badHeader, new TextEncoder().encode("STJ?")]) {
    fs.writeFileSync(journalPathFor(file), bad);
    throwsCode(() => openForEdit(file), "JournalCorrupt");
    assert.ok(fs.existsSync(journalPathFor(file)), "a refused journal is kept");
  }
});

test("an edit never replaces an existing journal (another edit's): InterruptedEdit, nothing written", () => {
  const before = sha(new Uint8Array(fs.readFileSync(file)));
  const first = openForEdit(file);
  const second = openForEdit(file);
  first.write("a", "0:4", { fill: 1 });
  const journal = fs.readFileSync(journalPathFor(file));
  throwsCode(() => second.write("a", "8:12", { fill: 2 }), "InterruptedEdit");
  assert.deepEqual(fs.readFileSync(journalPathFor(file)), journal, "the first edit's journal is intact");
  second.close();
  first.close(); // rolled back
  assert.equal(sha(new Uint8Array(fs.readFileSync(file))), before);
  assert.ok(!fs.existsSync(journalPathFor(file)));
});

/** A journal made by a child process that edits and is then killed before its commit (addon on or off). */
function journalOfInterruptedEdit(noNative: boolean): Buffer {
  const script = `
    import { openForEdit } from ${JSON.stringify(moduleUrl(path.resolve("src/node.ts")))};
    const edit = openForEdit(${JSON.stringify(file)});
    edit.write("a", "2:40:3, 1:60:7", new Float32Array(13 * 9).fill(-2.5));
    edit.write("b", "3:9", { fill: 7 });
    process.kill(process.pid, "SIGKILL");`;
  const env = { ...process.env, SAFETENSORS_NO_NATIVE: noNative ? "1" : "" };
  const child = spawnSync(process.execPath, [...loaderArgs, "--input-type=module", "-e", script], { env });
  assert.equal(child.signal, "SIGKILL", String(child.stderr));
  return fs.readFileSync(journalPathFor(file));
}

test("journals written with and without the addon have the same records and roll back the same", () => {
  const before = new Uint8Array(fs.readFileSync(file));
  const journals: Buffer[] = [];
  for (const noNative of [false, true]) {
    journals.push(journalOfInterruptedEdit(noNative));
    assert.notEqual(sha(new Uint8Array(fs.readFileSync(file))), sha(before), "the child edited the file");
    const result = recoverFile(file);
    assert.ok(result.recovered && result.records === 2, JSON.stringify(result));
    assert.equal(sha(new Uint8Array(fs.readFileSync(file))), sha(before));
  }
  // Equal but for the random nonce and the CRCs it changes.
  assert.equal(journals[0]!.length, journals[1]!.length);
  assert.deepEqual(journals[0]!.subarray(0, 24), journals[1]!.subarray(0, 24));
});

test("the one-call native path writes exactly the journal encodeJournal describes, and the data after it", (t) => {
  if (editFastNative() === null) return t.skip("the native addon (with its one-call edit path) is not loaded");
  const before = new Uint8Array(fs.readFileSync(file));
  const edit = openForEdit(file) as EditHandle;
  const a = edit.byteRange("a").offset + 8 * 128;
  const b = edit.byteRange("b").offset + 64;
  edit.write("a", "8:24", { fill: 0 }); // the journal's first records: one native call with the data
  edit.write("b", "1:3", new Float32Array(32).fill(1.5)); // appended
  const journal = new Uint8Array(fs.readFileSync(journalPathFor(file)));
  const nonce = new DataView(journal.buffer).getUint32(24, true);
  const records = [
    { offset: a, bytes: before.slice(a, a + 2048) },
    { offset: b, bytes: before.slice(b, b + 128) },
  ];
  assert.deepEqual(journal, encodeJournal({ fileSize: before.length, records, nonce }));
  const expected = before.slice();
  expected.fill(0, a, a + 2048);
  expected.set(new Uint8Array(new Float32Array(32).fill(1.5).buffer), b);
  assert.deepEqual(new Uint8Array(fs.readFileSync(file)), expected, "only the two ranges changed");
  edit.close(); // rolled back
  assert.deepEqual(new Uint8Array(fs.readFileSync(file)), before);
  assert.ok(!fs.existsSync(journalPathFor(file)));
});

test("journalPathFor's string shortcut gives what node:path gives, for any path", () => {
  const segment = fc.constantFrom("", ".", "..", "a", ".b", "c.safetensors", "d..e", "-");
  fc.assert(
    fc.property(fc.boolean(), fc.array(segment, { maxLength: 5 }), (absolute, segments) => {
      const file = (absolute ? "/" : "") + segments.join("/");
      assert.equal(journalPathFor(file), path.join(path.dirname(file), `.${path.basename(file)}-journal`), file);
    }),
  );
});

/** Version 2 (SHA-256 chained), as earlier versions wrote it. */
function encodeV2(fileSize: number, records: { offset: number; bytes: Uint8Array }[]): Uint8Array {
  const u64 = (...values: number[]) => {
    const out = Buffer.alloc(values.length * 8);
    for (let i = 0; i < values.length; i++) out.writeBigUInt64LE(BigInt(values[i]!), i * 8);
    return out;
  };
  const body = Buffer.concat([Buffer.from("STJRNL02"), u64(fileSize, 0)]);
  let previous = createHash("sha256").update(body).digest();
  const pieces: Uint8Array[] = [body, previous];
  for (const record of records) {
    const fields = u64(record.offset, record.bytes.length);
    previous = createHash("sha256").update(previous).update(fields).update(record.bytes).digest();
    pieces.push(fields, record.bytes, previous);
  }
  return Buffer.concat(pieces);
}

test("a version 2 journal left by an earlier version still rolls back; a damaged one is refused", () => {
  const before = new Uint8Array(fs.readFileSync(file));
  const records = [
    { offset: 200, bytes: before.slice(200, 260) },
    { offset: 400, bytes: before.slice(400, 410) },
  ];
  const v2 = encodeV2(before.length, records);
  const edited = before.slice();
  edited.fill(0xee, 200, 260);
  edited.fill(0xdd, 400, 410);
  fs.writeFileSync(file, edited);
  fs.writeFileSync(journalPathFor(file), v2);
  assert.deepEqual(recoverFile(file), { recovered: true, records: 2, bytes: 70 });
  assert.equal(sha(new Uint8Array(fs.readFileSync(file))), sha(before));
  const damaged = new Uint8Array(v2);
  damaged[8 + 16 + 32 + 16 + 5]! ^= 1;
  fs.writeFileSync(file, edited);
  fs.writeFileSync(journalPathFor(file), damaged);
  throwsCode(() => recoverFile(file), "JournalCorrupt");
  assert.equal(sha(new Uint8Array(fs.readFileSync(file))), sha(edited), "the file is left as it is");
});

test("ranges longer than a record may be are journaled as several records (recovery refuses longer ones)", () => {
  const offsets = new Float64Array([0, 100, 1000]);
  const lengths = new Float64Array([10, 25, 10]);
  assert.deepEqual(splitRanges(offsets, lengths, 10), [
    new Float64Array([0, 100, 110, 120, 1000]),
    new Float64Array([10, 10, 10, 5, 10]),
  ]);
  const same = splitRanges(offsets, lengths);
  assert.ok(same[0] === offsets && same[1] === lengths, "nothing to cut: the same arrays");
});
