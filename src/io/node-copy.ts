/**
 * Copying a byte range from one open file to another without decoding anything: `copy_file_range(2)` through the
 * optional `safetensors_copy` addon (`native/copy.c`) where the OS has it, so the bytes stay in the kernel; otherwise
 * positional reads and writes through one reused buffer. Node-only.
 *
 * The copy addon is its own small target, separate from the mmap addon: it uses plain Node-API only (one build
 * serves every Node version) and loads on the first copy, not at import. `SAFETENSORS_NO_NATIVE=1` disables it too.
 */
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import { SafetensorError } from "../format/errors.js";
import { addonCandidates, loadFirst, runtimeRefusal } from "./native-load.js";
import { writeAllAt } from "./node-write.js";

interface CopyAddon {
  copyRange(fdIn: number, positionIn: number, fdOut: number, positionOut: number, length: number): number;
  /** Absent from builds before it was added. */
  privatePages?: (view: Uint8Array) => boolean;
  /** Absent from builds before it was added. Returns the bytes written straight from `buffers` (not bounced). */
  writeDirect?: (fd: number, buffers: readonly Uint8Array[], position: number, adaptive?: boolean) => number;
  /** Absent from builds before it was added. */
  copyDirect?: (fdIn: number, positionIn: number, fdOut: number, positionOut: number, length: number) => number;
  /** Absent from builds before it was added. */
  preallocate?: (fd: number, length: number) => boolean;
}

/**
 * Default of `directMinBytes`: writes from memory and copies at least this long bypass the page cache (O_DIRECT).
 * Measured on a 2-vCPU VM, 2.37 GiB: saveFile from memory 4.0-11 s buffered, 0.82-1.03 s direct; the same bytes
 * copied file to file in 33-262 MB pieces by copy_file_range 4.0-7.4 s: on VMs whose free memory is reported to the
 * host, every fresh page-cache page a write needs is a host fault at its first touch (native/direct_write.c).
 * Below a few MiB a direct write's wait for the device costs more than the page cache saves.
 */
export const DIRECT_MIN_BYTES = 16 << 20;

/** The package root: `src/io/` in a checkout, `dist/io/` when installed. */
const PACKAGE_ROOT = new URL("../../", import.meta.url);

let addon: CopyAddon | null | undefined;

/** Where the copy addon came from, or why it did not load (`safetensors doctor`). */
export type CopyAddonStatus =
  | { available: true; path: string; origin: "prebuild" | "build" }
  | { available: false; reason: string };
let status: CopyAddonStatus | undefined;

function loadCopyAddon(): CopyAddon | null {
  if (addon !== undefined) return addon;
  addon = null;
  const refusal = /^(1|true|yes|on)$/i.test((process.env.SAFETENSORS_NO_NATIVE ?? "").trim())
    ? "SAFETENSORS_NO_NATIVE is set"
    : runtimeRefusal();
  if (refusal) {
    status = { available: false, reason: refusal };
    return addon;
  }
  // The prebuilt binary in the package, else a build from source; neither (no compiler at install time, or not
  // loadable here): the JS copy below does the same work.
  const { candidates, rejected } = addonCandidates(fileURLToPath(PACKAGE_ROOT), "safetensors_copy");
  const load = loadFirst<CopyAddon>(candidates, { copyRange: "function" });
  addon = load.addon;
  status = load.loaded
    ? { available: true, path: load.loaded.path, origin: load.loaded.origin }
    : { available: false, reason: [...rejected, ...load.rejected].join("; ") };
  return addon;
}

/** Loads the copy addon if it has not been (it loads on the first copy otherwise) and says how that went. */
export function copyAddonStatus(): CopyAddonStatus {
  loadCopyAddon();
  return status!;
}

/**
 * Whether a view of a private file mapping may hold bytes that are not the file's: any of its pages written (copied
 * on write, now private to this process). True when that cannot be told (no addon, not Linux).
 */
export function maybeModified(view: Uint8Array): boolean {
  const native = loadCopyAddon();
  return typeof native?.privatePages === "function" ? native.privatePages(view) : true;
}

/** How the last direct writes went (for tests): bytes from the caller's memory, through the bounce buffer. */
export const directCounters = { calls: 0, fromMemory: 0, bounced: 0, refused: 0 };

/**
 * Write `buffers` back to back from `position` of `fd` bypassing the page cache (O_DIRECT for the whole pages of the
 * range, native/direct_write.c says why). False when that is not possible here (no addon, a build without it, not
 * Linux, a file system without direct I/O): the caller writes the same range through the page cache, over whatever
 * was written. Errors of the writes themselves (ENOSPC, EFBIG, ...) are thrown as raw errno errors. `adaptive`: a
 * range of 1 MiB or more goes the way that cost this process less lately, direct or through the page cache (an addon
 * built before the option ignores it and writes directly).
 */
