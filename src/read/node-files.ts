/**
 * Local files: openFile / loadFile / saveFile and the backend choice.
 */
import { isUtf8 } from "node:buffer";
import { closeSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { installAccelerators } from "../format/accelerators.js";
import { CompactTensors } from "../format/compact-tensors.js";
import { DTYPES } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { Header, HeaderOptions } from "../format/header.js";
import { DEFAULT_MAX_HEADER_BYTES } from "../format/header.js";
import {
  type MetadataInput,
  type NamedTensors,
  planSerialization,
  SERIALIZE_OPTION_KEYS,
  type SerializeOptions,
  splitMetadataArgument,
} from "../format/serialize.js";
import { mappedFile, registerBuffer } from "../io/file-views.js";
import { loadNative, mapViews, nativeJsonAccelerators, nativeStatus, viewNames, viewNumbers } from "../io/native.js";
import { MAX_BUFFER_BYTES, openWithHead, PreadSource } from "../io/node-file.js";
import { hasJournal, journalPathFor } from "../io/node-journal-path.js";
import { MmapSource } from "../io/node-mmap.js";
import { HUGE_ALLOCATION_THRESHOLD, readOwnedFrom } from "../io/node-owned.js";
import { type SaveOptions, writeViewsAt } from "../io/node-save.js";
import { type AtomicWriteOptions, writeFileAtomic } from "../io/node-write.js";
import type { SyncByteSource } from "../io/source.js";
import { SafetensorsFile } from "./file.js";
import { type Tensor, TrustedTensor, tensorOfInfo } from "./tensor.js";

// The header reader's faster loops (Node's UTF-8 check, the addon's scanners) for every reader of local files, the
// CLI included; installing them loads the optional addon.
installAccelerators({ isUtf8, ...nativeJsonAccelerators() });

/**
 * How a local file is read: "mmap" (zero-copy views; needs the native addon), "pread" (positional reads into
 * memory the caller owns), "auto" (mmap when the addon is loaded).
 */
export type Backend = "auto" | "mmap" | "pread";

/** Options of `openFile`. */
export interface OpenFileOptions extends HeaderOptions {
  /**
   * "mmap" maps the file (zero-copy views, valid until `close()`; needs the native addon), "pread" reads each tensor
   * with positional reads into memory the caller owns, "auto" (default) uses mmap when the addon is available.
   */
  backend?: Backend;
  /**
   * What to do when the file has an undo journal next to it (an in-place edit in progress, or one interrupted by a
   * crash: the file may hold part of an edit until it is recovered): "warn" (default) emits a process warning of type
   * `SafetensorsWarning`, code `SAFETENSORS_INTERRUPTED_EDIT` (with `file` and `journal`, the paths), once per file
   * per process; "error" throws
   * `InterruptedEdit`; "ignore" reads on.
   */
  interruptedEdit?: "warn" | "error" | "ignore";
}

const warnedJournals = new Set<string>();

type EditPolicy = OpenFileOptions["interruptedEdit"];

/**
 * The `interruptedEdit` policy for `path`. `known`: whether the journal exists, when the open already found out (the
 * addon stats the journal's path in the call that opens the file); else one stat here.
 */
function checkInterruptedEdit(path: string, policy: EditPolicy = "warn", known?: boolean): void {
  if (policy === "ignore" || !(known ?? hasJournal(path))) return;
  const journal = journalPathFor(path);
  const message =
    `${path} has an undo journal (${journal}): an in-place edit is in progress or was interrupted, so the file ` +
    "may hold part of it. Recover it with recoverFile(path) or `safetensors recover FILE` (rolls the edit back)";
  if (policy === "error") throw new SafetensorError("InterruptedEdit", message);
  if (policy !== "warn") {
    throw new SafetensorError("InvalidOption", `interruptedEdit must be "warn", "error" or "ignore", got ${policy}`);
  }
  const key = resolvePath(path);
  if (warnedJournals.has(key)) return;
  warnedJournals.add(key);
  // An Error, so that the warning carries its data (`file`, `journal`): the CLI prints its own line from them.
  const warning = Object.assign(new Error(message), {
    name: "SafetensorsWarning",
    code: "SAFETENSORS_INTERRUPTED_EDIT",
    file: path,
    journal,
  });
  process.emitWarning(warning);
}

/** The backend "auto" resolves to here: mmap when the native addon is loaded, else pread. */
export function defaultBackend(): "mmap" | "pread" {
  return loadNative() ? "mmap" : "pread";
}

/** Shared, so that an open makes no options object. */
const POPULATE = { populate: true } as const;

/** Open `path` with `backend` and apply the interrupted-edit `policy` (the journal is looked for by the open). */
function openSource(path: string, backend: Backend, policy: EditPolicy, populate = false): SyncByteSource {
  const resolved = backend === "auto" ? defaultBackend() : backend;
  if (resolved === "mmap" && !loadNative()) {
    throw new SafetensorError(
      "BackendUnavailable",
      `the mmap backend needs the native addon, which is not available (${nativeStatus().reason}); use backend "pread"`,
    );
  }
  if (resolved !== "mmap" && resolved !== "pread") {
    throw new SafetensorError("BackendUnavailable", `unknown backend ${JSON.stringify(backend)}`);
  }
  const opened = openWithHead(path, policy !== "ignore");
  try {
    checkInterruptedEdit(path, policy, opened.journal);
  } catch (error) {
    closeSync(opened.fd);
    throw error;
  }
  // The sources own the descriptor from here on (and close it if they fail).
  if (resolved === "mmap") return MmapSource.opened(path, opened, populate ? POPULATE : undefined);
  return PreadSource.opened(opened, readOwnedFrom);
}

/** Open a file lazily: validates the header, reads tensors on demand. Close it (or use `using`) when done. */
export function openFile(path: string, options: OpenFileOptions = {}): SafetensorsFile {
  return SafetensorsFile.open(openSource(path, options.backend ?? "auto", options.interruptedEdit), options);
}

/** Options of `loadFile`. */
export interface LoadFileOptions extends OpenFileOptions {
  /**
   * Make every byte resident before returning. mmap: every page of the mapping is touched by several threads, so
   * reading the tensors never faults; pread reads everything in any case. Default false: with mmap nothing is read until a tensor's bytes are used, as the reference's
   * `load_file` does.
   */
  populate?: boolean;
  /** pread backend: largest single read buffer (default and maximum 2^32, Node 20's largest Uint8Array). */
  maxBufferBytes?: number;
}

/**
 * Every tensor of a file, in file order. With "mmap" (what "auto" picks when the addon is there) the tensors are
 * zero-copy views of the mapped file, kept alive by the tensors themselves and unmapped when the last is garbage
 * collected (there is nothing to close); nothing is read until used, unless `populate`. With "pread" the data region
 * is read with one positional read per ≤ 4 GiB group of tensors into (hugepage-backed) memory the tensors own.
 */
export function loadFile(path: string, options: LoadFileOptions = {}): Map<string, Tensor> {
  return loadMapped(path, options);
}

/**
 * loadFile's one-call way (`mapViews`), or the ordinary way (loadOrdinary) where it does not apply.
 *
 * A parenthesized function expression, as are mapViews, addViews and registerBuffer, which it runs: V8 compiles
 * such a function with its module (its "PIFE" heuristic), where it pre-parses a plain one at import and parses it
 * again to compile it at its first call. Most programs call loadFile right after the import, so this costs nothing
 * overall and halves the first call. Measured with callgrind, Node 24, the bench's 48-tensor checkpoint opened once
 * before as issue 18's probe does, 3 processes each: the first loadFile 1.34-1.65 M instructions before, 0.73 M
 * after; the import 65.2-65.5 M before, 65.5-65.9 M after; import, openFile and first loadFile 70.4-71.0 M before,
 * 70.4-70.6 M after.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (see above)
const loadMapped = (function loadMapped(path: string, options: LoadFileOptions): Map<string, Tensor> {
  const backend = options.backend;
  const limit = options.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
  const views =
    (backend === undefined || backend === "auto" || backend === "mmap") &&
    options.populate !== true &&
    (limit === Number.POSITIVE_INFINITY || (Number.isSafeInteger(limit) && limit >= 0))
      ? mapViews(path, options.interruptedEdit !== "ignore", limit)
      : null;
  if (views === null) return loadOrdinary(path, options);
  const numbers = viewNumbers;
  registerBuffer(views, mappedFile(path, numbers[0]!, numbers[1]!), 0);
  const count = numbers[3]!;
  const tensors = new Map<string, Tensor>();
  addViews(tensors, views, numbers, viewNames(count), shapesOf(numbers, count), numbers[2]!, count);
  return tensors;});

/**
 * The shapes of mapViews's answer: one frozen array per distinct shape, shared by the tensors of that shape (they
 * cannot change it). Dims below 2^30 as small integers: numbers read from a Float64Array are heap numbers (see
 * compact-tensors.ts shapeAt).
 */
// biome-ignore format: the parentheses make V8 compile it with the module (see loadMapped)
const shapesOf = (function shapesOf(numbers: Float64Array, count: number): (readonly number[])[] {
  const shapes: (readonly number[])[] = [];
  for (let s = 0, at = 5 + count * 6; s < numbers[4]!; s++) {
    const shape: number[] = [];
    for (let d = numbers[at++]!; d > 0; d--) {
      const v = numbers[at++]!;
      shape.push(v < 0x40000000 ? v | 0 : v);
    }
    shapes.push(Object.freeze(shape));
  }
  return shapes;});

/**
 * The tensors of mapViews's answer, views of its window, added to `tensors` in file order: the only loop over the
 * tensors, and as short as it can be, apart from the shapes' loop. On Node 20, V8 queues a function for its baseline
 * compiler once it has run a while (this loop, after a few tensors; a small function called for each tensor), adding
 * an estimate of its size, and compiles the whole queue when the total passes 4,096, wherever that happens; what the
 * process ran before leaves the queue part full (2,212 after the bench worker's import, 3,640 after a script's bare
 * import). A first loadFile queued 2,919 (viewTensors, this loop with the shapes', 2,058; trustedTensor 168; Tensor's
 * constructor 693), and the batch (0.23-0.26 M instructions, callgrind) was compiled inside it in both; it now queues
 * 1,022 (this function 882, TrustedTensor 140: `--trace-baseline-batch-compilation`), and the bench worker's call no
 * longer compiles it. Node 22 and later queue differently; the batch did not fall in their first call before either.
 */
// biome-ignore format: the parentheses make V8 compile it with the module (see loadMapped)
const addViews = (function addViews(tensors: Map<string, Tensor>, window: ArrayBuffer, numbers: Float64Array, names: readonly string[], shapes: readonly (readonly number[])[], dataStart: number, count: number): void {
  for (let i = 0, at = 5; i < count; i++, at += 6) {
    tensors.set(names[i]!, new TrustedTensor(DTYPES[numbers[at + 2]!]!, shapes[numbers[at + 3]!]!, new Uint8Array(window, dataStart + numbers[at + 4]!, numbers[at + 5]!)));
  }});

/**
 * loadFile's ordinary way, where the one-call way (`mapViews`: open, header checked in C, whole file mapped, one
 * uncounted window) does not apply: no such addon function, pread or populate asked for, a non-default header limit
 * that is not a valid one, a journal next to the file, a header the checked scan does not take, a file over 4 GiB.
 * This way then decides and reports everything exactly as before. Measured on the benchmark's 48-tensor checkpoint,
 * the first loadFile of a fresh process after a gc() (callgrind, instructions from the call to its return): this way
 * 1.13 M (~0.3 M of it opening, copying the head and building the source, ~0.37 M the header object, ~0.47 M the
 * mapping, window and views), the one-call way 0.61 M; wall time 0.34 -> 0.24 ms (median of 15, load ~2.5). A whole
 * process that loadFiles the 2.37 GiB checkpoint does not see it (54 ms cpu either way); the first call does, and
 * that call is what issue 18's probe against the reference's load_file times.
 */
function loadOrdinary(path: string, options: LoadFileOptions): Map<string, Tensor> {
  const source = openSource(path, options.backend ?? "auto", options.interruptedEdit, options.populate === true);
  const file = SafetensorsFile.open(source, options);
  if (!(source instanceof MmapSource)) return readAll(file, options.maxBufferBytes);
  const tensors = new Map<string, Tensor>();
  viewsOf(file.header, source, tensors);
  source.releaseDescriptor();
  return tensors;
}

/**
 * Every tensor of `file` read into memory they own, then the file closed. Kept out of `loadFile`, whose first call
 * compiles it: the mmap path then compiles a few lines instead of these (about a third of a cold `loadFile`'s
 * instructions went to compiling it whole, callgrind).
 */
function readAll(file: SafetensorsFile, maxBufferBytes = MAX_BUFFER_BYTES): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  const maxBuffer = Math.min(maxBufferBytes, MAX_BUFFER_BYTES);
  try {
    const infos = [...file.header.tensors.values()];
    for (let first = 0; first < infos.length; ) {
      // Group consecutive tensors into one read of at most maxBuffer bytes.
      const groupStart = infos[first]!.dataOffsets[0];
      let last = first;
      while (last + 1 < infos.length && infos[last + 1]!.dataOffsets[1] - groupStart <= maxBuffer) last++;
      const groupEnd = infos[last]!.dataOffsets[1];
      if (groupEnd - groupStart > maxBuffer) {
        const big = infos[first]!;
        throw new SafetensorError(
          "TooLarge",
          `tensor ${JSON.stringify(big.name)} is ${big.byteLength} bytes; one buffer holds at most ${maxBuffer} in this runtime: use openFile() and getSlice()`,
          { tensor: big.name },
        );
      }
      const bytes = readGroup(file, file.header.dataStart + groupStart, groupEnd - groupStart);
      for (let i = first; i <= last; i++) {
        const info = infos[i]!;
        const begin = info.dataOffsets[0] - groupStart;
        tensors.set(info.name, tensorOfInfo(info, bytes.subarray(begin, begin + info.byteLength)));
      }
      first = last + 1;
    }
    return tensors;
  } finally {
    file.close();
  }
}

