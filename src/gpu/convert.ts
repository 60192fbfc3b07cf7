/**
 * Conversion on the device: one compute shader turns BF16, F16, F32 and the F8 types into F32 or F16, reading the
 * raw bytes of a segment from a staging buffer and writing the tensor's buffer, so the CPU never holds decoded
 * values. The arithmetic is integer-only, a line-by-line port of src/codecs (half.ts: f16ToF32Bits, f32BitsToF16);
 * the F8 types decode through the CPU codecs' own 256-entry tables. Results equal the CPU codecs bit for bit for
 * every input (test/gpu-browser.test.ts checks every 8- and 16-bit pattern), NaN payloads and subnormals included:
 * float arithmetic on a GPU may flush subnormals or canonicalize NaNs, integer arithmetic does not.
 *
 * F16 output is written as 16-bit patterns packed two to a word, so `shader-f16` is not needed to produce it (the
 * adapter's support for it only matters to the shaders that then read the buffer).
 */
import { type Float8Dtype, float8DecodeTable } from "../codecs/float8.js";
import type { Dtype } from "../format/dtypes.js";
import type { Conversion } from "./plan.js";
import { BufferUsage, type CommandEncoder, type ComputePipeline, type GpuBufferLike } from "./webgpu.js";

export const CONVERT_WGSL = /* wgsl */ `
struct Params { count: u32, inWord: u32, outWord: u32, mode: u32, groupsX: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> table: array<u32>;

// half.ts f16ToF32Bits
fn f16ToF32(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) {
    if (m == 0u) { return sign | 0x7f800000u; }
    return sign | 0x7f800000u | 0x400000u | (m << 13u);
  }
  if (e != 0u) { return sign | ((e + 112u) << 23u) | (m << 13u); }
  if (m == 0u) { return sign; }
  let top = 31u - countLeadingZeros(m);
  return sign | ((top + 103u) << 23u) | ((m << (23u - top)) & 0x7fffffu);
}

// half.ts f32BitsToF16, with common.ts roundMagnitude(abs, 10, 15) for the subnormal range.
fn f32ToF16(x: u32) -> u32 {
  let sign = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) {
    let r = a - 0x38000000u;
    return sign | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
  }
  var e = a >> 23u;
  var sig = a & 0x7fffffu;
  if (e == 0u) { e = 1u; } else { sig = sig | 0x800000u; }
  let shift = min(126u - e, 25u);
  let kept = sig >> shift;
  let rest = sig & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  var up = 0u;
  if (rest > half || (rest == half && (kept & 1u) == 1u)) { up = 1u; }
  return sign | (kept + up);
}

// Source element i as float32 bits. mode & 3: 0 F16, 1 BF16, 2 8-bit through the table, 3 F32.
fn decode(i: u32) -> u32 {
  let kind = p.mode & 3u;
  if (kind == 3u) { return src[p.inWord + i]; }
  if (kind == 2u) { return table[(src[p.inWord + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu]; }
  let h = (src[p.inWord + (i >> 1u)] >> ((i & 1u) * 16u)) & 0xffffu;
  if (kind == 1u) { return h << 16u; }
  return f16ToF32(h);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let w = g.x + g.y * p.groupsX * 256u;
  if ((p.mode & 4u) == 0u) {
    // F32 output: one element per word.
    if (w >= p.count) { return; }
    dst[p.outWord + w] = decode(w);
    return;
  }
  // F16 output: two elements per word, low half first; a missing second element is zero.
  let i = w * 2u;
  if (i >= p.count) { return; }
  var word = f32ToF16(decode(i));
  if (i + 1u < p.count) { word = word | (f32ToF16(decode(i + 1u)) << 16u); }
  dst[p.outWord + w] = word;
}
`;

const WORKGROUP = 256;

/** The shader's mode for a conversion: source kind in bits 0-1, F16 output in bit 2. */
function modeOf(conversion: Conversion): number {
  const source = conversion.startsWith("f16")
    ? 0
    : conversion.startsWith("bf16")
      ? 1
      : conversion.startsWith("f8")
        ? 2
        : 3;
  return source | (conversion.endsWith("f16") ? 4 : 0);
}

const SOURCE_BYTES: Record<number, number> = { 0: 2, 1: 2, 2: 1, 3: 4 };

interface Device {
  readonly limits: { maxStorageBufferBindingSize: number; minStorageBufferOffsetAlignment: number };
  readonly queue: {
    writeBuffer(
      buffer: unknown,
      offset: number,
      data: Uint8Array | Uint32Array,
      dataOffset?: number,
      size?: number,
    ): void;
    submit(buffers: unknown[]): void;
  };
  createBuffer(descriptor: { label?: string; size: number; usage: number }): GpuBufferLike;
  createShaderModule(descriptor: { label?: string; code: string }): unknown;
  createComputePipeline(descriptor: unknown): ComputePipeline;
  createBindGroup(descriptor: unknown): unknown;
  createCommandEncoder(descriptor?: { label?: string }): CommandEncoder;
}

