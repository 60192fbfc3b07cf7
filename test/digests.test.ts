/**
 * The digests `hash`, manifests and patches rest on: segmentDigests over any chunking, and one read of a file feeding
 * lanes on worker threads giving exactly what the same lanes give on one thread (and what hashing each range apart
 * gives).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { digestDescriptor } from "../src/integrity/digests.js";
import { segmentDigests } from "../src/integrity/segments.js";
import { openStoredFile } from "../src/integrity/stored-file.js";
import { saveFile, Tensor } from "../src/node.js";

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

test("segmentDigests: each range's SHA-256, whatever the chunking (empty ranges and gaps included)", () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 0, maxLength: 300 }),
      fc.array(fc.nat(300), { maxLength: 12 }),
      fc.array(fc.integer({ min: 1, max: 80 }), { minLength: 1, maxLength: 10 }),
      (bytes, cuts, chunks) => {
        const points = cuts.map((c) => c % (bytes.length + 1)).sort((a, b) => a - b);
        if (points.length % 2 === 1) points.pop();
        const lane = segmentDigests(() => createHash("sha256"), points);
        for (let at = 0, k = 0; at < bytes.length; k++) {
          const n = Math.min(chunks[k % chunks.length]!, bytes.length - at);
          lane.update(bytes.subarray(at, at + n), at);
          at += n;
        }
        const expected: string[] = [];
        for (let i = 0; i < points.length; i += 2) expected.push(sha256(bytes.subarray(points[i], points[i + 1])));
        assert.deepEqual(lane.finish(bytes.length), expected);
      },
    ),
  );
});

test("worker-thread lanes give the one-thread digests: 21 MiB (the ring wraps), empty tensors, AutoV1 window", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "st-digests-"));
  try {
    const file = path.join(tmp, "m.safetensors");
    const big = new Uint8Array(21 << 20).map((_, i) => (i * 2654435761) >>> 24);
    saveFile(
      file,
      {
        empty: new Tensor("F32", [0, 3], new Uint8Array(0)),
        big: new Tensor("U8", [big.length], big),
        "empty.tail": new Tensor("I64", [0], new Uint8Array(0)),
        small: Tensor.fromFloat32("F32", [5], [1, 2, 3, 4, 5]),
      },
      { note: "x" },
    );
    const bytes = fs.readFileSync(file);
    const stored = openStoredFile(file);
    try {
      for (const ecosystem of [false, true]) {
        const one = digestDescriptor(stored.fd, stored.header, file, { ecosystem, parallelFrom: Infinity });
        const lanes = digestDescriptor(stored.fd, stored.header, file, { ecosystem, parallelFrom: 0 });
        assert.deepEqual(lanes, one);
        assert.equal(one.sha256, sha256(bytes));
        for (const [name, info] of stored.header.tensors) {
          const at = stored.header.dataStart + info.dataOffsets[0];
          assert.equal(one.tensors.get(name), sha256(bytes.subarray(at, at + info.byteLength)), name);
        }
        if (!ecosystem) assert.equal(one.ecosystem, undefined);
        else {
          assert.equal(one.ecosystem?.data_sha256, sha256(bytes.subarray(stored.header.dataStart)));
          assert.equal(one.ecosystem?.autov1, sha256(bytes.subarray(0x100000, 0x110000)).slice(0, 8));
        }
      }
      // A file that shrinks under the hashing: the read fails, the workers are told to stop, nothing hangs.
      fs.truncateSync(file, 9 << 20);
      assert.throws(
        () => digestDescriptor(stored.fd, stored.header, file, { ecosystem: true, parallelFrom: 0 }),
        (error: Error & { code?: string }) => error.code === "IoError" && /changed while hashing/.test(error.message),
      );
    } finally {
      stored.close();
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
