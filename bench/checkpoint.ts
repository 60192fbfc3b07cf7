/**
 * The synthetic Llama-style fp16 checkpoint: `check <path>` (exit 0 when the file is exactly the expected layout,
 * 3 otherwise) and `build <path>` (write it with our own `saveFile`).
 *
 * Building holds only ONE buffer, the size of the largest tensor (250 MiB): every tensor is a view of its prefix.
 * Fresh pages cost 3-25 µs each on the machines measured so far, so nothing else is allocated.
 */
import * as fs from "node:fs";
import { pathToFileURL } from "node:url";
import type { Lib } from "./figures/types.js";
import { byteLengthOf, checkpointSpec, PACKAGE_NAME } from "./spec.js";

/** The built package, as the benchmark measures it. */
const { openFile, saveFile } = (await import(PACKAGE_NAME)) as Lib;

/** Why `path` is not the expected checkpoint, or null when it is. */
export function checkCheckpoint(path: string): string | null {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(path);
  } catch {
    return "missing";
  }
  if (!stat.isFile()) return "not a regular file";
  let file: ReturnType<typeof openFile>;
  try {
    file = openFile(path, { backend: "pread" });
  } catch (error) {
    return `unreadable: ${(error as Error).message}`;
  }
  try {
    const specs = checkpointSpec();
    if (file.offsetKeys().length !== specs.length)
      return `has ${file.offsetKeys().length} tensors, want ${specs.length}`;
    let total = 0;
    for (const spec of specs) {
      if (!file.has(spec.name)) return `no tensor ${spec.name}`;
      const info = file.info(spec.name);
      if (info.dtype !== "F16" || info.shape.join(",") !== spec.shape.join(",")) {
        return `${spec.name} is ${info.dtype} [${info.shape.join(", ")}], want F16 [${spec.shape.join(", ")}]`;
      }
      total += byteLengthOf(spec.shape);
    }
    if (stat.size !== file.header.dataStart + total) return `size ${stat.size}, want ${file.header.dataStart + total}`;
    return null;
  } finally {
    file.close();
  }
}

/** Fill `out` with a cheap, non-constant pattern of finite fp16 values (|x| < 1, both signs). */
function fillPattern(out: Uint16Array): void {
  const period = Math.min(out.length, 1 << 16);
  for (let i = 0; i < period; i++) out[i] = (Math.imul(i, 40503) ^ (i >>> 5)) & 0xbbff;
  // Exponent bits are at most 0b01110, so every value is finite; the rest is copies of the first period.
  for (let filled = period; filled < out.length; filled *= 2) {
    out.copyWithin(filled, 0, Math.min(filled, out.length - filled));
  }
}

export function buildCheckpoint(path: string): void {
  const specs = checkpointSpec();
  const largest = Math.max(...specs.map((s) => byteLengthOf(s.shape)));
  const source = new Uint16Array(largest / 2);
  fillPattern(source);
  const bytes = new Uint8Array(source.buffer);
  const tensors = new Map<string, { dtype: string; shape: number[]; data: Uint8Array }>();
  for (const spec of specs) {
    tensors.set(spec.name, { dtype: "F16", shape: spec.shape, data: bytes.subarray(0, byteLengthOf(spec.shape)) });
  }
  saveFile(path, tensors, { format: "pt" });
}

function main(): void {
  const [command, path] = process.argv.slice(2);
  if (!path || (command !== "check" && command !== "build")) {
    console.error("usage: checkpoint.js check|build <path>");
    process.exit(2);
  }
  if (command === "check") {
    const problem = checkCheckpoint(path);
    if (problem) {
      console.log(problem);
      process.exit(3);
    }
    console.log("ok");
    return;
  }
  const started = performance.now();
  buildCheckpoint(path);
  const problem = checkCheckpoint(path);
  if (problem) {
    console.error(`built ${path} but it does not check: ${problem}`);
    process.exit(1);
  }
  console.log(`built ${path} in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) main();