/** Offsets within a page: direct I/O (node-save.ts) writes a page of a file from memory with the same alignment. */
const PAGE_BYTES = 4096;

/**
 * Owned bytes [offset, offset + length) of the file, at the offset within a 4 KiB page they have in the file: the
 * read starts at the page boundary before `offset` (up to 4095 bytes of the header come along, unseen) into 2 MiB
 * aligned memory. A save of the same layout then writes them to the device straight from this memory instead of
 * through a bounce buffer (saveFile of 2.37 GiB: 1.2-2.4 s bounced, 0.82-1.03 s straight). Costs under 4 KiB a group.
 */
function readGroup(file: SafetensorsFile, offset: number, length: number): Uint8Array {
  const pad = offset % PAGE_BYTES;
  if (length < HUGE_ALLOCATION_THRESHOLD || length + pad > MAX_BUFFER_BYTES) return file.readRange(offset, length);
  return file.readRange(offset - pad, length + pad).subarray(pad);
}

/** Every tensor of `header` as a view from `source`, added to `into` in file order. */
function viewsOf(header: Header, source: SyncByteSource, into: Map<string, Tensor>): void {
  const start = header.dataStart;
  const tensors = header.tensors;
  if (tensors instanceof CompactTensors) {
    tensors.forEachSpan((name, dtype, shape, begin, byteLength) => {
      into.set(name, tensorOfInfo({ dtype: dtype.name, shape }, source.read(start + begin, byteLength)));
    });
    return;
  }
  for (const info of tensors.values()) {
    into.set(info.name, tensorOfInfo(info, source.read(start + info.dataOffsets[0], info.byteLength)));
  }
}

