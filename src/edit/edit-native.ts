/**
 * The addon's functions for in-place edits (native/journal.c), typed; null when the addon is absent, disabled, or a
 * build from before them (every caller then runs its JavaScript path). Node-only.
 */
import { loadNative } from "../io/native.js";

export interface EditNative {
  crc32c(bytes: Uint8Array, crc: number): number;
  journalRanges(
    journalFd: number,
    at: number,
    crc: number,
    prefix: Uint8Array,
    fd: number,
    offsets: Float64Array,
    lengths: Float64Array,
    sync: boolean,
  ): number;
  writeRepeated(fd: number, block: Uint8Array, offset: number, length: number): void;
}

let cached: EditNative | null | undefined;

export function editNative(): EditNative | null {
  if (cached === undefined) {
    const addon = loadNative() as Partial<EditNative> | null;
    cached =
      typeof addon?.journalRanges === "function" &&
      typeof addon.crc32c === "function" &&
      typeof addon.writeRepeated === "function"
        ? (addon as EditNative)
        : null;
  }
  return cached;
}
