/**
 * In-place region writes: the bytes written are exactly the slice's elements encoded in the tensor's dtype (checked
 * against an independent element-by-element model of numpy's 2-D indexing), every other byte of the file is
 * unchanged, refusals carry their codes and change nothing, rollback / close / recover restore byte for byte, and a
 * damaged journal is refused with the file left as it is.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, test } from "node:test";
import { fromFloat32 } from "../src/codecs/index.js";
import { encodeScalarGroup } from "../src/edit/fill.js";
import { encodeJournal } from "../src/edit/journal.js";
import {
  isSafetensorError,
  journalPathFor,
  openFile,
  openForEdit,
  recoverFile,
  type SafetensorErrorCode,
  saveFile,
  Tensor,
} from "../src/node.js";
import { fill } from "./helpers/fill.js";

let dir: string;
let file: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-edit-"));
  file = path.join(dir, "m.safetensors");
  saveFile(file, {
    h: new Tensor("F16", [8, 6], fill(96, 1)),
    b: new Tensor("BF16", [5, 4], fill(40, 2)),
    f: new Tensor("F32", [3, 7], fill(84, 3)),
    i: new Tensor("I32", [4, 2], fill(32, 4)),
    e: new Tensor("F8_E4M3", [4, 4], fill(16, 5)),
  });
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

function throwsCode(fn: () => unknown, code: SafetensorErrorCode): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(isSafetensorError(error), `expected a SafetensorError, got ${error}`);
    assert.equal(error.code, code, error.message);
    return true;
  });
}

/** Python slice → selected indices of an axis of `size` (in-range ends only, as edits require). */
function indices(size: number, start: number | null, stop: number | null, step: number): number[] {
  const norm = (v: number) => (v < 0 ? v + size : v);
  const out: number[] = [];
  if (step > 0)
    for (let i = start === null ? 0 : norm(start); i < (stop === null ? size : norm(stop)); i += step) out.push(i);
  else
    for (let i = start === null ? size - 1 : norm(start); i > (stop === null ? -1 : norm(stop)); i += step) out.push(i);
  return out;
}

interface Case {
  name: string;
  spec: string;
  rows: [number | null, number | null, number];
  cols: [number | null, number | null, number];
}

const CASES: Case[] = [
  { name: "h", spec: "1:3", rows: [1, 3, 1], cols: [null, null, 1] },
  { name: "h", spec: "::3, 1:5:2", rows: [null, null, 3], cols: [1, 5, 2] },
  { name: "b", spec: "::-2, -1", rows: [null, null, -2], cols: [-1, 4, 1] },
  { name: "f", spec: "..., 2:7:4", rows: [null, null, 1], cols: [2, 7, 4] },
  { name: "f", spec: "-2:, ::-1", rows: [-2, null, 1], cols: [null, null, -1] },
  { name: "e", spec: "1, :", rows: [1, 2, 1], cols: [null, null, 1] },
];

test("write puts the encoded values exactly at the slice's elements and nowhere else", () => {
  for (const c of CASES) {
    const before = new Uint8Array(fs.readFileSync(file));
    const reader = openFile(file, { backend: "pread" });
    const info = reader.info(c.name);
    const { offset } = reader.byteRange(c.name);
    reader.close();
    const [rowsN, colsN] = info.shape as [number, number];
    const rows = indices(rowsN, ...c.rows);
    const cols = indices(colsN, ...c.cols);
    const count = rows.length * cols.length;
    const values = Array.from({ length: count }, (_, k) => (k - 3) * 0.3333);
    const width = info.byteLength / (rowsN * colsN);
    {
      using edit = openForEdit(file);
      const result = edit.write(c.name, c.spec, values);
      assert.equal(result.elements, count);
      edit.commit();
    }
    assert.ok(!fs.existsSync(journalPathFor(file)), "commit removes the journal");
    const expected = before.slice();
    const encoded = fromFloat32(info.dtype, values);
    let k = 0;
    for (const r of rows) {
      for (const col of cols) {
        const at = offset + (r * colsN + col) * width;
        expected.set(encoded.subarray(k * width, (k + 1) * width), at);
        k++;
      }
    }
    assert.equal(sha(fs.readFileSync(file)), sha(expected), `${c.name}[${c.spec}]`);
  }
});

