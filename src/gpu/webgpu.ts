/**
 * The part of WebGPU this folder uses, as structural types. A `GPUDevice` from the browser, from `@webgpu/types` or
 * from the `webgpu` package (Dawn for Node) fits them, so neither our build nor a user's needs `@webgpu/types` to
 * compile against the published declarations; `loadToGPU` is generic over the device, so a caller who has those
 * types gets their own `GPUBuffer` back. test/gpu-types.test.ts checks that the real types fit these.
 */

/** `GPUBufferUsage` flags (fixed by the WebGPU specification, so usable where the global is missing). */
export const BufferUsage = {
  MAP_READ: 0x0001,
  MAP_WRITE: 0x0002,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  INDEX: 0x0010,
  VERTEX: 0x0020,
  UNIFORM: 0x0040,
  STORAGE: 0x0080,
  INDIRECT: 0x0100,
  QUERY_RESOLVE: 0x0200,
} as const;

export interface GpuBufferLike {
  readonly size: number;
  readonly usage: number;
  label: string;
  destroy(): void;
}

export interface GpuBufferDescriptor {
  label?: string;
  size: number;
  usage: number;
  mappedAtCreation?: boolean;
}

export interface GpuLimitsLike {
  readonly maxBufferSize: number;
  readonly maxStorageBufferBindingSize: number;
  readonly minStorageBufferOffsetAlignment: number;
  readonly maxComputeWorkgroupsPerDimension: number;
}

export interface GpuQueueLike {
  writeBuffer(buffer: never, bufferOffset: number, data: BufferSource, dataOffset?: number, size?: number): void;
  submit(commandBuffers: Iterable<never>): void;
  onSubmittedWorkDone(): Promise<void>;
}

export interface GpuErrorLike {
  readonly message: string;
}

/** What `loadToGPU` needs of a device. `B` is the device's buffer type (GPUBuffer). */
export interface GpuDeviceLike<B extends GpuBufferLike = GpuBufferLike> {
  readonly limits: GpuLimitsLike;
  readonly features: { has(name: string): boolean };
  readonly queue: GpuQueueLike;
  createBuffer(descriptor: GpuBufferDescriptor): B;
  createShaderModule(descriptor: { label?: string; code: string }): unknown;
  createComputePipeline(descriptor: never): unknown;
  createBindGroup(descriptor: never): unknown;
  createCommandEncoder(descriptor?: { label?: string }): unknown;
  pushErrorScope(filter: "validation" | "out-of-memory" | "internal"): void;
  popErrorScope(): Promise<GpuErrorLike | null>;
}

// The calls the converter makes, typed loosely: the structural types above stay small and the real ones fit them.
export interface ComputePipeline {
  getBindGroupLayout(index: number): unknown;
}
export interface CommandEncoder {
  beginComputePass(descriptor?: { label?: string }): ComputePass;
  copyBufferToBuffer(
    source: unknown,
    sourceOffset: number,
    destination: unknown,
    destOffset: number,
    size: number,
  ): void;
  finish(): unknown;
}
export interface ComputePass {
  setPipeline(pipeline: unknown): void;
  setBindGroup(index: number, group: unknown): void;
  dispatchWorkgroups(x: number, y?: number, z?: number): void;
  end(): void;
}
