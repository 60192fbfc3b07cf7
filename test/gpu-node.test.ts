/**
 * loadToGPU in Node through the `webgpu` package (Dawn; not a dependency: `npm i --no-save webgpu@0.6.2` to run
 * this): the corpus's 6-shard checkpoint from a private nginx and every real corpus file from disk (a Blob) into
 * buffers, read back and compared with EXPECTED.jsonl's digests; BF16 -> F32 and F8 -> F16 against the CPU codecs.
 *
 * Dawn needs a Vulkan driver, and on this project's machines (no GPU) none works reliably:
 * - Debian 12's lavapipe (mesa-vulkan-drivers 22.3) is refused: "Vulkan shaderUniform*ArrayDynamicIndexing required".
 * - Chromium's SwiftShader driver (VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json) gives an adapter and
 *   passes these tests in some runs, but Dawn's process aborts in others inside glibc's thread code (futex and
 *   pthread_mutex assertions), also in a 15-line script of plain createBuffer/writeBuffer calls while the script
 *   allocates: not ours, and not something a test can lean on. SAFETENSORS_DAWN_SWIFTSHADER=1 tries it anyway.
 * So the test runs where Dawn finds a driver by itself (a machine with a GPU) and skips, saying why, elsewhere.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { type GpuDeviceLike, loadToGPU, MemoryByteSource, serialize, Tensor } from "../src/node.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";
import { nginxBinary, nginxMissingReason, startNginx } from "./helpers/nginx.js";

const SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json";
const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

interface Buffer_ {
  readonly size: number;
  mapAsync(mode: number): Promise<void>;
  getMappedRange(): ArrayBuffer;
  unmap(): void;
  destroy(): void;
}
type Device = GpuDeviceLike<Buffer_ & { usage: number; label: string }> & { destroy(): void };
interface Encoder {
  copyBufferToBuffer(a: unknown, ao: number, b: unknown, bo: number, n: number): void;
  finish(): unknown;
}

let device: Device | null = null;
let missing: string | false = false;

before(async () => {
  if (process.env.SAFETENSORS_DAWN_SWIFTSHADER === "1" && fs.existsSync(SWIFTSHADER_ICD)) {
    process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  }
  let webgpu: { create(flags: string[]): { requestAdapter(): Promise<unknown> } };
  try {
    const name = "webgpu"; // not a dependency: resolved at run time only
    webgpu = (await import(name)) as never;
  } catch (error) {
    missing = `the webgpu package (Dawn for Node) is not installed or does not load (${(error as Error).message.split("\n")[0]}): Node WebGPU test skipped (npm i --no-save webgpu@0.6.2)`;
    return;
  }
  const adapter = (await webgpu.create([]).requestAdapter()) as {
    limits: { maxBufferSize: number; maxStorageBufferBindingSize: number };
    requestDevice(d: unknown): Promise<Device>;
  } | null;
  if (!adapter) {
    missing = `Dawn found no Vulkan driver it accepts (VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES ?? "unset"}; Debian 12's lavapipe is refused, Chromium's SwiftShader is opt-in: SAFETENSORS_DAWN_SWIFTSHADER=1): Node WebGPU test skipped`;
    return;
  }
  device = await adapter.requestDevice({
    requiredLimits: {
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    },
  });
});

after(() => {
  device?.destroy();
});

/** The bytes of a buffer, read back through a mappable copy. */
async function readBack(buffer: Buffer_): Promise<Uint8Array> {
  const d = device!;
  const copy = d.createBuffer({ size: buffer.size, usage: 0x1 | 0x8 }) as unknown as Buffer_; // MAP_READ | COPY_DST
  const encoder = d.createCommandEncoder() as Encoder;
  encoder.copyBufferToBuffer(buffer, 0, copy, 0, buffer.size);
  d.queue.submit([encoder.finish() as never]);
  await copy.mapAsync(1); // GPUMapMode.READ
  const bytes = new Uint8Array(copy.getMappedRange().slice(0));
  copy.unmap();
  copy.destroy();
  return bytes;
}

/** sha256 per tensor of the data bytes, after checking that each buffer's padding is zeros. */
async function digests(map: Awaited<ReturnType<typeof loadToGPU<Buffer_ & { usage: number; label: string }>>>) {
  const out = new Map<string, string>();
  for (const [name, t] of map) {
    const bytes = await readBack(t.buffer!);
    assert.ok(
      bytes.subarray(t.byteLength).every((b) => b === 0),
      `${name}: padding is zeros`,
    );
    out.set(name, sha(bytes.subarray(0, t.byteLength)));
    t.buffer!.destroy();
  }
  return out;
}

const skipWithout = () => missing || (device === null && "no WebGPU device");

test("Node + Dawn: the corpus's 6-shard checkpoint from nginx, read back equal to EXPECTED.jsonl", async (t) => {
  const why =
    skipWithout() || (!corpusAvailable && corpusMissingReason) || (nginxBinary === null && nginxMissingReason);
  if (why) return t.skip(why);
  const nginx = (await startNginx({ "/corpus/": corpusDir }))!;
  try {
    const map = await loadToGPU(device!, `${nginx.url}/corpus/julia-test-sharded-6/model.safetensors.index.json`);
    const want = new Map<string, string>();
    for (const file of expectedFiles().filter((f) => f.file.startsWith("julia-test-sharded-6/"))) {
      for (const tensor of file.tensors ?? []) want.set(tensor.name, tensor.sha256);
    }
    assert.ok(want.size > 0);
    assert.deepEqual(await digests(map), want);
  } finally {
    await nginx.stop();
  }
});

test("Node + Dawn: every valid corpus file from disk (a Blob), read back equal to EXPECTED.jsonl", async (t) => {
  const why = skipWithout() || (!corpusAvailable && corpusMissingReason);
  if (why) return t.skip(why);
  let files = 0;
  for (const file of expectedFiles()) {
    if (!file.ok || file.file.includes("/")) continue;
    const blob = await fs.openAsBlob(path.join(corpusDir, file.file));
    const map = await loadToGPU(device!, blob);
    const want = new Map((file.tensors ?? []).map((x) => [x.name, x.sha256]));
    const got = await digests(map);
    assert.deepEqual(new Map([...got].sort()), new Map([...want].sort()), file.file);
    files++;
  }
  assert.ok(files >= 20, `only ${files} corpus files`);
});

test("Node + Dawn: BF16 -> F32 and F8_E4M3 -> F16 on the device equal the CPU codecs", async (t) => {
  const why = skipWithout();
  if (why) return t.skip(why);
  const all16 = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
  const all8 = Uint8Array.from({ length: 256 }, (_, i) => i);
  const bytes = serialize(
    new Map([
      ["b", new Tensor("BF16", [65536], all16)],
      ["e", new Tensor("F8_E4M3", [256], all8)],
    ]),
  );
  const f32 = await loadToGPU(device!, new MemoryByteSource(bytes), { dtype: "f32", filter: ["b"] });
  const f16 = await loadToGPU(device!, new MemoryByteSource(bytes), { dtype: "f16", filter: ["e"] });
  const { toFloat32, fromFloat32 } = await import("../src/node.js");
  const wantB = new Uint8Array(toFloat32("BF16", all16).buffer);
  const wantE = fromFloat32("F16", toFloat32("F8_E4M3", all8));
  assert.equal((await digests(f32)).get("b"), sha(wantB));
  assert.equal((await digests(f16)).get("e"), sha(wantE));
});
