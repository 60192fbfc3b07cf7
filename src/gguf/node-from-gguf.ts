/**
 * `safetensors from-gguf` as a library function: a GGUF (path or URL) to OUTDIR/model.safetensors and
 * OUTDIR/config.json, tensors dequantized chunk by chunk (whole heads where the Q/K permutation is undone) and
 * written through the streaming writer (atomic). Memory is O(chunk).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { encodeBf16, encodeF16 } from "../codecs/half.js";
import { SafetensorError } from "../format/errors.js";
import { type AtomicWriteOptions, writeFileAtomic } from "../io/node-write.js";
import { createWriter } from "../io/stream-writer.js";
import { FROM_GGUF_DTYPES, type FromGgufDtype } from "./constants.js";
import { decodeTensor } from "./file.js";
import { type NodeGgufOptions, openGguf } from "./node-gguf.js";
import { planUnconvert, unpermuteRows } from "./unconvert.js";

export { FROM_GGUF_DTYPES, type FromGgufDtype };

export interface FromGgufOptions extends NodeGgufOptions, AtomicWriteOptions {
  dtype?: FromGgufDtype;
  /** Output bytes per chunk (default 8 MiB of float32). */
  chunkBytes?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface FromGgufResult {
  readonly files: string[];
  readonly tensors: number;
  readonly skipped: readonly string[];
  readonly config: Record<string, unknown>;
}

export async function fromGguf(input: string, outDir: string, options: FromGgufOptions = {}): Promise<FromGgufResult> {
  const dtype = options.dtype ?? "F32";
  const chunkBytes = options.chunkBytes ?? 8 << 20;
  const gguf = await openGguf(input, options);
  try {
    const plan = planUnconvert(gguf.header);
    fs.mkdirSync(outDir, { recursive: true });
    const target = path.join(outDir, "model.safetensors");
    const writer = createWriter(
      target,
      plan.jobs.map((j) => [j.name, { dtype, shape: j.shape }] as const),
      { format: "pt" },
      options,
    );
    const elementBytes = dtype === "F32" ? 4 : 2;
    const total = plan.jobs.reduce((s, j) => s + j.info.elements * elementBytes, 0);
    let done = 0;
    try {
      for (const job of plan.jobs) {
        const t = job.info;
        const rowLength = t.dims[0]!;
        const oneD = t.dims.length === 1;
        const rows = oneD && job.permuteHeads > 0 ? rowLength : t.elements / rowLength;
        const perRow = oneD && job.permuteHeads > 0 ? 1 : rowLength;
        const headRows = job.permuteHeads > 0 ? rows / job.permuteHeads : 1;
        if (job.permuteHeads > 0 && (!Number.isInteger(headRows) || headRows % 2 !== 0)) {
          throw new SafetensorError(
            "InvalidGguf",
            `${t.name}: ${rows} rows cannot be split into ${job.permuteHeads} heads`,
          );
        }
        let chunkRows = Math.max(1, Math.floor(chunkBytes / (perRow * 4)));
        if (job.permuteHeads > 0) chunkRows = Math.max(headRows, Math.floor(chunkRows / headRows) * headRows);
        if (oneD && job.permuteHeads > 0) chunkRows = rows;
        const storedPerRow = (perRow / t.type.blockSize) * t.type.typeSize;
        for (let r = 0; r < rows; r += chunkRows) {
          const n = Math.min(chunkRows, rows - r);
          const raw = await gguf.source.read(t.fileOffset + r * storedPerRow, n * storedPerRow);
          let values = decodeTensor({ ...t, elements: n * perRow }, raw);
          if (job.minusOne) for (let i = 0; i < values.length; i++) values[i] = Math.fround(values[i]! - 1);
          if (job.permuteHeads > 0) {
            const out = new Float32Array(values.length);
            unpermuteRows(new Uint8Array(values.buffer), new Uint8Array(out.buffer), n, perRow * 4, headRows);
            values = out;
          }
          const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
          let bytes: Uint8Array;
          if (dtype === "F32") bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
          else {
            bytes = new Uint8Array(values.length * 2);
            (dtype === "F16" ? encodeF16 : encodeBf16)(bits, bytes);
          }
          writer.write(job.name, bytes, r * perRow * elementBytes);
          done += bytes.length;
          options.onProgress?.(done, total);
        }
      }
      const config = {
        ...plan.config,
        torch_dtype: dtype === "F32" ? "float32" : dtype === "F16" ? "float16" : "bfloat16",
      };
      writer.commit();
      writeFileAtomic(
        path.join(outDir, "config.json"),
        (fd) => {
          fs.writeSync(fd, `${JSON.stringify(config, null, 2)}\n`);
        },
        options,
      );
      return {
        files: [target, path.join(outDir, "config.json")],
        tensors: plan.jobs.length,
        skipped: plan.skipped,
        config,
      };
    } catch (error) {
      writer.abort();
      throw error;
    }
  } finally {
    await gguf.close();
  }
}
