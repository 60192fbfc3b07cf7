/**
 * The torch zip container's record checks (a storage absent or of another size than its reference, a ZIP64 end
 * record), and deflated zip records without node:zlib (the browser path): `openContainerAsync` inflates them with
 * DecompressionStream("deflate-raw"), which Node 20 has too, so the pure path runs here. Both paths give the same
 * bytes, and both refuse a record whose declared size is over `maxInflateBytes` or that inflates past its declared
 * size (a zip bomb) with a coded error.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import * as zlib from "node:zlib";
import { MemorySource } from "../src/index.js";
import { openContainer, openContainerAsync, type StorageBytes } from "../src/pickle/container.js";
import { convertPickleFile, scanPickleFile } from "../src/pickle/node-pickle.js";
import { planConversion } from "../src/pickle/plan.js";
import { scanSourceAsync } from "../src/pickle/scan.js";
import { contiguousStrides } from "../src/pickle/torch.js";
import { repoRoot } from "./helpers/corpus.js";

const fixtures = path.join(repoRoot, "test/fixtures/pickle");
const deflated = fs.readFileSync(path.join(fixtures, "deflated-renamed.pt"));
const manifest = JSON.parse(fs.readFileSync(path.join(fixtures, "manifest.json"), "utf8")) as {
  benign: { file: string; tensors: Record<string, { sha256: string }> }[];
};
const zlibInflate = (compressed: Uint8Array, size: number) =>
  zlib.inflateRawSync(compressed, { maxOutputLength: Math.max(size, 1) });

/** Offset of the central directory entry of `name`. */
function centralEntry(bytes: Buffer, name: string): number {
  for (let at = bytes.lastIndexOf(Buffer.from("PK\x01\x02", "latin1")); at > 0; at--) {
    if (bytes.readUInt32LE(at) !== 0x02014b50) continue;
    const nameLength = bytes.readUInt16LE(at + 28);
    if (bytes.subarray(at + 46, at + 46 + nameLength).toString() === name) return at;
  }
  throw new Error(`no central directory entry ${name}`);
}

/** The zip with the central directory's uncompressed size of `name` replaced (what a lying or bomb archive says). */
function withDeclaredSize(bytes: Uint8Array, name: string, size: number, compressedToo = false): Buffer {
  const out = Buffer.from(bytes);
  const at = centralEntry(out, name);
  out.writeUInt32LE(size, at + 24);
  if (compressedToo) out.writeUInt32LE(size, at + 20);
  return out;
}

/** The same archive with a ZIP64 end record and locator before its end record, which then defers to them. */
function withZip64End(bytes: Uint8Array): Buffer {
  const src = Buffer.from(bytes);
  const eocd = src.lastIndexOf(Buffer.from("PK\x05\x06", "latin1"));
  const count = src.readUInt16LE(eocd + 10);
  const dirSize = src.readUInt32LE(eocd + 12);
  const dirOffset = src.readUInt32LE(eocd + 16);
  const record = Buffer.alloc(56);
  record.writeUInt32LE(0x06064b50, 0);
  record.writeBigUInt64LE(44n, 4);
  record.writeUInt16LE(45, 12);
  record.writeUInt16LE(45, 14);
  record.writeBigUInt64LE(BigInt(count), 24);
  record.writeBigUInt64LE(BigInt(count), 32);
  record.writeBigUInt64LE(BigInt(dirSize), 40);
  record.writeBigUInt64LE(BigInt(dirOffset), 48);
  const locator = Buffer.alloc(20);
  locator.writeUInt32LE(0x07064b50, 0);
  locator.writeBigUInt64LE(BigInt(eocd), 8);
  locator.writeUInt32LE(1, 16);
  const end = Buffer.from(src.subarray(eocd));
  end.writeUInt16LE(0xffff, 8);
  end.writeUInt16LE(0xffff, 10);
  end.writeUInt32LE(0xffffffff, 12);
  end.writeUInt32LE(0xffffffff, 16);
  return Buffer.concat([src.subarray(0, eocd), record, locator, end]);
}

describe("zip records", () => {
  const views = fs.readFileSync(path.join(fixtures, "views.pt"));
  const expected = manifest.benign.find((b) => b.file === "views.pt")!.tensors;

  test("a ZIP64 end record is followed to the central directory", () => {
    const plan = planConversion(openContainer(new MemorySource(withZip64End(views))));
    assert.deepEqual(plan.tensors.map((t) => t.name).sort(), Object.keys(expected).sort());
  });

  test("a storage referenced but absent, or not numel × element size, is InvalidCheckpoint", () => {
    // Rename views/data/0 to views/data/x in both headers: the pickle's storage "0" is then absent.
    const absent = Buffer.from(views);
    for (const at of [absent.indexOf("views/data/0"), centralEntry(absent, "views/data/0") + 46]) {
      absent.write("x", at + "views/data/".length, "latin1");
    }
    assert.throws(() => planConversion(openContainer(new MemorySource(absent))), {
      code: "InvalidCheckpoint",
      message: /storage "0" is referenced but views\/data\/0 is absent/,
    });
    const short = withDeclaredSize(views, "views/data/0", 396, true);
    assert.throws(() => planConversion(openContainer(new MemorySource(short))), {
      code: "InvalidCheckpoint",
      message: /holds 396 bytes, but its reference says 100 × 4/,
    });
  });
});