/** Options of `saveFile`: header limits, `fsync`, `mode` and direct I/O. */
export interface SaveFileOptions extends SerializeOptions, AtomicWriteOptions, SaveOptions {}

/** The options `saveFile` takes, by name (to tell an options object from a metadata record). */
const SAVE_FILE_OPTION_KEYS: readonly (keyof SaveFileOptions)[] = [
  ...SERIALIZE_OPTION_KEYS,
  "fsync",
  "mode",
  "directMinBytes",
];

/**
 * Write tensors (and optional string metadata) to `path` atomically: a temporary file in the same directory replaces
 * the target only when complete; on any failure the target is untouched and no temporary file is left.
 *
 * The third argument is the metadata (`saveFile(path, tensors, { format: "pt" })`) or the options with the metadata
 * among them (`saveFile(path, tensors, { metadata: { format: "pt" }, fsync: true })`); the older form with options
 * fourth (`saveFile(path, tensors, metadata, options)`) still works.
 */
export function saveFile(
  path: string,
  tensors: NamedTensors,
  metadataOrOptions?: MetadataInput | (SaveFileOptions & { metadata?: MetadataInput }),
  moreOptions?: SaveFileOptions,
): void {
  const split = splitMetadataArgument(metadataOrOptions, moreOptions, SAVE_FILE_OPTION_KEYS);
  const { metadata } = split;
  const options = split.options ?? {};
  const plan = planSerialization(tensors, metadata, options);
  // One vectored write per 1024 tensors or 1 GiB: a checkpoint of many small tensors costs a few system calls; large
  // ones go to the device directly (O_DIRECT), tensors that are unmodified views of a mapped file are copied file to
  // file (node-save.ts).
  const buffers = [plan.header, ...plan.tensors.map((t) => t.data)];
  writeFileAtomic(path, (fd) => writeViewsAt(fd, buffers, 0, options), options);
}
