/**
 * Deflated zip records without node:zlib (the browser path): `openContainerAsync` inflates them with
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
import { convertPickleFile, scanPickleFile } from "../src/node-pickle.js";
import { openContainer, openContainerAsync, type StorageBytes } from "../src/pickle/container.js";
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

/** The zip with the central directory's uncompressed size of `name` replaced (what a lying or bomb archive says). */
function withDeclaredSize(bytes: Uint8Array, name: string, size: number): Buffer {
  const out = Buffer.from(bytes);
  for (let at = out.lastIndexOf(Buffer.from("PK\x01\x02", "latin1")); at > 0; at--) {
    if (out.readUInt32LE(at) !== 0x02014b50) continue;
    const nameLength = out.readUInt16LE(at + 28);
    if (out.subarray(at + 46, at + 46 + nameLength).toString() === name) {
      out.writeUInt32LE(size, at + 24);
      return out;
    }
  }
  throw new Error(`no central directory entry ${name}`);
}

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
