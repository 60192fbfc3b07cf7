/** `safetensors get`: one tensor, or a numpy-style slice of it, as a `.npy` file or raw little-endian bytes. */
import { toFloat32 } from "../codecs/index.js";
import { npyDescr, npyHeader } from "../edit/npy.js";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { writeAllAt, writeFileAtomic } from "../io/node-write.js";
import { openFile } from "../read/node-files.js";
import type { Tensor } from "../read/tensor.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { writeBytesToStdout } from "./io.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { isShardedTarget, openShardedInput } from "./sharded.js";

/** How `get` writes: raw bytes, or a `.npy` file (the header `np.save` writes, then the same bytes). */
type OutputFormat = "raw" | "npy";

function outputFormat(format: string | undefined, out: string): OutputFormat {
  if (format === undefined) return out.toLowerCase().endsWith(".npy") ? "npy" : "raw";
  if (format !== "raw" && format !== "npy")
    throw new UsageError(`--format must be raw or npy (got ${JSON.stringify(format)})`);
  return format;
}

/** ml_dtypes' name of each dtype numpy lacks (as torch names them: F8_E4M3 is float8_e4m3fn). */
const ML_DTYPES: Partial<Record<Dtype, string>> = {
  BF16: "bfloat16",
  F8_E5M2: "float8_e5m2",
  F8_E4M3: "float8_e4m3fn",
  F8_E8M0: "float8_e8m0fnu",
  F8_E4M3FNUZ: "float8_e4m3fnuz",
  F8_E5M2FNUZ: "float8_e5m2fnuz",
};

/** The `.npy` header for `tensor` (as float32 with --as f32), and a note when the dtype has no numpy type. */
function npyPrefix(dtype: Dtype, shape: readonly number[], asF32: boolean): { header: Uint8Array; note?: string } {
  const descr = asF32 ? "<f4" : npyDescr(dtype);
  if (descr === undefined) {
    throw new SafetensorError(
      "UnsupportedDtype",
      `${dtype} packs several values a byte and has no numpy type: give --as f32 to write float32 values, or --format raw`,
    );
  }
  const header = npyHeader(descr, shape);
  if (!descr.startsWith("<V")) return { header };
  const kind = ML_DTYPES[dtype] ?? "uint8";
  const note =
    `note: numpy has no ${dtype} type: wrote its items as untyped ${descr} (np.load(path).view(ml_dtypes.${kind}) ` +
    "gives the values); --as f32 writes float32 values instead\n";
  return { header, note };
}

export const command = defineCommand({
  usage: "get FILE|URL NAME --out PATH [--format npy|raw] [--as f32] [--slice SPEC]",
  description: `Write tensor NAME (or a slice of it) to PATH, atomically; "--out -" writes to standard output.

--format npy (the default when PATH ends in .npy) writes a NumPy .npy file that np.load reads: numpy's own type for
F16, F32, F64, C64, BOOL and the integer types; BF16 and the F8 types, which numpy lacks, as untyped items of their
width (<V2, <V1: what np.save writes for ml_dtypes' arrays; view them as ml_dtypes.bfloat16...), said on standard
error; with --as f32, float32 values. --format raw (the default for other names) writes the raw little-endian bytes
(row-major, as stored), with no header. --as f32 decodes any float dtype to float32 first.

SPEC is numpy basic indexing, one item per axis separated by commas, missing trailing axes taken whole:
  3        one index (drops the axis); negative counts from the end: -1 is the last
  1:5      a range, end exclusive; either end may be left out (":" is the whole axis)
  ::2      a step (positive); "a:b:s" combines them
  ...      as many whole axes as needed, e.g. "..., 0"
Example: --slice "-1, ::2, 1:3". Values starting with "-" are fine after --slice.`,
  options: {
    out: { type: "string", short: "o", value: "PATH", help: "where to write (- for standard output); required" },
    format: { type: "string", value: "FORMAT", help: "npy or raw (default: npy for a PATH ending in .npy, else raw)" },
    as: { type: "string", value: "f32", help: "decode to float32 before writing" },
    slice: { type: "string", value: "SPEC", help: "write only this numpy-style slice (syntax above)" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 2) throw new UsageError("get takes FILE and NAME");
    if (values.out === undefined) throw new UsageError("get needs --out PATH (use --out - for standard output)");
    if (values.as !== undefined && values.as !== "f32") throw new UsageError("--as only supports f32");
    const format = outputFormat(values.format, values.out);
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
      const asF32 = values.as === "f32";
      let bytes = tensor.data;
      if (asF32 && info.dtype !== "F32") {
        const floats = toFloat32(info.dtype, bytes, { count: tensor.numel });
        bytes = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
      }
      let header: Uint8Array = new Uint8Array(0);
      if (format === "npy") {
        const prefix = npyPrefix(info.dtype, tensor.shape, asF32);
        header = prefix.header;
        if (prefix.note) io.stderr(prefix.note);
      }
      if (values.out === "-") {
        writeBytesToStdout(header);
        writeBytesToStdout(bytes);
      } else {
        writeFileAtomic(values.out!, (fd) => {
          writeAllAt(fd, header, 0);
          writeAllAt(fd, bytes, header.length);
        });
      }
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
