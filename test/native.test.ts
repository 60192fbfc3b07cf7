import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, fstatSync, ftruncateSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { SafetensorError } from "../src/format/errors.js";
import {
  ADVICES,
  allocHuge,
  freeHuge,
  loadNative,
  MAX_WINDOW_LENGTH,
  Mapping,
  type NativeAddon,
  nativeStatus,
} from "../src/io/native.js";
import { loaderArgs, moduleUrl } from "./helpers/compiled.js";
import { getGc } from "./helpers/gc.js";

const native = loadNative();
const status = nativeStatus();
if (native === null) console.error(`\n!!! native addon not built: ${status.reason} — native tests are SKIPPED !!!\n`);

/** Skips loudly when the addon is absent; returns it otherwise. */
function need(t: TestContext): NativeAddon | null {
  if (native === null) {
    t.skip(`native addon not built: ${status.reason}`);
    return null;
  }
  return native;
}

/**
 * Collects garbage and lets the addon's finalizers run (Node defers them to setImmediate), until the addon's
 * counters stop changing.
 */
async function collect(gc: () => void): Promise<void> {
  let previous = "";
  for (let i = 0, stable = 0; i < 50 && stable < 3; i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 2));
    const now = JSON.stringify(native?.stats());
    stable = now === previous ? stable + 1 : 0;
    previous = now;
  }
}

