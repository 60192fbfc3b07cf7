/**
 * What a file is when it is not safetensors, from its first bytes: PyTorch checkpoints (zip, legacy pickle, tar),
 * other pickles, sharded-checkpoint index files and other JSON, GGUF, NumPy, git-lfs pointers, saved HTML pages,
 * HDF5, zip and gzip. Pure (no IO): give it the first `SNIFF_BYTES` bytes of the file (fewer for a short file)
 * and whether the path is a directory.
 */

import { HEADER_ERROR_CODES } from "./errors.js";

/**
 * The header checks that fail when the bytes are some other format, rather than a damaged safetensors file: those
 * run before the header's entries are looked at (size, UTF-8, JSON, an object of objects).
 */
export const OTHER_FORMAT_CODES: ReadonlySet<string> = new Set(
  HEADER_ERROR_CODES.slice(0, HEADER_ERROR_CODES.indexOf("InvalidHeaderStructure") + 1),
);

/** How many leading bytes `sniff` looks at (a tar header needs 512; a git-lfs pointer is ~130). */
export const SNIFF_BYTES = 1024;

export type SniffedFormat =
  | "safetensors"
  | "directory"
  | "empty"
  | "pytorch-zip"
  | "pytorch-legacy"
  | "pytorch-tar"
  | "pickle"
  | "json-index"
  | "json"
  | "gguf"
  | "git-lfs-pointer"
  | "html"
  | "numpy"
  | "numpy-npz"
  | "hdf5"
  | "zip"
  | "gzip"
  | "text"
  | "unknown";

export interface Sniffed {
  format: SniffedFormat;
  /** A noun phrase for messages: "a PyTorch checkpoint (torch.save zip archive)". */
  description: string;
  /** For git-lfs pointers: the size of the real file, as the pointer states it. */
  size?: number;
}

export interface SniffOptions {
  /** The path is a directory (then `head` is ignored). */
  isDirectory?: boolean;
  /** The file's name, for formats whose first bytes are not distinctive enough (`*.index.json`). */
  name?: string;
  /** The whole file's length, when known (tells a safetensors header length that fits the file). */
  fileLength?: number;
}

const ascii = (bytes: Uint8Array, start = 0, end = bytes.length) => {
  let text = "";
  for (let i = start; i < Math.min(end, bytes.length); i++) text += String.fromCharCode(bytes[i]!);
  return text;
};

const startsWith = (bytes: Uint8Array, prefix: readonly number[], at = 0) =>
  bytes.length >= at + prefix.length && prefix.every((byte, i) => bytes[at + i] === byte);

/** torch's legacy magic number 0x1950a86a20f9469cfc6c, pickled as protocol 2 `PROTO 2` + `LONG1 10 bytes`. */
const TORCH_LEGACY_MAGIC = [0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const TORCH_TAR_MEMBERS = new Set(["sys_info", "pickle", "storages", "tensors"]);

function sniffZip(head: Uint8Array): Sniffed {
  // The first local file header: name length at 26, the name at 30. torch.save writes "<folder>/data.pkl" (or
  // "<folder>/version", ".format_version", "byteorder" in newer versions) with one top folder.
  const nameLength = head.length >= 28 ? head[26]! | (head[27]! << 8) : 0;
  const name = ascii(head, 30, 30 + nameLength);
  if (/^[^/]+\/(data\.pkl|version|\.format_version|\.storage_alignment|byteorder|data\/|\.data\/)/.test(name)) {
    return { format: "pytorch-zip", description: "a PyTorch checkpoint (torch.save zip archive)" };
  }
  if (name.endsWith(".npy")) return { format: "numpy-npz", description: "a NumPy .npz archive" };
  return { format: "zip", description: "a zip archive" };
}

function sniffText(head: Uint8Array, options: SniffOptions): Sniffed | undefined {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(head.subarray(0, Math.min(head.length, SNIFF_BYTES)));
  } catch {
    // A multi-byte character cut at the end of the head is fine; anything else is not text.
    text = new TextDecoder("utf-8").decode(head);
    if (text.slice(0, -1).includes("\uFFFD")) return undefined;
  }
  const trimmed = text.replace(/^\uFEFF/, "").trimStart();
  if (trimmed.startsWith("version https://git-lfs.github.com/spec/")) {
    const size = /^size (\d+)$/m.exec(trimmed)?.[1];
    return {
      format: "git-lfs-pointer",
      description: `a Git LFS pointer file (the real file${size ? `, ${size} bytes,` : ""} was not downloaded)`,
      ...(size ? { size: Number(size) } : {}),
    };
  }
  if (/^(<!doctype html|<html|<head|<body|<!--)/i.test(trimmed) || /^<\?xml[^>]*>\s*<html/i.test(trimmed)) {
    return { format: "html", description: "an HTML page (a saved web page, not the file it shows)" };
  }
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    if (/"weight_map"\s*:/.test(trimmed) || /\.index\.json$/i.test(options.name ?? "")) {
      return { format: "json-index", description: "a sharded checkpoint's index (JSON with a weight_map)" };
    }
    return { format: "json", description: "a JSON file" };
  }
  // Printable text throughout (tabs and line breaks allowed): a README, a script, a CSV...
  if (!/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text))
    return { format: "text", description: "a text file" };
  return undefined;
}

