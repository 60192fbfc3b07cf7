/**
 * Opening a local file a user named, and when its bytes are not a safetensors file at all, naming what they are
 * (`NotSafetensors`, with the command or step to use) instead of a header error such as `HeaderTooLarge`. Shared by
 * the CLI's input (src/cli/input.ts, which adds standard input) and the inspector's server (src/view/node-server.ts).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import { OTHER_FORMAT_CODES, otherFormat, SNIFF_BYTES, type Sniffed } from "../format/sniff.js";
import type { SafetensorsFile } from "./file.js";
import { type Backend, openFile } from "./node-files.js";

/** How errors name an input: "-" is standard input. */
export const describeInput = (file: string) => (file === "-" ? "standard input" : file);

function firstBytes(file: string): Uint8Array {
  const fd = fs.openSync(file, "r");
  try {
    const head = new Uint8Array(SNIFF_BYTES);
    return head.subarray(0, fs.readSync(fd, head, 0, SNIFF_BYTES, 0));
  } finally {
    fs.closeSync(fd);
  }
}

function listSafetensors(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir)
      .filter((name) => name.endsWith(".safetensors"))
      .sort();
  } catch {
    return [];
  }
}

const some = (names: string[]) =>
  names.length <= 3 ? names.join(", ") : `${names.slice(0, 3).join(", ")} and ${names.length - 3} more`;

/** What to do instead, for each kind of file, worded for this package's commands. */
function advice(file: string, found: Sniffed): string {
  switch (found.format) {
    case "pytorch-zip":
    case "pytorch-legacy":
    case "pytorch-tar":
    case "pickle":
      return `convert it (without running its code) with: safetensors convert ${file} OUT.safetensors`;
    case "directory": {
      const files = listSafetensors(file);
      return files.length === 0
        ? "it holds no .safetensors file"
        : `give one of its ${files.length} .safetensors files (${some(files)})`;
    }
    case "json-index":
      // Only reached for an index that is not a *.index.json path (those are read as sharded checkpoints).
      return "inspect, validate, hash and get read a sharded checkpoint from its directory or its *.index.json path";
    case "git-lfs-pointer":
      return "fetch the real file (git lfs pull in its repository), or download it again";
    case "html":
      return "download the file itself (on the Hugging Face Hub: the .../resolve/main/FILE link, not .../blob/main/FILE)";
    case "numpy":
    case "numpy-npz":
      return "save it as safetensors with safetensors.numpy.save_file in Python";
    case "gzip":
    case "zip":
      return "unpack it first";
    case "gguf":
      return "GGUF is llama.cpp's format: inspect, validate and hash read it, from-gguf converts it to safetensors";
    case "hdf5":
      return "HDF5 weights are not read here; load them in Python and save with safetensors";
    case "empty":
      return "an interrupted download or copy?";
    case "json":
    case "text":
      return "weights are in .safetensors files";
    default:
      return "";
  }
}

/** A `NotSafetensors` error for `file`, or undefined when it may well be a damaged safetensors file. */
export function notSafetensors(
  file: string,
  head: Uint8Array,
  options: { isDirectory?: boolean; fileLength?: number; cause?: SafetensorError } = {},
): SafetensorError | undefined {
  const found = otherFormat(head, { ...options, name: path.basename(file) });
  if (found === undefined) {
    // Unrecognised bytes that cannot start a safetensors file either (no "{" after the 8-byte size): something
    // else, not a damaged safetensors file, so not HeaderTooLarge.
    if (head.length < 9 || head[8] === 0x7b) return undefined;
    const what = "not a safetensors file: no JSON header after the 8-byte size";
    return new SafetensorError(
      "NotSafetensors",
      `${describeInput(file)} is ${what}`,
      options.cause ? { cause: options.cause } : undefined,
    );
  }
  const hint = advice(file, found);
  return new SafetensorError(
    "NotSafetensors",
    `${describeInput(file)} is ${found.description}, not a safetensors file${hint ? `; ${hint}` : ""}`,
    options.cause ? { cause: options.cause } : undefined,
  );
}

/**
 * `openFile`, but a directory or a file in another format fails with `NotSafetensors` naming what it is and what to do
 * instead (not with the header error its bytes give, such as `HeaderTooLarge`).
 */
export function openLocal(file: string, backend: Backend): SafetensorsFile {
  let stat: fs.Stats | undefined;
  try {
    stat = fs.statSync(file);
  } catch {
    // openFile reports a missing or unreadable file with its own IoError.
  }
  if (stat?.isDirectory()) throw notSafetensors(file, new Uint8Array(0), { isDirectory: true })!;
  try {
    return openFile(file, { backend });
  } catch (error) {
    if (!isSafetensorError(error) || !OTHER_FORMAT_CODES.has(error.code)) throw error;
    let head: Uint8Array;
    try {
      head = firstBytes(file);
    } catch {
      throw error;
    }
    throw explainNotSafetensors(error, file, head, stat?.size);
  }
}

/** `error` as `NotSafetensors` when `head` shows the bytes are some other format, else `error` unchanged. */
export function explainNotSafetensors(
  error: unknown,
  file: string,
  head: Uint8Array,
  fileLength: number | undefined,
): unknown {
  if (!isSafetensorError(error) || !OTHER_FORMAT_CODES.has(error.code)) return error;
  return notSafetensors(file, head, { fileLength, cause: error }) ?? error;
}

/**
 * A command's error about one of its inputs told as `inspect` tells it, whichever way the command opened it: a
 * directory where a file was wanted, or a file of another format (a header check failed on a PyTorch checkpoint, a
 * git-lfs pointer...), becomes `NotSafetensors` naming what it is and what to run instead. The input is
 * `error.file` when the error names one, else the first of `inputs` it is about.
 */
export function explainInputError(error: SafetensorError, inputs: readonly string[]): SafetensorError {
  if (error.code === "NotSafetensors") return error;
  const notAFile = error.code === "IoError" && /not a regular file|EISDIR/.test(error.message);
  if (!notAFile && !OTHER_FORMAT_CODES.has(error.code)) return error;
  for (const file of error.file === undefined ? inputs : [error.file]) {
    if (file === "-" || (notAFile && !error.message.includes(file))) continue;
    let stat: fs.Stats;
    try {
      stat = fs.statSync(file);
    } catch {
      continue;
    }
    if (stat.isDirectory()) {
      if (notAFile) return notSafetensors(file, new Uint8Array(0), { isDirectory: true, cause: error }) ?? error;
      continue;
    }
    if (!stat.isFile() || notAFile) continue;
    let head: Uint8Array;
    try {
      head = firstBytes(file);
    } catch {
      continue;
    }
    const explained = notSafetensors(file, head, { fileLength: stat.size, cause: error });
    if (explained) return explained;
  }
  return error;
}