const pipelines = new WeakMap<object, ComputePipeline>();

/**
 * Converts segments on one device: a staging buffer for the source bytes (`stagingBytes` long, reused: queue writes
 * and submissions run in the order issued), a small uniform buffer, and one table buffer per 8-bit dtype in use.
 */
export class Converter {
  private readonly device: Device;
  private readonly staging: GpuBufferLike;
  private readonly params: GpuBufferLike;
  private readonly tables = new Map<Dtype, GpuBufferLike>();
  private readonly pipeline: ComputePipeline;

  constructor(device: unknown, stagingBytes: number) {
    this.device = device as Device;
    let pipeline = pipelines.get(device as object);
    if (pipeline === undefined) {
      const module = this.device.createShaderModule({ label: "safetensors-ts convert", code: CONVERT_WGSL });
      pipeline = this.device.createComputePipeline({
        label: "safetensors-ts convert",
        layout: "auto",
        compute: { module, entryPoint: "main" },
      });
      pipelines.set(device as object, pipeline);
    }
    this.pipeline = pipeline;
    this.staging = this.device.createBuffer({
      label: "safetensors-ts staging",
      size: Math.ceil(stagingBytes / 4) * 4 + 4,
      usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
    });
    this.params = this.device.createBuffer({
      label: "safetensors-ts params",
      size: 32,
      usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
    });
  }

  private table(dtype: Dtype): GpuBufferLike {
    // Non-8-bit conversions bind an unused table; any of them fits.
    const key: Dtype = dtype.startsWith("F8_") ? dtype : "F8_E4M3";
    let buffer = this.tables.get(key);
    if (buffer === undefined) {
      buffer = this.device.createBuffer({
        label: `safetensors-ts ${key} table`,
        size: 1024,
        usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
      });
      this.device.queue.writeBuffer(buffer, 0, float8DecodeTable(key as Float8Dtype));
      this.tables.set(key, buffer);
    }
    return buffer;
  }

  /**
   * Convert `bytes` (whole source elements) of a `dtype` tensor and write the result at byte `outOffset` (a multiple
   * of 4) of `out`.
   */
  run(conversion: Conversion, dtype: Dtype, bytes: Uint8Array, out: GpuBufferLike, outOffset: number): void {
    const mode = modeOf(conversion);
    const count = bytes.length / SOURCE_BYTES[mode & 3]!;
    const f16 = (mode & 4) !== 0;
    const words = f16 ? Math.ceil(count / 2) : count;
    if (words === 0) return;
    writePadded(this.device.queue, this.staging, 0, bytes);
    // The output window: bound from an aligned offset, as long as this segment's words.
    const align = this.device.limits.minStorageBufferOffsetAlignment;
    const windowStart = Math.floor(outOffset / align) * align;
    const windowSize = outOffset - windowStart + words * 4;
    const groups = Math.ceil(words / WORKGROUP);
    const groupsX = Math.min(groups, 65535);
    const groupsY = Math.ceil(groups / groupsX);
    this.device.queue.writeBuffer(
      this.params,
      0,
      new Uint32Array([count, 0, (outOffset - windowStart) / 4, mode, groupsX, 0, 0, 0]),
    );
    const bindGroup = this.device.createBindGroup({
      layout: this.pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: this.params } },
        { binding: 1, resource: { buffer: this.staging, offset: 0, size: Math.ceil(bytes.length / 4) * 4 } },
        { binding: 2, resource: { buffer: out, offset: windowStart, size: windowSize } },
        { binding: 3, resource: { buffer: this.table(dtype) } },
      ],
    });
    const encoder = this.device.createCommandEncoder({ label: "safetensors-ts convert" });
    const pass = encoder.beginComputePass();
    pass.setPipeline(this.pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(groupsX, groupsY);
    pass.end();
    this.device.queue.submit([encoder.finish()]);
  }

  destroy(): void {
    this.staging.destroy();
    this.params.destroy();
    for (const buffer of this.tables.values()) buffer.destroy();
  }
}

/**
 * `queue.writeBuffer` of any length: WebGPU wants a multiple of 4 bytes, so the last 1-3 bytes go in a zero-padded
 * 4-byte write after the aligned part (`offset` must be a multiple of 4).
 */
export function writePadded(queue: Device["queue"], buffer: unknown, offset: number, bytes: Uint8Array): void {
  const aligned = bytes.length - (bytes.length % 4);
  if (aligned > 0) queue.writeBuffer(buffer, offset, bytes, 0, aligned);
  if (aligned < bytes.length) {
    const tail = new Uint8Array(4);
    tail.set(bytes.subarray(aligned));
    queue.writeBuffer(buffer, offset + aligned, tail);
  }
}