function expectError(fn: () => unknown, code: string, pattern?: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof SafetensorError, `expected SafetensorError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (pattern) assert.match(error.message, pattern);
    return true;
  });
}

/** Mapped regions of this process that belong to `path`. */
function mapsOf(path: string): number {
  return readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((line) => line.endsWith(path)).length;
}

/** Deterministic PRNG for offsets. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const GiB = 2 ** 30;
let dir = "";
let small = "";
let smallBytes = new Uint8Array(0);
let empty = "";

before(() => {
  dir = mkdtempSync(join(tmpdir(), "safetensors-native-"));
  small = join(dir, "small.bin");
  // Three pages and a bit: not a multiple of the page size.
  smallBytes = new Uint8Array(randomBytes(3 * 4096 + 1234));
  const fd = openSync(small, "w");
  writeSync(fd, smallBytes);
  closeSync(fd);
  empty = join(dir, "empty.bin");
  closeSync(openSync(empty, "w"));
});

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("native addon: loading", () => {
  it("reports its status", (t) => {
    if (!need(t)) return;
    assert.equal(status.available, true);
    assert.match(status.path ?? "", /safetensors_native\.node$|node\.napi\.glibc\.node$/);
    assert.equal(MAX_WINDOW_LENGTH, 2 ** 32);
  });

  it("SAFETENSORS_NO_NATIVE=1 makes loadNative() return null", () => {
    const native = moduleUrl(fileURLToPath(new URL("../src/io/native.ts", import.meta.url)));
    const code = `import(${JSON.stringify(native)}).then((m) => {
      let error = null;
      try { m.Mapping.open(0, 0); } catch (e) { error = e.code; }
      console.log(JSON.stringify({ isNull: m.loadNative() === null, status: m.nativeStatus(), error }));
    });`;
    const child = spawnSync(process.execPath, [...loaderArgs, "-e", code], {
      encoding: "utf8",
      env: { ...process.env, SAFETENSORS_NO_NATIVE: "1" },
      timeout: 60_000,
    });
    assert.equal(child.status, 0, child.stderr);
    const result = JSON.parse(child.stdout.trim().split("\n").at(-1) ?? "{}");
    assert.equal(result.isNull, true);
    assert.equal(result.status.available, false);
    assert.match(result.status.reason, /SAFETENSORS_NO_NATIVE/);
    assert.equal(result.error, "BackendUnavailable");
  });
});

describe("native addon: file mappings", () => {
  it("windows hold exactly the file's bytes (random, unaligned, up to the end, empty)", (t) => {
    if (!need(t)) return;
    for (const populate of [false, true]) {
      const m = Mapping.openFile(small, { populate });
      assert.equal(m.byteLength, smallBytes.length);
      const random = prng(populate ? 2 : 1);
      for (let i = 0; i < 300; i++) {
        const offset = Math.floor(random() * (smallBytes.length + 1));
        const length = Math.floor(random() * (smallBytes.length - offset + 1));
        const w = m.window(offset, length);
        assert.equal(w.byteLength, length);
        assert.deepEqual(new Uint8Array(w), smallBytes.subarray(offset, offset + length));
      }
      // Unaligned starts around page boundaries, and the file's last partial page.
      for (const offset of [1, 3, 4095, 4096, 4097, 8191, 12287, smallBytes.length - 1]) {
        assert.deepEqual(m.bytes(offset, smallBytes.length - offset), smallBytes.subarray(offset));
      }
      assert.deepEqual(m.bytes(0, smallBytes.length), smallBytes);
      // Two windows over the same bytes are fine.
      assert.deepEqual(m.bytes(100, 10), m.bytes(100, 10));
      // Empty windows, anywhere in range including the very end.
      assert.equal(m.window(0, 0).byteLength, 0);
      assert.equal(m.window(smallBytes.length, 0).byteLength, 0);
      m.close();
    }
  });

  it("refuses windows outside the file, bad numbers and too-large lengths", (t) => {
    if (!need(t)) return;
    const m = Mapping.openFile(small);
    const n = smallBytes.length;
    expectError(() => m.window(n, 1), "IoError", /ERANGE/);
    expectError(() => m.window(n + 1, 0), "IoError", /ERANGE/);
    expectError(() => m.window(1, n), "IoError", /ERANGE/);
    expectError(() => m.window(-1, 1), "IoError", /EINVAL/);
    expectError(() => m.window(1.5, 1), "IoError", /EINVAL/);
    expectError(() => m.window(Number.NaN, 1), "IoError", /EINVAL/);
    expectError(() => m.window(0, 2 ** 32 + 1), "TooLarge");
    m.close();
  });

  it("maps an empty file", (t) => {
    if (!need(t)) return;
    const m = Mapping.openFile(empty);
    assert.equal(m.byteLength, 0);
    assert.equal(m.window(0, 0).byteLength, 0);
    expectError(() => m.window(0, 1), "IoError", /ERANGE/);
    for (const advice of ADVICES) m.advise(advice);
    m.close();
    assert.equal(m.closed, true);
  });

  it("refuses a length past the end of the file and non-regular files", (t) => {
    if (!need(t)) return;
    const fd = openSync(small, "r");
    try {
      expectError(() => Mapping.open(fd, smallBytes.length + 1), "IoError", /past the end.*\(EINVAL\)/);
      // A shorter prefix is fine.
      const m = Mapping.open(fd, 10);
      assert.deepEqual(m.bytes(0, 10), smallBytes.subarray(0, 10));
      expectError(() => m.window(5, 6), "IoError", /ERANGE/);
      m.close();
    } finally {
      closeSync(fd);
    }
    const dirFd = openSync(dir, "r");
    try {
      expectError(() => Mapping.open(dirFd, 0), "IoError", /ENODEV/);
    } finally {
      closeSync(dirFd);
    }
    expectError(() => Mapping.open(-1, 0), "IoError", /EBADF/);
    expectError(() => Mapping.openFile(join(dir, "missing.bin")), "IoError", /ENOENT/);
  });

  it("windows at offsets past 4 GiB of a sparse file", (t) => {
    if (!need(t)) return;
    const path = join(dir, "sparse.bin");
    const size = 6 * GiB + 77;
    const markers: [number, number][] = [
      [4 * GiB + 3, 0xa5],
      [5 * GiB + 4097, 0x5a],
      [2 ** 32 - 1, 0x11],
      [size - 1, 0xee],
    ];
    const fd = openSync(path, "w+");
    try {
      ftruncateSync(fd, size);
      for (const [position, value] of markers) writeSync(fd, Uint8Array.of(value), 0, 1, position);
      assert.equal(fstatSync(fd).size, size);
      const m = Mapping.open(fd, size);
      try {
        for (const [position, value] of markers) {
          const bytes = m.bytes(position - 1, 2);
          assert.deepEqual([...bytes], [0, value]);
        }
        assert.equal(m.bytes(size - 5, 5)[4], 0xee);
        // The largest window there is: exactly 2^32 bytes, starting past 1 GiB.
        const big = m.window(GiB, 2 ** 32);
        assert.equal(big.byteLength, 2 ** 32);
        const view = new DataView(big);
        assert.equal(view.getUint8(4 * GiB + 3 - GiB), 0xa5);
        expectError(() => m.window(GiB, 2 ** 32 + 1), "TooLarge");
        expectError(() => m.window(size - 1, 2), "IoError", /ERANGE/);
        m.advise("willneed", 5 * GiB + 4000, 200);
        m.advise("dontneed", 4 * GiB, 8192);
        assert.equal(m.bytes(4 * GiB + 3, 1)[0], 0xa5); // refaulted from the file after dontneed
      } finally {
        m.close();
      }
    } finally {
      closeSync(fd);
      rmSync(path, { force: true });
    }
  });

  it("madvise accepts every advice, on whole mappings and unaligned ranges", (t) => {
    if (!need(t)) return;
    const m = Mapping.openFile(small);
    for (const advice of ADVICES) {
      m.advise(advice);
      m.advise(advice, 0, 1);
      m.advise(advice, 4095, 2);
      m.advise(advice, 5000);
      m.advise(advice, smallBytes.length - 1, 1);
      m.advise(advice, smallBytes.length, 0);
    }
    assert.deepEqual(m.bytes(0, smallBytes.length), smallBytes);
    expectError(() => m.advise("sometimes" as never), "IoError", /EINVAL/);
    expectError(() => m.advise("normal", smallBytes.length + 1), "IoError", /ERANGE/);
    expectError(() => m.advise("normal", 10, smallBytes.length), "IoError", /ERANGE/);
    m.close();
  });

  it("close() detaches every live window; a closed mapping refuses new windows", (t) => {
    if (!need(t)) return;
    const m = Mapping.openFile(small);
    const windows = [m.window(0, 10), m.window(4090, 100), m.window(0, smallBytes.length)];
    const views = windows.map((w) => new Uint8Array(w));
    const sub = views[2]!.subarray(5000, 6000);
    const dataView = new DataView(windows[1]!, 3, 50);
    const floats = new Float32Array(windows[2]!, 4, 16);
    assert.equal(sub[0], smallBytes[5000]);
    m.close();
    assert.equal(m.closed, true);
    for (const w of windows) assert.equal(w.byteLength, 0);
    for (const v of views) assert.equal(v.length, 0);
    assert.equal(sub.length, 0);
    assert.equal(sub[0], undefined);
    assert.equal(floats.length, 0);
    assert.throws(() => dataView.getUint8(0), TypeError);
    assert.throws(() => new Uint8Array(windows[2]!), TypeError); // new views on a detached buffer are refused
    m.close(); // idempotent
    expectError(() => m.window(0, 1), "Closed", /closed/);
    expectError(() => m.window(0, 0), "Closed");
    expectError(() => m.advise("willneed"), "Closed");
  });

  it("closing one mapping leaves other mappings of the same file alone", (t) => {
    if (!need(t)) return;
    const a = Mapping.openFile(small);
    const b = Mapping.openFile(small);
    const wa = a.bytes(0, 100);
    const wb = b.bytes(0, 100);
    a.close();
    assert.equal(wa.length, 0);
    assert.deepEqual(wb, smallBytes.subarray(0, 100));
    b.close();
  });

  it("garbage-collected windows and handles free everything exactly once", async (t) => {
    const addon = need(t);
    if (!addon) return;
    const gc = getGc();
    if (gc === null) {
      t.skip("no gc() available (run node with --expose-gc)");
      return;
    }
    await collect(gc);
    const base = addon.stats();
    // 1) windows collected while the mapping stays open, then explicit close.
    let m: Mapping | null = Mapping.openFile(small);
    ((mapping: Mapping) => {
      for (let i = 0; i < 2000; i++) mapping.window(i % 1000, 100);
    })(m);
    assert.equal(addon.stats().windows, base.windows + 2000);
    await collect(gc);
    assert.equal(addon.stats().windows, base.windows);
    assert.equal(addon.stats().mapped, base.mapped + 1);
    m.close();
    assert.equal(addon.stats().mapped, base.mapped);
    m = null;
    await collect(gc);
    assert.deepEqual(addon.stats(), base);

    // 2) handle dropped first, windows still alive: the memory stays mapped and readable until they go too.
    let kept: Uint8Array | null = (() => Mapping.openFile(small).bytes(4096, 64))();
    await collect(gc);
    assert.equal(addon.stats().mapped, base.mapped + 1);
    assert.deepEqual(kept, smallBytes.subarray(4096, 4160));
    kept = null;
    await collect(gc);
    assert.deepEqual(addon.stats(), base);

    // 3) windows detached by close() and then collected, and the handle collected after close.
    ((mapping: Mapping) => {
      for (let i = 0; i < 100; i++) mapping.window(i, 10);
      mapping.close();
    })(Mapping.openFile(small));
    await collect(gc);
    assert.deepEqual(addon.stats(), base);

    // 4) huge buffers: collected, and freed then collected.
    (() => {
      allocHuge(3 << 20);
      freeHuge(allocHuge(5 << 20));
    })();
    await collect(gc);
    assert.deepEqual(addon.stats(), base);
  });

  it("open/window/close 2,000 times leaves no mapping behind", async (t) => {
    const addon = need(t);
    if (!addon) return;
    const before = mapsOf(small);
    const base = addon.stats();
    for (let i = 0; i < 2000; i++) {
      const m = Mapping.openFile(small, { populate: i % 2 === 0 });
      const w = m.bytes(i % 4096, 100);
      assert.equal(w[0], smallBytes[i % 4096]);
      m.advise("random");
      m.close();
      assert.equal(w.length, 0);
    }
    assert.equal(mapsOf(small), before);
    assert.equal(addon.stats().mapped, base.mapped);
  });

  it("a worker can map, and exit with live windows and huge buffers without crashing", async (t) => {
    if (!need(t)) return;
    const code = `
      const { createRequire } = require("node:module");
      const { workerData, parentPort } = require("node:worker_threads");
      const addon = createRequire(workerData.addonPath)(workerData.addonPath);
      const fd = require("node:fs").openSync(workerData.file, "r");
      const h = addon.open(fd, workerData.length, false);
      const keep = [];
      for (let i = 0; i < 50; i++) keep.push(addon.window(h, i, 100));
      keep.push(addon.allocHuge(1 << 20));
      parentPort.postMessage(new Uint8Array(keep[0])[0]);
    `;
    const worker = new Worker(code, {
      eval: true,
      workerData: { addonPath: status.path, file: small, length: smallBytes.length },
    });
    const first = await new Promise((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    assert.equal(first, smallBytes[0]);
    const exitCode = await new Promise((resolve) => worker.once("exit", resolve));
    assert.equal(exitCode, 0);
  });
});

describe("native addon: hugepage memory", () => {
  it("allocHuge returns zeroed, writable memory; freeHuge detaches it", (t) => {
    if (!need(t)) return;
    const length = (8 << 20) + 123;
    const buffer = allocHuge(length);
    assert.equal(buffer.byteLength, length);
    const bytes = new Uint8Array(buffer);
    assert.ok(Buffer.from(buffer).equals(Buffer.alloc(length)), "not zeroed");
    for (let i = 0; i < length; i += 4093) bytes[i] = i & 0xff;
    bytes[length - 1] = 0x42;
    for (let i = 0; i < length; i += 4093) assert.equal(bytes[i], i & 0xff);
    assert.equal(bytes[length - 1], 0x42);
    const words = new Float64Array(buffer, 0, 16);
    words[3] = Math.PI;
    assert.equal(words[3], Math.PI);
    freeHuge(buffer);
    assert.equal(buffer.byteLength, 0);
    assert.equal(bytes.length, 0);
    assert.equal(words.length, 0);
    freeHuge(buffer); // no-op once freed
  });

  it("allocHuge edge cases", (t) => {
    if (!need(t)) return;
    assert.equal(allocHuge(0).byteLength, 0);
    assert.equal(allocHuge(1).byteLength, 1);
    expectError(() => allocHuge(2 ** 32 + 1), "TooLarge");
    expectError(() => allocHuge(-1), "IoError", /EINVAL/);
    expectError(() => freeHuge(new ArrayBuffer(8)), "IoError", /not returned by allocHuge/);
    const m = Mapping.openFile(small);
    expectError(() => freeHuge(m.window(0, 8)), "IoError", /not returned by allocHuge/);
    m.close();
    freeHuge(new ArrayBuffer(0)); // nothing to free
  });
});