/** A plausible safetensors start: u64 LE header length that fits the file, then `{`. */
function looksLikeSafetensors(head: Uint8Array, fileLength: number | undefined): boolean {
  if (head.length < 9 || head[8] !== 0x7b) return false;
  let n = 0;
  for (let i = 7; i >= 0; i--) n = n * 256 + head[i]!;
  return n >= 2 && (fileLength === undefined ? n < 2 ** 40 : n <= fileLength - 8);
}

export function sniff(head: Uint8Array, options: SniffOptions = {}): Sniffed {
  if (options.isDirectory) return { format: "directory", description: "a directory" };
  if (head.length === 0) return { format: "empty", description: "an empty file" };
  if (looksLikeSafetensors(head, options.fileLength)) {
    return { format: "safetensors", description: "a safetensors file" };
  }
  if (startsWith(head, [0x50, 0x4b, 0x03, 0x04]) || startsWith(head, [0x50, 0x4b, 0x05, 0x06])) return sniffZip(head);
  if (startsWith(head, TORCH_LEGACY_MAGIC)) {
    return { format: "pytorch-legacy", description: "a legacy PyTorch checkpoint (torch.save pickle from before 1.6)" };
  }
  if (head[0] === 0x80 && head.length > 1 && head[1]! >= 2 && head[1]! <= 5) {
    return { format: "pickle", description: `a Python pickle (protocol ${head[1]})` };
  }
  if (ascii(head, 257, 262) === "ustar") {
    const member = ascii(head, 0, 100).replace(/\0.*$/s, "");
    if (TORCH_TAR_MEMBERS.has(member)) {
      return { format: "pytorch-tar", description: "a very old PyTorch checkpoint (torch.save tar archive)" };
    }
  }
  if (ascii(head, 0, 4) === "GGUF") {
    const version = head.length >= 8 ? head[4]! | (head[5]! << 8) | (head[6]! << 16) | (head[7]! << 24) : undefined;
    return { format: "gguf", description: `a GGUF model file (llama.cpp)${version ? `, version ${version}` : ""}` };
  }
  if (startsWith(head, [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]))
    return { format: "numpy", description: "a NumPy .npy array" };
  if (startsWith(head, [0x89, 0x48, 0x44, 0x46, 0x0d, 0x0a, 0x1a, 0x0a])) {
    return { format: "hdf5", description: "an HDF5 file (e.g. Keras .h5 weights)" };
  }
  if (startsWith(head, [0x1f, 0x8b])) return { format: "gzip", description: "gzip-compressed data" };
  return sniffText(head, options) ?? { format: "unknown", description: "not a safetensors file" };
}

/** What the bytes are when they are recognisably not safetensors (for error messages), else undefined. */
export function otherFormat(head: Uint8Array, options: SniffOptions = {}): Sniffed | undefined {
  const found = sniff(head, options);
  return found.format === "safetensors" || found.format === "unknown" ? undefined : found;
}