export function writeDirect(fd: number, buffers: readonly Uint8Array[], position: number, adaptive = false): boolean {
  const native = loadCopyAddon();
  if (typeof native?.writeDirect !== "function") return false;
  let fromMemory: number;
  try {
    fromMemory = adaptive ? native.writeDirect(fd, buffers, position, true) : native.writeDirect(fd, buffers, position);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EINVAL") throw error;
    directCounters.refused++;
    return false;
  }
  let total = 0;
  for (const buffer of buffers) total += buffer.length;
  directCounters.calls++;
  directCounters.fromMemory += fromMemory;
  directCounters.bounced += total - fromMemory;
  return true;
}

/**
 * Give the file open as `fd` disk blocks for its first `length` bytes (extending it to `length` if shorter) before a
 * large output is written into it: on ext4 a file renamed over an existing one is otherwise flushed by the rename
 * (seconds for gigabytes; native/copy.c's preallocate says more), and a disk too small fails now rather than midway.
 * False when that is not possible here (no addon, not Linux, a file system without it, not a regular file): the
 * caller sizes the file itself. ENOSPC, EDQUOT and EFBIG (which the writes would meet too) are thrown as raw errno
 * errors.
 */
export function preallocate(fd: number, length: number): boolean {
  const native = loadCopyAddon();
  return typeof native?.preallocate === "function" ? native.preallocate(fd, length) : false;
}

/** errno names meaning "copy_file_range cannot do this pair of files": copy through memory instead. */
const UNSUPPORTED = new Set(["ENOSYS", "EXDEV", "EINVAL", "EOPNOTSUPP", "ENOTSUP", "EBADF", "EPERM", "ETXTBSY"]);

/**
 * Buffer size of the fallback copy: large enough that system calls cost little, small enough to be cheap to hold.
 * (Peak RSS of `safetensors shard` of the 2.37 GiB bench checkpoint: ~85 MB through this buffer without the copy
 * addon, ~68 MB with it.)
 */
export const COPY_BUFFER_BYTES = 8 << 20;

/** How the last copies were done (for tests and the `doctor` command). */
export const copyCounters = { kernel: 0, buffered: 0, direct: 0 };

export interface CopyOptions {
  /**
   * The reused buffer of the fallback copy (its whole length is used), asked for only when the fallback runs; a fresh
   * one of up to COPY_BUFFER_BYTES otherwise.
   */
  scratch?: () => Uint8Array;
  /** Skip copy_file_range and direct copies (tests of the fallback). */
  buffered?: boolean;
  /** Copies at least this long are made with direct writes where possible (default {@link DIRECT_MIN_BYTES}). */
  directMinBytes?: number;
}

/**
 * Copy `length` bytes from `fdIn` at `positionIn` to `fdOut` at `positionOut`. Neither descriptor's file offset
 * moves. Throws `IoError` if the input ends first. Errors from writing are the raw errno errors (callers map them).
 */
export function copyRange(
  fdIn: number,
  positionIn: number,
  fdOut: number,
  positionOut: number,
  length: number,
  options: CopyOptions = {},
): void {
  if (length === 0) return;
  const native = options.buffered ? null : loadCopyAddon();
  if (typeof native?.copyDirect === "function" && length >= (options.directMinBytes ?? DIRECT_MIN_BYTES)) {
    try {
      native.copyDirect(fdIn, positionIn, fdOut, positionOut, length);
      copyCounters.direct++;
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ENODATA") throw endOfInput(positionIn);
      if (code !== "EINVAL") throw error;
      // Direct I/O is not possible here: copy_file_range below rewrites the same range.
    }
  }
  if (native) {
    let copied: number | null = null;
    try {
      copied = native.copyRange(fdIn, positionIn, fdOut, positionOut, length);
    } catch (error) {
      if (!UNSUPPORTED.has(String((error as NodeJS.ErrnoException).code))) throw error;
      // Positions are explicit, so starting over through memory rewrites the same bytes: no progress to track.
    }
    if (copied !== null) {
      if (copied !== length) throw endOfInput(positionIn + copied);
      copyCounters.kernel++;
      return;
    }
  }
  copyCounters.buffered++;
  const scratch = options.scratch?.() ?? new Uint8Array(Math.min(length, COPY_BUFFER_BYTES));
  for (let done = 0; done < length; ) {
    const want = Math.min(scratch.length, length - done);
    const got = fs.readSync(fdIn, scratch, 0, want, positionIn + done);
    if (got === 0) throw endOfInput(positionIn + done);
    writeAllAt(fdOut, scratch.subarray(0, got), positionOut + done);
    done += got;
  }
}

function endOfInput(at: number): SafetensorError {
  return new SafetensorError("IoError", `cannot copy: the input ends at byte ${at} (the file shrank?)`);
}
