/**
 * Loader and typed wrapper for the optional C addon (`native/safetensors_native.c`, built by `npm install` into
 * `build/Release/safetensors_native.node`): read-only file mappings with zero-copy windows, madvise, and
 * hugepage-backed anonymous memory. Node-only. Everything here works without the addon too: `loadNative()`
 * returns null and the classes throw `SafetensorError("BackendUnavailable")`.
 *
 * Lifetime rules
 * - A `Mapping` is the mmap of one file (`MAP_PRIVATE`, copy-on-write). The file descriptor may be closed right
 *   after `Mapping.open`: the mapping does not need it.
 * - `window(offset, length)` returns an ArrayBuffer that *is* the mapped bytes (no copy), at most 2^32 bytes.
 *   Each window keeps the mapping alive: if the `Mapping` object is dropped, the memory is unmapped only after
 *   every window has been garbage collected too.
 * - `close()` unmaps at once and detaches every window still alive: their `byteLength` (and that of every view
 *   on them) becomes 0, so no JS code can ever read unmapped memory. New windows are refused (`Closed`).
 * - Windows and huge buffers never move to another thread, out of reach of `close()` / `freeHuge()`: the addon makes
 *   them their own detach keys (a transfer throws), or, without safetensors_v8, `markAsUntransferable` marks them
 *   where it can (see `marks`).
 * - The file must not be truncated while mapped (reading past the new end would raise SIGBUS: an OS rule
 *   no library can catch). Safetensors files are written once, so this is the usual contract for mmap readers.
 * - `allocHuge(length)` returns zeroed, writable memory backed by transparent huge pages where the kernel allows
 *   it; it is unmapped by garbage collection, or at once by `freeHuge(buffer)` (which detaches the buffer).
 */
