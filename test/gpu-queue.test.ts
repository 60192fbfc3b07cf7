/**
 * loadToGPU's bound on what waits in the device's queue (`maxQueuedBytes`), in Node with a fake device whose queue
 * takes its work only when the test lets it: the bytes handed to `writeBuffer` and not yet taken never exceed the
 * bound (or one read, when a read is larger), whatever the concurrency, and every byte still arrives.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { loadToGPU } from "../src/gpu/load.js";
import type { GpuBufferDescriptor, GpuDeviceLike } from "../src/gpu/webgpu.js";
import { serialize, Tensor } from "../src/node.js";
import { fill } from "./helpers/fill.js";

interface FakeBuffer {
  readonly size: number;
  readonly usage: number;
  label: string;
  readonly bytes: Uint8Array;
  destroy(): void;
}

/** A device whose queued writes are taken 1 ms after each onSubmittedWorkDone; records the most ever waiting. */
function fakeDevice() {
  let waiting = 0;
  let most = 0;
  const device: GpuDeviceLike<FakeBuffer> = {
    limits: {
      maxBufferSize: 1 << 30,
      maxStorageBufferBindingSize: 1 << 30,
      minStorageBufferOffsetAlignment: 256,
      maxComputeWorkgroupsPerDimension: 65535,
    },
    features: { has: () => false },
    queue: {
      writeBuffer(buffer: never, offset: number, data: BufferSource, dataOffset = 0, size?: number) {
        const src = ArrayBuffer.isView(data)
          ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
          : new Uint8Array(data);
        const n = size ?? src.length - dataOffset;
        (buffer as FakeBuffer).bytes.set(src.subarray(dataOffset, dataOffset + n), offset);
        waiting += n;
        most = Math.max(most, waiting);
      },
      submit() {},
      onSubmittedWorkDone() {
        const taken = waiting;
        return new Promise<void>((resolve) =>
          setTimeout(() => {
            waiting -= Math.min(taken, waiting);
            resolve();
          }, 1),
        );
      },
    },
    createBuffer(d: GpuBufferDescriptor) {
      return { size: d.size, usage: d.usage, label: d.label ?? "", bytes: new Uint8Array(d.size), destroy() {} };
    },
    createShaderModule: () => ({}),
    createComputePipeline: () => ({}),
    createBindGroup: () => ({}),
    createCommandEncoder: () => ({}),
    pushErrorScope() {},
    popErrorScope: async () => null,
  };
  return { device, most: () => most };
}

test("what waits in the queue stays within maxQueuedBytes, and every byte arrives", async () => {
  const sizes = [3 << 20, 1_000_001, 65_537, 2 << 20];
  const tensors = new Map(sizes.map((n, i) => [`t${i}`, new Tensor("U8", [n], fill(n, i + 1))]));
  const file = new Blob([serialize(tensors) as Uint8Array<ArrayBuffer>]);
  const chunkBytes = 256 << 10;
  for (const [concurrency, maxQueuedBytes] of [
    [4, 512 << 10],
    [3, 256 << 10],
    [2, 1 << 20],
  ] as const) {
    const { device, most } = fakeDevice();
    const map = await loadToGPU(device, file, { chunkBytes, concurrency, maxQueuedBytes });
    for (const [name, t] of tensors) {
      const got = map.get(name)!.buffer!.bytes.subarray(0, t.data.length);
      assert.ok(Buffer.from(got).equals(Buffer.from(t.data)), `${name} arrived whole`);
    }
    assert.ok(
      most() <= maxQueuedBytes,
      `at most ${maxQueuedBytes} waiting, saw ${most()} (concurrency ${concurrency})`,
    );
  }
});