function bytesOf(s: StorageBytes): Uint8Array {
  assert.equal(s.kind, "memory");
  return s.kind === "memory" ? s.bytes : new Uint8Array();
}

describe("deflated zip records on the pure path (DecompressionStream)", () => {
  test("inflates the same bytes as node:zlib; the plan matches torch.load's tensors", async () => {
    const pure = await openContainerAsync(new MemorySource(deflated));
    const node = openContainer(new MemorySource(deflated), { inflateRaw: zlibInflate });
    for (const key of ["0", "1", "2", "3"]) {
      assert.deepEqual(Buffer.from(bytesOf(pure.storage(key))), Buffer.from(bytesOf(node.storage(key))), key);
    }
    const plan = planConversion(pure);
    const expected = manifest.benign.find((b) => b.file === "deflated-renamed.pt")!.tensors;
    assert.deepEqual(plan.tensors.map((t) => t.name).sort(), Object.keys(expected).sort());
    let compared = 0;
    for (const p of plan.tensors) {
      const t = p.tensor;
      const row = contiguousStrides(t.shape);
      if (t.source.kind !== "storage" || !t.shape.every((d, i) => d <= 1 || t.stride[i] === row[i])) continue;
      const storage = bytesOf(pure.storage(t.source.key));
      const start = t.source.byteOffset + t.offset * t.elementSize;
      const digest = createHash("sha256")
        .update(storage.subarray(start, start + p.byteLength))
        .digest("hex");
      assert.equal(digest, expected[p.name]!.sha256, p.name);
      compared++;
    }
    assert.ok(compared >= 2, `${compared} contiguous tensors compared`);
    assert.equal((await scanSourceAsync(new MemorySource(deflated))).verdict, "safe");
  });

  test("without an inflater the synchronous opener says how to read it", () => {
    assert.throws(() => openContainer(new MemorySource(deflated)).storage("0"), {
      code: "UnsupportedPickle",
      message: /openContainerAsync/,
    });
  });

  test("a declared size over maxInflateBytes is PickleLimit before anything is inflated, on both paths", async () => {
    // 4 GiB declared for a 400-byte storage: over the 1 GiB default.
    const bomb = withDeclaredSize(deflated, "some folder/data/0", 0xfffffff0);
    await assert.rejects(openContainerAsync(new MemorySource(bomb)), {
      code: "PickleLimit",
      message: /maxInflateBytes/,
    });
    const small = { maxInflateBytes: 1000 };
    await assert.rejects(openContainerAsync(new MemorySource(deflated), small), { code: "PickleLimit" });
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-inflate-"));
    try {
      const file = path.join(tmp, "bomb.pt");
      fs.writeFileSync(file, bomb);
      const out = path.join(tmp, "out.safetensors");
      assert.throws(() => convertPickleFile(file, out), { code: "PickleLimit", message: /maxInflateBytes/ });
      assert.throws(() => convertPickleFile(path.join(fixtures, "deflated-renamed.pt"), out, small), {
        code: "PickleLimit",
      });
      assert.equal(fs.existsSync(out), false);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  test("a record that inflates past its declared size is cut off there and refused, on both paths", async () => {
    const lying = withDeclaredSize(deflated, "some folder/data.pkl", 100);
    await assert.rejects(openContainerAsync(new MemorySource(lying)), {
      code: "InvalidCheckpoint",
      message: /more than its declared 100 bytes/,
    });
    const report = await scanSourceAsync(new MemorySource(lying));
    assert.notEqual(report.verdict, "safe");
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-inflate-"));
    try {
      const file = path.join(tmp, "lying.pt");
      fs.writeFileSync(file, lying);
      const scan = scanPickleFile(file);
      assert.notEqual(scan.verdict, "safe");
      assert.ok(
        scan.errors.some((e) => e.code === "InvalidCheckpoint"),
        JSON.stringify(scan.errors),
      );
      // Fewer bytes than declared is refused as well.
      const short = withDeclaredSize(deflated, "some folder/data.pkl", 600);
      await assert.rejects(openContainerAsync(new MemorySource(short)), { code: "InvalidCheckpoint" });
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