import { closeSync, fstatSync, openSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { markAsUntransferable } from "node:worker_threads";
import type { Accelerators } from "../format/accelerators.js";
import { DTYPES, dtypeInfo } from "../format/dtypes.js";
import { SafetensorError, systemErrorText } from "../format/errors.js";
import { type AddonOrigin, addonCandidates, loadFirst, runtimeRefusal, UNCOUNTED_TARGET } from "./native-load.js";

/** `madvise` advice names accepted by {@link Mapping.advise}. */
export type Advice = "normal" | "random" | "sequential" | "willneed" | "dontneed" | "hugepage";

export const ADVICES: readonly Advice[] = ["normal", "random", "sequential", "willneed", "dontneed", "hugepage"];

/** Largest window or huge allocation: one external ArrayBuffer in Node 20 holds at most 2^32 bytes. */
export const MAX_WINDOW_LENGTH = 2 ** 32;

declare const handleBrand: unique symbol;
/** Opaque mapping handle of the raw addon. */
export type NativeHandle = { readonly [handleBrand]: true };

/** Process-wide counters kept by the addon (for leak checks and `doctor`). */
export interface NativeStats {
  /** Mapping structs alive (handle or some window not yet collected). */
  mappings: number;
  /** File mappings currently mmapped. */
  mapped: number;
  /** Windows whose finalizer has not run yet (detached ones included until then). */
  windows: number;
  /** Huge allocations currently mmapped. */
  hugeAllocations: number;
  /** Huge ArrayBuffers whose finalizer has not run yet. */
  hugeBuffers: number;
  /** Bytes currently mmapped by huge allocations (rounded up to 2 MiB each). */
  hugeBytes: number;
}

/** The raw addon. Its functions throw plain Errors whose `code` is an errno name; prefer the wrappers below. */
export interface NativeAddon {
  /**
   * Open read-only, fstat, read the first min(head.length, size) bytes into `head`; `info` gets [fd, size, st_dev,
   * st_ino, journal state]: 1 or 0 when `journal` and the addon could tell whether the file's edit journal exists,
   * else -1.
   */
  openHead(path: string, head: Uint8Array, info: Float64Array, journal: boolean): number;
  /** Fill `array` from the file at `position`, split across up to `threads` threads; blocks until done. */
  preadInto(fd: number, array: Uint8Array, position: number, threads: number): void;
  open(fd: number, length: number, populate: boolean): NativeHandle;
  window(handle: NativeHandle, offset: number, length: number): ArrayBuffer;
  advise(handle: NativeHandle, advice: Advice, offset?: number, length?: number): void;
  /** Read one byte of every page of the mapping, split across `threads` threads. */
  prefault(handle: NativeHandle, threads: number): void;
  close(handle: NativeHandle): void;
  isClosed(handle: NativeHandle): boolean;
  allocHuge(length: number): ArrayBuffer;
  freeHuge(buffer: ArrayBuffer): void;
  /**
   * `length` bytes of the file from `position` in fresh anonymous memory the caller owns (freed like allocHuge's:
   * by GC or freeHuge), read by up to `threads` threads; `pages`: 0 = chosen chunk by chunk as the threads go,
   * 1 = huge, 2 = small; `chunks` gets how many 2 MiB chunks went into huge and small pages. native/owned.c;
   * optional (an older build lacks it).
   */
  readOwned?(
    fd: number,
    position: number,
    length: number,
    threads: number,
    pages: number,
    chunks?: Float64Array,
  ): ArrayBuffer;
  /** The page size readOwned's last adaptive copy ended with. Optional, as readOwned. */
  ownedPages?(): "huge" | "small" | "undecided";
  stats(): NativeStats;
  /** See native/header_scan.c: numbers written to `out`, -1 (not the simple form), -2 (`out` too small). */
  scanHeader(bytes: Uint8Array, out: Float64Array): number;
  /**
   * native/header_scan.c: the scan with src/format/scanned.ts's checks made in C; numbers written to `out`, -1 (not
   * the checked form), -2 (`out` too small). Optional, as loadViews, which runs it.
   */
  scanChecked?(
    bytes: Uint8Array,
    fileLength: number,
    out: Float64Array,
    dtypeNames: string,
    dtypeBits: Float64Array,
  ): number;
  /**
   * native/safetensors_native.c: open, check the header, map the file and make one uncounted window over all of it,
   * in one call (see there); null where the ordinary way must read the file, -2 when `out` is too small. Optional: an
   * older build lacks it, and loadFile then reads the ordinary way.
   */
  loadViews?(
    path: string,
    out: Float64Array,
    names: string[],
    journal: boolean,
    maxHeaderBytes: number,
    dtypeNames: string,
    dtypeBits: Float64Array,
  ): ArrayBuffer | null | -2;
  /**
   * Hostile-header helpers (native/header_scan.c; see src/format/accelerators.ts). Optional: a build without them
   * loads and the reader runs its JavaScript loops instead, with the same results.
   */
  scanRun?(bytes: Uint8Array, from: number, kind: number): number;
  findSyntaxError?(bytes: Uint8Array): number;
  readonly pageSize: number;
  readonly hugePageSize: number;
  readonly maxWindowLength: number;
  /** Bumped whenever a function's arguments or results change: see NATIVE_INTERFACE_VERSION. */
  readonly interfaceVersion: number;
  /**
   * True when windows are ArrayBuffers V8 does not count as external memory (so making them never triggers a GC):
   * after useUncountedWindows; false: every window adds its length to V8's external-memory count.
   */
  uncountedWindows(): boolean;
  /**
   * Hands over the `arraybuffer` of safetensors_v8 (native/unaccounted.h), built for this Node's ABI; `key`: windows
   * and huge buffers are made their own detach keys.
   */
  useUncountedWindows(api: object, key: boolean): void;
}

/** safetensors_v8 (native/unaccounted.cc): one binary per Node ABI. */
interface UncountedAddon {
  /** The NODE_MODULE_VERSION it was built for. */
  readonly abi: number;
  /** Absent where V8's API cannot make such buffers (sandboxed V8). */
  readonly arraybuffer?: object;
}

/**
 * Every required member of {@link NativeAddon} with its `typeof`: the loader refuses an addon that lacks any of them
 * (a stale or partial build) instead of failing later inside an open. The compiler keeps this table and the interface
 * in step: a member added to one and not the other is a type error here.
 */
export const ADDON_SHAPE: {
  readonly [K in keyof NativeAddon as undefined extends NativeAddon[K] ? never : K]-?: NativeAddon[K] extends (
    ...args: never[]
  ) => unknown
    ? "function"
    : NativeAddon[K] extends number
      ? "number"
      : "object";
} = {
  openHead: "function",
  preadInto: "function",
  open: "function",
  window: "function",
  advise: "function",
  prefault: "function",
  close: "function",
  isClosed: "function",
  allocHuge: "function",
  freeHuge: "function",
  stats: "function",
  scanHeader: "function",
  pageSize: "number",
  hugePageSize: "number",
  maxWindowLength: "number",
  interfaceVersion: "number",
  uncountedWindows: "function",
  useUncountedWindows: "function",
};

/**
 * The addon interface this code calls (`interfaceVersion` in native/safetensors_native.c). A binary with the same
 * function names but older arguments (a stale build left in build/) would fail every open; it is passed over instead.
 */
export const NATIVE_INTERFACE_VERSION = 5;

export interface NativeStatus {
  available: boolean;
  /** Where the addon was loaded from. */
  path?: string;
  /** "prebuild": the binary shipped in the package; "build": built from source at install. */
  origin?: AddonOrigin;
  /** Why it is not available. */
  reason?: string;
  /** Candidates that were there but refused before the one loaded (broken or stale), with the reason for each. */
  skipped?: string[];
  /** With the addon: whether its windows escape V8's external-memory count, through which binary, or why not. */
  windows?: WindowsStatus;
}

export interface WindowsStatus {
  /** True: windows are not counted by V8 (opening a mapped file never starts a GC). */
  uncounted: boolean;
  /** safetensors_v8, when it loaded. */
  path?: string;
  origin?: AddonOrigin;
  /** Why windows are counted. */
  reason?: string;
}

/**
 * Whether worker_threads.markAsUntransferable leaves a buffer that cannot be detached (Node 24 and later: a detach key
 * of Node's own). There the addon makes windows their own detach keys instead (native/unaccounted.h). Decided once:
 * known from the version on Node 24 and later, so that importing the package there does not load node:worker_threads
 * (~25 internal modules; the import of the Node entry took 2-3 ms less, and ~100 KiB less young-generation garbage
 * made the first scavenge (~1 ms) land inside the first loadFile less often); probed elsewhere (Node 20 and 22, Bun,
 * Deno), where marking windows needs the module anyway.
 */
function markingBlocksDetach(): boolean {
  marking ??= nodeMajor() >= 24 || markingProbe();
  return marking;
}

let marking: boolean | undefined;

/** Node's major version; 0 in runtimes that only say which Node they emulate (Bun, Deno). */
function nodeMajor(): number {
  const versions = process.versions as Record<string, string | undefined>;
  if (versions.bun !== undefined || versions.deno !== undefined) return 0;
  return Number(versions.node?.split(".")[0]) || 0;
}

function markingProbe(): boolean {
  const probe = new ArrayBuffer(1);
  markAsUntransferable(probe);
  try {
    (probe as { transfer?: () => ArrayBuffer }).transfer?.call(probe);
    return false;
  } catch {
    return true;
  }
}

/** Decided once, at the addon's load. */
let keyed = false;

/** The package root: `src/io/` in a checkout, `dist/io/` when installed. */
const PACKAGE_ROOT = new URL("../../", import.meta.url);

let loaded: { addon: NativeAddon | null; status: NativeStatus } | undefined;

function disabledByEnv(): boolean {
  const value = process.env.SAFETENSORS_NO_NATIVE;
  return value !== undefined && /^(1|true|yes|on)$/i.test(value.trim());
}

function load(): { addon: NativeAddon | null; status: NativeStatus } {
  if (disabledByEnv()) return { addon: null, status: { available: false, reason: "SAFETENSORS_NO_NATIVE is set" } };
  const refused = runtimeRefusal();
  if (refused) return { addon: null, status: { available: false, reason: refused } };
  let root: string;
  try {
    root = fileURLToPath(PACKAGE_ROOT);
  } catch (error) {
    return { addon: null, status: { available: false, reason: `cannot locate the addon: ${messageOf(error)}` } };
  }
  const { candidates, rejected: absent } = addonCandidates(root);
  const result = loadFirst<NativeAddon>(candidates, ADDON_SHAPE, { interfaceVersion: NATIVE_INTERFACE_VERSION });
  const passed = [...absent, ...result.rejected];
  if (result.addon === null || result.loaded === undefined) {
    return { addon: null, status: { available: false, reason: passed.join("; ") } };
  }
  const status: NativeStatus = { available: true, path: result.loaded.path, origin: result.loaded.origin };
  if (result.rejected.length > 0) status.skipped = [...result.rejected];
  status.windows = useUncounted(root, result.addon);
  return { addon: result.addon, status };
}

/** Bun, whose addons load through its own Node-API on JavaScriptCore (no V8 API to link against), if it runs this. */
function otherRuntime(): string | undefined {
  const versions = process.versions as Record<string, string | undefined>;
  return versions.bun === undefined ? undefined : `Bun ${versions.bun} runs JavaScriptCore, not V8`;
}

/**
 * Loads safetensors_v8 for this Node's ABI and hands it to the main addon, so that windows are not counted by V8
 * (native/unaccounted.h has the measurements: a counted 2.5 GB window costs a 7-110 ms full GC at creation). Without
 * it the addon still works, with counted windows. Never throws.
 */
function useUncounted(root: string, addon: NativeAddon): WindowsStatus {
  const other = otherRuntime();
  if (other) return { uncounted: false, reason: other };
  const abi = Number(process.versions.modules);
  const { candidates, rejected: absent } = addonCandidates(root, UNCOUNTED_TARGET);
  const shape = { abi: "number", arraybuffer: "object" } as const;
  const result = loadFirst<UncountedAddon>(candidates, shape, { abi });
  if (result.addon === null || result.loaded === undefined || result.addon.arraybuffer === undefined) {
    return { uncounted: false, reason: [...absent, ...result.rejected].join("; ") };
  }
  try {
    keyed = markingBlocksDetach();
    addon.useUncountedWindows(result.addon.arraybuffer, keyed);
  } catch (error) {
    return { uncounted: false, reason: `${result.loaded.path}: ${messageOf(error)}` };
  }
  return { uncounted: addon.uncountedWindows(), path: result.loaded.path, origin: result.loaded.origin };
}

/** The addon, loaded once; null when it is absent, broken, or disabled by `SAFETENSORS_NO_NATIVE=1`. Never throws. */
export function loadNative(): NativeAddon | null {
  loaded ??= load();
  return loaded.addon;
}

/**
 * The addon as `T` when every one of `functions` is a function on it (an addon built from older sources may lack
 * newer optional functions), else null.
 */
export function nativeWith<T>(functions: readonly (keyof T & string)[]): T | null {
  const addon = loadNative() as Record<string, unknown> | null;
  if (addon === null) return null;
  return functions.every((name) => typeof addon[name] === "function") ? (addon as T) : null;
}

/** Whether the addon is usable, where it lives and, if not, why (for the `doctor` command). Never throws. */
export function nativeStatus(): NativeStatus {
  loaded ??= load();
  return { ...loaded.status };
}

/** The addon, or `SafetensorError("BackendUnavailable")`. */
export function requireNative(): NativeAddon {
  const addon = loadNative();
  if (addon === null) {
    throw new SafetensorError("BackendUnavailable", `native addon unavailable: ${nativeStatus().reason ?? "unknown"}`);
  }
  return addon;
}

function messageOf(error: unknown): string {
  return String((error as { message?: unknown } | null)?.message ?? error).split("\n")[0] ?? "";
}

/** Native errors become `IoError`, the system error said once with its errno name, the original error as `cause`. */
function toSafetensorError(error: unknown, what: string): SafetensorError {
  if (error instanceof SafetensorError) return error;
  return new SafetensorError("IoError", `${what}: ${systemErrorText(error)}`, { cause: error });
}

function checkLength(length: number, what: string): void {
  if (typeof length === "number" && length > MAX_WINDOW_LENGTH) {
    throw new SafetensorError(
      "TooLarge",
      `${what} of ${length} bytes is larger than one ArrayBuffer can hold here (${MAX_WINDOW_LENGTH})`,
    );
  }
}

/**
 * Windows and huge buffers must stay where they are (close() and freeHuge() unmap them). Through Node 22
 * markAsUntransferable keeps them out of postMessage. From Node 24 it would leave them impossible to detach: there the
 * addon keys windows itself where safetensors_v8 is loaded (`keyed`), and huge buffers (and windows without it) stay
 * transferable.
 */
// The parentheses make V8 compile it with the module: through Node 22 loadFile's first call runs it (mapViews), and
// would otherwise parse it a second time there (see read/node-files.ts loadMapped).
// biome-ignore format: the parentheses make V8 compile it with the module
const untransferableHuge = (function untransferableHuge(buffer: ArrayBuffer): ArrayBuffer {
  if (buffer.byteLength > 0 && !markingBlocksDetach()) markAsUntransferable(buffer);
  return buffer;
});

function untransferable(buffer: ArrayBuffer): ArrayBuffer {
  return keyed ? buffer : untransferableHuge(buffer);
}

export interface MappingOptions {
  /** `MAP_POPULATE`: read the whole file into the page tables now (fast for cached files, slow for cold ones). */
  populate?: boolean;
}

/** A private (copy-on-write) memory mapping of one file: writes through views never reach the file. */
export class Mapping {
  readonly #addon: NativeAddon;
  readonly #handle: NativeHandle;
  #closed = false;
  /** Bytes of the file that are mapped. */
  readonly byteLength: number;

  private constructor(addon: NativeAddon, handle: NativeHandle, byteLength: number) {
    this.#addon = addon;
    this.#handle = handle;
    this.byteLength = byteLength;
  }

  /**
   * Maps the first `length` bytes of the open regular file `fd` (from `fs.openSync`). `length` must not exceed
   * the file size. The fd may be closed afterwards.
   */
  static open(fd: number, length: number, opts?: MappingOptions): Mapping {
    const addon = requireNative();
    try {
      return new Mapping(addon, addon.open(fd, length, opts?.populate === true), length);
    } catch (error) {
      throw toSafetensorError(error, "mmap");
    }
  }

  /** Opens, maps the whole file and closes the descriptor. */
  static openFile(path: string, opts?: MappingOptions): Mapping {
    requireNative();
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch (error) {
      throw toSafetensorError(error, `cannot open ${path}`);
    }
    try {
      return Mapping.open(fd, fstatSync(fd).size, opts);
    } catch (error) {
      throw toSafetensorError(error, `map ${JSON.stringify(path)}`);
    } finally {
      closeSync(fd);
    }
  }

  /** True once `close()` has run. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * The bytes [offset, offset + length) of the file as an ArrayBuffer over the mapping (no copy). Writes through it
   * change a private copy of the touched pages, never the file. At most 2^32 bytes (`TooLarge`); offsets may exceed
   * 4 GiB.
   */
  window(offset: number, length: number): ArrayBuffer {
    this.#checkOpen();
    checkLength(length, "window");
    try {
      return untransferable(this.#addon.window(this.#handle, offset, length));
    } catch (error) {
      throw toSafetensorError(error, "window");
    }
  }

  /** `new Uint8Array(this.window(offset, length))`. */
  bytes(offset: number, length: number): Uint8Array {
    return new Uint8Array(this.window(offset, length));
  }

  /** `madvise` over [offset, offset + length) widened to whole pages; defaults to the whole mapping. */
  advise(advice: Advice, offset?: number, length?: number): void {
    this.#checkOpen();
    try {
      this.#addon.advise(this.#handle, advice, offset, length);
    } catch (error) {
      throw toSafetensorError(error, `madvise(${String(advice)})`);
    }
  }

  /**
   * Touch every page now, with `threads` threads, so later reads take no page fault. On the VMs measured, the first
   * access of each mapped page stayed slow even after MAP_POPULATE; done in parallel it costs less than in line.
   */
  prefault(threads = 4): void {
    this.#checkOpen();
    try {
      this.#addon.prefault(this.#handle, threads);
    } catch (error) {
      throw toSafetensorError(error, "prefault");
    }
  }

  /** Unmaps now and detaches every live window. Idempotent. */
  close(): void {
    if (this.#closed) return;
    try {
      this.#addon.close(this.#handle);
    } catch (error) {
      throw toSafetensorError(error, "munmap");
    }
    this.#closed = true;
  }

  #checkOpen(): void {
    if (this.#closed) throw new SafetensorError("Closed", "the mapping is closed");
  }
}

/** Reused by every open: the native call writes the head and [fd, size, dev, ino, journal] here, allocating nothing. */
let headScratch = new Uint8Array(0);
const headInfo = new Float64Array(5);

/** An open regular file, its first bytes and what the open learnt about it. */
export interface OpenedFile {
  fd: number;
  size: number;
  /** The file's first bytes (at least its header when that fits in the bytes read at open), memory of its own. */
  head: Uint8Array;
  /** The file's identity (`fs.fstatSync`'s dev and ino), taken on the open descriptor. */
  dev: number;
  ino: number;
  /**
   * Whether the file's edit journal exists, when the open could tell at no extra cost (the addon stats its path in
   * the same call); undefined otherwise (ask `hasJournal`).
   */
  journal: boolean | undefined;
}

/**
 * Open a regular file read-only and read its first `headLength` bytes (fewer for a shorter file) in one native call,
 * with the stat of its edit journal's path when `journal` (what every reader checks); null without the addon. The
 * head is a copy of the first `keep(buffer, bytes read, size)` bytes read. (It was a view of the reused buffer, valid
 * until the next open, to save a ~5 KB copy per open: a process opening the 23 valid corpus files 100 times each and
 * reading a tensor of each measured the same with and without that copy, cpu 0.665 vs 0.630 s median of 11
 * interleaved runs, ratio 0.998, spread 0.93-1.17; so it was removed, issue 19.)
 * The caller owns (and closes) `fd`.
 */
export function openHead(
  path: string,
  headLength: number,
  keep: (head: Uint8Array, length: number, size: number) => number,
  journal: boolean,
): OpenedFile | null {
  const addon = loadNative();
  if (!addon) return null;
  if (headScratch.length !== headLength) headScratch = new Uint8Array(headLength);
  let got: number;
  try {
    got = addon.openHead(path, headScratch, headInfo, journal);
  } catch (error) {
    throw toSafetensorError(error, `cannot open ${path}`);
  }
  const size = headInfo[1]!;
  const state = headInfo[4];
  const head = headScratch.slice(0, keep(headScratch, got, size));
  const journalState = state === 1 ? true : state === 0 ? false : undefined;
  return new AddonOpenedFile(headInfo[0]!, size, head, headInfo[2]!, headInfo[3]!, journalState);
}

/**
 * Every OpenedFile the addon's open makes is one of these: a class, whose objects are built by plain stores (an object
 * literal with double fields is copied from its boilerplate by a runtime call, and migrated after every GC).
 */
class AddonOpenedFile implements OpenedFile {
  constructor(
    readonly fd: number,
    readonly size: number,
    readonly head: Uint8Array,
    readonly dev: number,
    readonly ino: number,
    readonly journal: boolean | undefined,
  ) {}
}

/**
 * Fill `target` with the file's bytes from `position` using up to `threads` threads (blocking); false without the
 * addon, so the caller reads another way.
 */
export function preadParallel(fd: number, target: Uint8Array, position: number, threads: number): boolean {
  const addon = loadNative();
  if (!addon) return false;
  try {
    addon.preadInto(fd, target, position, threads);
    return true;
  } catch (error) {
    throw toSafetensorError(error, "read");
  }
}

/**
 * `length` bytes of zeroed, writable, 2 MiB aligned anonymous memory advised `MADV_HUGEPAGE` (first touch is
 * ~50x cheaper than 4 KiB pages). Freed by garbage collection, or now by {@link freeHuge}. At most 2^32 bytes.
 */
export function allocHuge(length: number): ArrayBuffer {
  const addon = requireNative();
  checkLength(length, "allocHuge");
  try {
    return untransferableHuge(addon.allocHuge(length));
  } catch (error) {
    throw toSafetensorError(error, "allocHuge");
  }
}

/** Unmaps an {@link allocHuge} buffer now and detaches it (every view becomes empty). No-op if already freed. */
export function freeHuge(buffer: ArrayBuffer): void {
  const addon = requireNative();
  try {
    addon.freeHuge(buffer);
  } catch (error) {
    throw toSafetensorError(error, "freeHuge");
  }
}

/**
 * Larger headers go to the JavaScript readers: the scanner's records take up to ~5 doubles per 8 header bytes (12 M
 * metadata entries in a 100 MB header reserved ~800 MB before the repeated key sent it to the full reader anyway),
 * and what it saves is the cold cost of ordinary headers (a 1,750-tensor header is ~200 KB).
 */
export const NATIVE_SCAN_MAX_HEADER_BYTES = 1 << 20;

/** Reused by every scan: a scan allocates nothing. Grown when a header needs more. */
let scanRecords = new Float64Array(4096);

type HeaderScanner = (headerBytes: Uint8Array) => Float64Array | null;

/** The scanner, made once: every byte source holds it. */
let headerScanner: HeaderScanner | undefined | null = null;

/**
 * The addon's header scanner (see `headerFromScan`), when the addon has one: the records it wrote, valid until the
 * next scan, or null when the header is not of the simple form it reads.
 */
export function nativeHeaderScanner(): HeaderScanner | undefined {
  if (headerScanner === null) headerScanner = makeHeaderScanner();
  return headerScanner;
}

function makeHeaderScanner(): HeaderScanner | undefined {
  const scan = loadNative()?.scanHeader;
  if (typeof scan !== "function") return undefined;
  return (headerBytes) => {
    if (headerBytes.length > NATIVE_SCAN_MAX_HEADER_BYTES) return null;
    let count = scan(headerBytes, scanRecords);
    if (count === -2) {
      // Every record number takes at least one byte of the header.
      scanRecords = new Float64Array(headerBytes.length + 16);
      count = scan(headerBytes, scanRecords);
    }
    return count >= 0 ? scanRecords.subarray(0, count) : null;
  };
}

/** The addon's hostile-header helpers, for `installAccelerators` (none without the addon or in an older build). */
export function nativeJsonAccelerators(): Pick<Accelerators, "scanRun" | "findSyntaxError"> {
  const addon = loadNative();
  const { scanRun, findSyntaxError } = addon ?? {};
  return {
    ...(typeof scanRun === "function" ? { scanRun: scanRun.bind(addon) } : {}),
    ...(typeof findSyntaxError === "function" ? { findSyntaxError: findSyntaxError.bind(addon) } : {}),
  };
}

/** Whether windows of mappings are free of V8's external-memory accounting (false without the addon). */
export function uncountedWindows(): boolean {
  return loadNative()?.uncountedWindows() === true;
}

/** The addon's live counters, or null without the addon. */
export function nativeStats(): NativeStats | null {
  return loadNative()?.stats() ?? null;
}

/** The dtype table the addon's checked scans use: src/format/dtypes.ts's names, in order, and their bits. */
export const DTYPE_NAMES = DTYPES.join(",");
export const DTYPE_BITS = Float64Array.from(DTYPES, (name) => dtypeInfo(name)!.bits);

/**
 * What the last mapViews call answered besides its window, reused by the next call (grown when a header needs more):
 * [st_dev, st_ino, data start, tensor count T, distinct shape count S, T × (name start, name end, dtype index in
 * DTYPES, shape index, begin in the data region, byte length), S × (ndim, dims...)].
 */
export let viewNumbers = new Float64Array(4096);
/** The tensor names of the last mapViews call: `[names joined by "\0"]` (see loadViews), or one per tensor. */
const namesOut: string[] = [];

/**
 * The `count` tensor names of the last mapViews call. loadViews hands them over as one string joined by NUL (its
 * checked scan takes names only as plain ASCII, which holds no NUL) and split here: one string made by C and one
 * `split` instead of a string and a napi_set_element per tensor. callgrind, Node 20, the bench's 48-tensor
 * checkpoint, the first loadFile: napi_set_element alone was 53.5 k instructions of it. An addon built from older
 * sources sets one element per name, which is taken as it is.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const viewNames = (function viewNames(count: number): readonly string[] {
  return namesOut.length === 1 && count !== 1 ? namesOut[0]!.split("\0") : namesOut;
});

/**
 * Map `path` and check its header in one native call (`loadViews` in native/safetensors_native.c): the window is
 * every byte of the file (untransferable; collected, it unmaps the file), the rest of the answer is in viewNumbers and
 * viewNames. Null when the addon cannot (an older build, windows V8 would count) or will not (see loadViews) take
 * this file: the caller then reads it the ordinary way, which decides and reports everything. `journal`: look for
 * the file's edit journal (null when there is one). No object made for the answer: the first object literal a
 * function makes creates its boilerplate, ~22 k instructions (callgrind, Node 20), inside a process's first loadFile.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const mapViews = (function mapViews(path: string, journal: boolean, maxHeaderBytes: number): ArrayBuffer | null {
  const load = loadNative()?.loadViews;
  if (load === undefined) return null;
  let window: ArrayBuffer | null | -2;
  try {
    window = load(path, viewNumbers, namesOut, journal, maxHeaderBytes, DTYPE_NAMES, DTYPE_BITS);
  } catch {
    return null;
  }
  if (window === -2) window = mapViewsAgain(load, path, journal, maxHeaderBytes);
  if (!(window instanceof ArrayBuffer)) return null;
  if (!keyed) untransferableHuge(window);
  return window;
});

/** `loadViews` again with room for every number of a header larger than any before (kept out of the first call). */
function mapViewsAgain(
  load: NonNullable<NativeAddon["loadViews"]>,
  path: string,
  journal: boolean,
  maxHeaderBytes: number,
): ArrayBuffer | null | -2 {
  viewNumbers = new Float64Array(viewNumbers[0]!);
  try {
    return load(path, viewNumbers, namesOut, journal, maxHeaderBytes, DTYPE_NAMES, DTYPE_BITS);
  } catch {
    return null;
  }
}