test("raw bytes are written as given, fill fills, integer dtypes take raw bytes only", () => {
  const reader = openFile(file, { backend: "pread" });
  const { offset } = reader.byteRange("i");
  const hRange = reader.byteRange("h");
  reader.close();
  using edit = openForEdit(file);
  edit.write("i", "2:", new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]));
  throwsCode(() => edit.write("i", "0", [1, 2]), "UnsupportedDtype");
  edit.write("h", "...", { fill: 0 });
  edit.commit();
  const after = fs.readFileSync(file);
  assert.deepEqual(
    [...after.subarray(offset + 16, offset + 32)],
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
  );
  assert.ok(after.subarray(hRange.offset, hRange.offset + hRange.length).every((b) => b === 0));
});

test("refusals: out-of-range slices, wrong counts and lengths, unknown tensors; nothing written, no journal", () => {
  const before = sha(fs.readFileSync(file));
  using edit = openForEdit(file);
  throwsCode(() => edit.write("h", "6:9", { fill: 0 }), "InvalidSlice");
  throwsCode(() => edit.write("h", "-9:", { fill: 0 }), "InvalidSlice");
  throwsCode(() => edit.write("h", "..., :7", { fill: 0 }), "InvalidSlice");
  throwsCode(() => edit.write("h", "8", { fill: 0 }), "InvalidSlice");
  throwsCode(() => edit.write("h", "0", [1, 2, 3]), "InvalidTensor");
  throwsCode(() => edit.write("h", "0", new Uint8Array(11)), "InvalidTensor");
  throwsCode(() => edit.write("nope", "0", { fill: 0 }), "TensorNotFound");
  assert.ok(!fs.existsSync(journalPathFor(file)));
  assert.equal(sha(fs.readFileSync(file)), before);
});

test("a file with a bad header is refused before anything is opened for writing", () => {
  const bad = path.join(dir, "bad.safetensors");
  fs.writeFileSync(bad, Buffer.from([255, 255, 255, 255, 0, 0, 0, 0, 123]));
  assert.throws(
    () => openForEdit(bad),
    (error: unknown) => isSafetensorError(error),
  );
});

test("rollback, and close without commit, restore the file byte for byte", () => {
  const before = sha(fs.readFileSync(file));
  const edit = openForEdit(file);
  edit.write("h", "::2", { fill: 1 });
  edit.write("h", "1:5", { fill: 2 }); // overlaps the first edit: undone in reverse order
  assert.notEqual(sha(fs.readFileSync(file)), before);
  assert.ok(fs.existsSync(journalPathFor(file)));
  edit.rollback();
  assert.equal(sha(fs.readFileSync(file)), before);
  assert.ok(!fs.existsSync(journalPathFor(file)));
  edit.write("f", "0", { fill: 3 });
  edit.close();
  assert.equal(sha(fs.readFileSync(file)), before);
  throwsCode(() => edit.write("f", "0", { fill: 3 }), "Closed");
});

test("a leftover journal is rolled back by the next openForEdit and by recoverFile", () => {
  const before = sha(fs.readFileSync(file));
  const fd = fs.openSync(file, "r+");
  const size = fs.fstatSync(fd).size;
  // A crash after the journal and the data writes: simulate with the journal of a region, then the region changed.
  const old = fs.readFileSync(file).subarray(100, 140);
  fs.writeFileSync(journalPathFor(file), encodeJournal({ fileSize: size, records: [{ offset: 100, bytes: old }] }));
  fs.writeSync(fd, new Uint8Array(40).fill(7), 0, 40, 100);
  fs.closeSync(fd);
  openForEdit(file).close();
  assert.equal(sha(fs.readFileSync(file)), before);
  assert.ok(!fs.existsSync(journalPathFor(file)));
  assert.deepEqual(recoverFile(file), { recovered: false, records: 0, bytes: 0 });
});

