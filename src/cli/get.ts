/** `safetensors get`: one tensor, or a numpy-style slice of it, as raw little-endian bytes. */
import { toFloat32 } from "../codecs/index.js";
import type { TensorInfo } from "../format/header.js";
import { writeAllAt, writeFileAtomic } from "../io/node-write.js";
import { openFile } from "../read/node-files.js";
import type { Tensor } from "../read/tensor.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { writeBytesToStdout } from "./io.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { isShardedTarget, openShardedInput } from "./sharded.js";

export const command = defineCommand({
  usage: "get FILE|URL NAME --out PATH [--as f32] [--slice SPEC]",
  description: `Write tensor NAME's raw little-endian bytes (row-major, as stored) to PATH, atomically; "--out -" writes
to standard output. --as f32 decodes any float dtype to float32 first.

SPEC is numpy basic indexing, one item per axis separated by commas, missing trailing axes taken whole:
  3        one index (drops the axis); negative counts from the end: -1 is the last
  1:5      a range, end exclusive; either end may be left out (":" is the whole axis)
  ::2      a step (positive); "a:b:s" combines them
  ...      as many whole axes as needed, e.g. "..., 0"
Example: --slice "-1, ::2, 1:3". Values starting with "-" are fine after --slice.`,
  options: {
    out: { type: "string", short: "o", value: "PATH", help: "where to write (- for standard output); required" },
    as: { type: "string", value: "f32", help: "decode to float32 before writing" },
    slice: { type: "string", value: "SPEC", help: "write only this numpy-style slice (syntax above)" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 2) throw new UsageError("get takes FILE and NAME");
    if (values.out === undefined) throw new UsageError("get needs --out PATH (use --out - for standard output)");
    if (values.as !== undefined && values.as !== "f32") throw new UsageError("--as only supports f32");
    const [path, name] = positionals as [string, string];
    const read = async (file: {
      info(name: string): TensorInfo;
      getTensor(name: string): Tensor | Promise<Tensor>;
      getSlice(name: string): { get(spec: string): Tensor | Promise<Tensor> };
    }): Promise<[TensorInfo, Tensor]> => {
      const info = file.info(name);
      const spec = values.slice;
      return [info, await (spec === undefined ? file.getTensor(name) : file.getSlice(name).get(spec))];
    };
    // Written while the file is open: with mmap the tensor is a view of the mapping.
    const emit = ([info, tensor]: [TensorInfo, Tensor]) => {
      let bytes = tensor.data;
      if (values.as === "f32" && info.dtype !== "F32") {
        const floats = toFloat32(info.dtype, bytes, { count: tensor.numel });
        bytes = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
      }
      if (values.out === "-") writeBytesToStdout(bytes);
      else writeFileAtomic(values.out!, (fd) => writeAllAt(fd, bytes, 0));
    };
    if (isRemoteLocation(path)) await withRemote(path, async (file) => emit(await read(file)));
    else {
      using file = isShardedTarget(path)
        ? openShardedInput(path, backend, io)
        : openFile(path, { backend: backend ?? "auto" });
      emit(await read(file));
    }
    return 0;
  },
});
