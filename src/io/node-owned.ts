/**
 * Owned copies of file bytes (`getTensor(name, {memory: "owned"})`, `readRange`, the pread backend's reads): fresh
 * memory the caller owns, filled with positional reads. Never a mapping of the file: writes to the file or its
 * truncation after the read do not change the copy, and a file that shrank under the read gives an `IoError`.
 *
 * With the addon (native/owned.c) a large copy is one call: fresh 2 MiB-aligned memory filled 2 MiB at a time by up
 * to one thread per CPU, in huge or small pages by what the chunks cost as it goes. 32 MiB from the page cache into
 * fresh memory on a 2-vCPU VM, in one Node process (median of 30): 7.0 ms on one thread, 4.2 ms on two, 5.6 ms on
 * four (the old fixed pieces per thread). Without the addon: zeroed memory and `fs.readSync`.
 */
import { SafetensorError } from "../format/errors.js";
import { allocHuge, loadNative, MAX_WINDOW_LENGTH, type NativeAddon } from "./native.js";
import { ioError, preadInto, READ_THREADS } from "./node-file.js";

/** Owned buffers at least this large come from hugepage-backed memory when the addon is loaded. */
export const HUGE_ALLOCATION_THRESHOLD = 2 << 20;

/**
 * Memory for owned copies: hugepage-backed for large buffers when the addon is loaded (first touch of fresh 4 KiB
 * pages is what makes large copies slow), plain zeroed memory otherwise.
 */
function ownedAllocator(length: number): Uint8Array {
  if (length >= HUGE_ALLOCATION_THRESHOLD && length <= MAX_WINDOW_LENGTH && loadNative()) {
    return new Uint8Array(allocHuge(length));
  }
  return new Uint8Array(length);
}

/**
 * Threads per copy at most: as many as preadInto's large reads. The addon uses no more than the chunks (2 MiB each)
 * and the CPUs this process may use.
 */
const OWNED_THREADS = READ_THREADS;

/**
 * `length` bytes of `fd` from `position` in fresh memory the caller owns. Reads of at least
 * {@link HUGE_ALLOCATION_THRESHOLD} bytes go through the addon's `readOwned` when it has one; others (and every read
 * with an addon that lacks it, or without the addon) are allocated, then filled by {@link preadInto}. Errors are
 * `IoError`s. `addon`: the loaded addon (another only to check an older build's route).
 */
export function readOwnedFrom(
  fd: number,
  position: number,
  length: number,
  addon: Pick<NativeAddon, "readOwned"> | null = loadNative(),
): Uint8Array {
  if (length > MAX_WINDOW_LENGTH) {
    throw new SafetensorError("TooLarge", `a read of ${length} bytes exceeds this runtime's largest buffer`);
  }
  if (length >= HUGE_ALLOCATION_THRESHOLD && typeof addon?.readOwned === "function") {
    try {
      return new Uint8Array(addon.readOwned(fd, position, length, OWNED_THREADS, 0));
    } catch (error) {
      throw ioError(error, "read failed");
    }
  }
  const owned = ownedAllocator(length);
  try {
    preadInto(fd, owned, position);
  } catch (error) {
    throw ioError(error, "read failed");
  }
  return owned;
}

/**
 * The page size the last large owned copy of this process ended with ("undecided" before the first); null without the
 * addon's `readOwned`.
 */
export function ownedPageChoice(): "huge" | "small" | "undecided" | null {
  const addon = loadNative();
  return typeof addon?.ownedPages === "function" ? addon.ownedPages() : null;
}