test("a torn or damaged journal is refused with JournalCorrupt and the file is left as it is", () => {
  const size = fs.statSync(file).size;
  const good = encodeJournal({ fileSize: size, records: [{ offset: 100, bytes: new Uint8Array(40).fill(9) }] });
  const variants: Uint8Array[] = [
    new TextEncoder().encode("STJRNL9"), // not a journal signature
    (() => {
      const copy = good.slice();
      copy[40]! ^= 1; // a flipped bit in the saved bytes
      return copy;
    })(),
    encodeJournal({ fileSize: size + 1, records: [{ offset: 100, bytes: new Uint8Array(40) }] }), // another file
  ];
  for (const journal of variants) {
    const before = sha(fs.readFileSync(file));
    fs.writeFileSync(journalPathFor(file), journal);
    throwsCode(() => recoverFile(file), "JournalCorrupt");
    throwsCode(() => openForEdit(file), "JournalCorrupt");
    assert.equal(sha(fs.readFileSync(file)), before);
    assert.ok(fs.existsSync(journalPathFor(file)), "a refused journal is kept");
  }
});

test("a last record cut short (a crash while appending it) is dropped; the records before it are applied", () => {
  const bytes = new Uint8Array(fs.readFileSync(file));
  const size = bytes.length;
  const before = sha(bytes);
  const first = { offset: 100, bytes: bytes.slice(100, 140) };
  const second = { offset: 300, bytes: new Uint8Array(40).fill(9) }; // its data write never began
  const whole = encodeJournal({ fileSize: size, records: [first, second] });
  const oneRecord = encodeJournal({ fileSize: size, records: [first] }).length;
  for (const cut of [1, 4, 20, 40 + 4 + 20 - 1]) {
    fs.writeFileSync(journalPathFor(file), whole.subarray(0, whole.length - cut));
    fs.writeFileSync(file, Buffer.concat([bytes.subarray(0, 100), new Uint8Array(40).fill(7), bytes.subarray(140)]));
    const result = recoverFile(file);
    assert.equal(result.records, 1, `cut ${cut}`);
    assert.equal(sha(fs.readFileSync(file)), before);
    assert.ok(!fs.existsSync(journalPathFor(file)));
  }
  assert.ok(whole.length - (40 + 4 + 20 - 1) > oneRecord, "every cut is inside the second record");
  // A damaged record that is not the last one is refused, never skipped.
  const damaged = whole.slice();
  damaged[oneRecord - 40]! ^= 1;
  fs.writeFileSync(journalPathFor(file), damaged);
  throwsCode(() => recoverFile(file), "JournalCorrupt");
  // So is a complete last record that fails its digest.
  const last = whole.slice();
  last[last.length - 1]! ^= 1;
  fs.writeFileSync(journalPathFor(file), last);
  throwsCode(() => recoverFile(file), "JournalCorrupt");
});

test("a fill over more than one 64 KiB block repeats the pattern exactly (also 3-byte F6 groups)", () => {
  const big = path.join(dir, "big.safetensors");
  saveFile(big, {
    h: new Tensor("F16", [300, 256], fill(300 * 256 * 2, 7)),
    s: new Tensor("F6_E2M3", [4000, 8], fill(24000, 8)),
  });
  const before = new Uint8Array(fs.readFileSync(big));
  const reader = openFile(big, { backend: "pread" });
  const h = reader.byteRange("h").offset;
  const s = reader.byteRange("s").offset;
  reader.close();
  {
    using edit = openForEdit(big);
    edit.write("h", "1:299", { fill: 1.5 });
    edit.write("s", "3:3999", { fill: -0.75 });
    edit.commit();
  }
  const expected = before.slice();
  expected.set(fromFloat32("F16", new Float32Array(298 * 256).fill(1.5)), h + 512);
  expected.set(fromFloat32("F6_E2M3", new Float32Array(3996 * 8).fill(-0.75)), s + 3 * 6);
  assert.equal(sha(fs.readFileSync(big)), sha(expected));
});

test("a first write that fills one range (one native call where the addon has it) is an ordinary edit", () => {
  const big = path.join(dir, "rows.safetensors");
  saveFile(big, {
    w: new Tensor("F16", [300, 256], fill(300 * 256 * 2, 9)),
    v: new Tensor("F32", [40, 64], fill(40 * 64 * 4, 10)),
  });
  const before = new Uint8Array(fs.readFileSync(big));
  const reader = openFile(big, { backend: "pread" });
  const w = reader.byteRange("w").offset;
  reader.close();
  const zeroed = before.slice();
  zeroed.fill(0, w + 20 * 512, w + 170 * 512);

  // Written, journaled, reported like any write; removed at commit.
  {
    using edit = openForEdit(big);
    const result = edit.write("w", "20:170", { fill: 0 });
    assert.deepEqual(result, {
      file: big,
      tensor: "w",
      elements: 150 * 256,
      ranges: [{ start: w + 20 * 512, end: w + 170 * 512 }],
      bytes: 150 * 512,
    });
    assert.ok(fs.existsSync(journalPathFor(big)));
    assert.equal(sha(fs.readFileSync(big)), sha(zeroed));
    edit.commit();
    assert.ok(!fs.existsSync(journalPathFor(big)));
  }
  assert.equal(sha(fs.readFileSync(big)), sha(zeroed));

  // Its journal continues with later writes and undoes both: by rollback, and by recovery after a crash (the file
  // and journal as a killed process would leave them, copied before the commit).
  fs.writeFileSync(big, before);
  const crashed = path.join(dir, "crashed.safetensors");
  {
    using edit = openForEdit(big);
    edit.write("v", "3:5", { fill: 2.5 }); // a fill's block, repeated by the same one call
    edit.write("w", ":", { fill: 0 });
    fs.copyFileSync(big, crashed);
    fs.copyFileSync(journalPathFor(big), journalPathFor(crashed));
    edit.rollback();
    assert.equal(sha(fs.readFileSync(big)), sha(before));
  }
  recoverFile(crashed);
  assert.equal(sha(fs.readFileSync(crashed)), sha(before));
  assert.ok(!fs.existsSync(journalPathFor(crashed)));
  {
    using edit = openForEdit(big);
    edit.write("v", "0:40", { fill: 0 });
  } // closed without a commit: rolled back
  assert.equal(sha(fs.readFileSync(big)), sha(before));
});

test("zeros the one-call path does not take: -0, F8_E8M0's 0, over the journal's limit, another journal", () => {
  const before = new Uint8Array(fs.readFileSync(file));
  const reader = openFile(file, { backend: "pread" });
  const h = reader.byteRange("h").offset;
  reader.close();
  {
    using edit = openForEdit(file);
    edit.write("h", "2:4", { fill: -0 }); // F16 -0 is 0x8000
    const expected = before.slice();
    for (let i = h + 2 * 12; i < h + 4 * 12; i += 2) expected.set([0x00, 0x80], i);
    assert.equal(sha(fs.readFileSync(file)), sha(expected));
  }
  assert.equal(sha(fs.readFileSync(file)), sha(before));
  {
    using edit = openForEdit(file, { maxJournalBytes: 23 });
    throwsCode(() => edit.write("h", "2:4", { fill: 0 }), "TooLarge");
    assert.ok(!fs.existsSync(journalPathFor(file)));
  }
  {
    using edit = openForEdit(file);
    fs.writeFileSync(journalPathFor(file), "another edit's");
    throwsCode(() => edit.write("h", "2:4", { fill: 0 }), "InterruptedEdit");
    assert.equal(fs.readFileSync(journalPathFor(file), "utf8"), "another edit's");
    fs.rmSync(journalPathFor(file));
  }
  assert.equal(sha(fs.readFileSync(file)), sha(before));
  const e8 = path.join(dir, "e8.safetensors");
  saveFile(e8, { s: new Tensor("F8_E8M0", [4, 4], fill(16, 6)) });
  const e8Before = new Uint8Array(fs.readFileSync(e8));
  const e8Reader = openFile(e8, { backend: "pread" });
  const s = e8Reader.byteRange("s").offset;
  e8Reader.close();
  {
    using edit = openForEdit(e8);
    edit.write("s", "0:2", { fill: 0 }); // no zero in E8M0: numpy's value for 0, not zero bits
    edit.commit();
  }
  const expected = e8Before.slice();
  expected.fill(encodeScalarGroup("F8_E8M0", 0)[0]!, s, s + 8);
  assert.notEqual(expected[s], 0);
  assert.equal(sha(fs.readFileSync(e8)), sha(expected));
});
