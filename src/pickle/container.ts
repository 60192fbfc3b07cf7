/**
 * PyTorch checkpoint containers, read as data over any SyncByteSource: the zip format (torch ≥ 1.6), the legacy
 * format (a stream of pickles followed by raw storages) and the old tar format. Each yields its pickles (for the
 * scanner), the main pickle's result and where every storage's bytes are; nothing here interprets tensors.
 */
import { SafetensorError } from "../format/errors.js";
import type { SyncByteSource } from "../io/source.js";
import { inflateRawStream } from "./inflate.js";
import {
  DEFAULT_PICKLE_LIMITS,
  type GlobalRecord,
  NeedMoreBytes,
  PickleFailure,
  type PickleLimits,
  type PickleResult,
  runPickle,
} from "./machine.js";
import { asInt, itemsOf, type PyValue } from "./values.js";

/** The checkpoint formats `torch.save` has written: zip (current), legacy, tar, or a plain pickle. */
export type ContainerFormat = "zip" | "legacy" | "tar" | "pickle";

/** Where a storage's bytes are: a byte range of the source, or bytes already in memory (inflated records). */
export type StorageBytes =
  | { readonly kind: "range"; readonly offset: number; readonly length: number }
  | { readonly kind: "memory"; readonly bytes: Uint8Array };

export interface ScannedPickle {
  /** "data.pkl", "archive/extra.pkl", "legacy pickle 4", … */
  readonly name: string;
  /** False for pickles torch.load never unpickles (extra archive members): reported, not converted. */
  readonly loaded: boolean;
  readonly result: PickleResult | null;
  readonly error: SafetensorError | null;
  /** Globals named, also when the pickle failed part-way. */
  readonly globals: ReadonlyMap<string, GlobalRecord>;
}

function scanned(name: string, loaded: boolean, result: PickleResult | null, error: unknown = null): ScannedPickle {
  if (error !== null && !(error instanceof SafetensorError)) throw error;
  const globals = result?.globals ?? (error instanceof PickleFailure ? error.globals : new Map());
  return { name, loaded, result, error: error as SafetensorError | null, globals };
}

/** An error opening a container, with the pickles read before it (so a scan still reports their globals). */
export class ContainerFailure extends SafetensorError {
  constructor(
    error: SafetensorError,
    readonly pickles: readonly ScannedPickle[],
  ) {
    super(error.code, error.message);
  }
}

/** A PyTorch checkpoint opened as data (`openContainer`): its pickles and where its storages' bytes are. */
export interface Container {
  readonly format: ContainerFormat;
  /** Every pickle in the file, in order. */
  readonly pickles: readonly ScannedPickle[];
  /** The pickle torch.load returns the result of. */
  readonly main: PickleResult;
  readonly bigEndian: boolean;
  /** A storage's bytes by key; throws InvalidCheckpoint when the file does not hold it. */
  storage(key: string): StorageBytes;
  /** Legacy and tar files: the element count written before each storage, to check against the pickle. */
  readonly storageNumel: ReadonlyMap<string, number> | null;
  /** Tar format: tensors are described outside the pickle (persistent ids are tensor keys). */
  readonly tarTensors: ReadonlyMap<string, TarTensor> | null;
  /** Storages of the tar format: key → torch storage class name. */
  readonly tarStorages: ReadonlyMap<string, { type: PyValue; numel: number; root: string; offset: number }> | null;
}

export interface TarTensor {
  readonly storageKey: string;
  readonly shape: number[];
  readonly stride: number[];
  readonly offset: number;
}

/** Limits and the inflater used to open a checkpoint. */
export interface ContainerOptions extends PickleLimits {
  /**
   * Inflate a raw-deflate zip record to exactly `size` bytes (the Node adapter passes node:zlib; `openContainerAsync`
   * uses DecompressionStream when none is given).
   */
  inflateRaw?: (compressed: Uint8Array, size: number, name: string) => Uint8Array;
  /**
   * Most bytes held inflated from deflated zip records, in total, by their declared sizes: checked before inflating,
   * and no record inflates past its declared size, so a zip bomb is refused (PickleLimit). Default 1 GiB.
   */
  maxInflateBytes?: number;
  /** Largest zip central directory read, in bytes. Default 64 MiB (a million records). */
  maxDirectoryBytes?: number;
}

export function checkpointError(message: string): SafetensorError {
  return new SafetensorError("InvalidCheckpoint", message);
}

const LEGACY_MAGIC = 0x1950a86a20f9469cfc6cn;

/** Open a checkpoint: zip by its local-header signature (as torch does), then tar, then legacy / plain pickle. */
export function openContainer(source: SyncByteSource, options: ContainerOptions = {}): Container {
  const pickles: ScannedPickle[] = [];
  try {
    if (isZip(source)) return openZip(source, options, pickles);
    if (source.byteLength >= 512 && isTarHeader(source.read(0, 512))) return openTar(source, options, pickles);
    return openLegacy(source, options, pickles);
  } catch (error) {
    if (error instanceof SafetensorError && !(error instanceof ContainerFailure))
      throw new ContainerFailure(error, pickles);
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------------------- zip

interface ZipEntry {
  readonly name: string;
  readonly method: number;
  readonly compressedSize: number;
  readonly size: number;
  readonly dataOffset: number;
}

function u16(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8);
}
function u32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}
function u64(b: Uint8Array, at: number): number {
  const v = u32(b, at) + u32(b, at + 4) * 2 ** 32;
  if (!Number.isSafeInteger(v)) throw checkpointError("zip: a 64-bit size or offset is out of range");
  return v;
}

function zipEntries(source: SyncByteSource, options: ContainerOptions): Map<string, ZipEntry> {
  const size = source.byteLength;
  const tailLength = Math.min(size, 22 + 65535);
  const tail = source.read(size - tailLength, tailLength);
  let eocd = -1;
  for (let i = tail.length - 22; i >= 0; i--) {
    if (u32(tail, i) === 0x06054b50 && i + 22 + u16(tail, i + 20) === tail.length) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw checkpointError("zip: no end-of-central-directory record (truncated file?)");
  let count = u16(tail, eocd + 10);
  let dirSize = u32(tail, eocd + 12);
  let dirOffset = u32(tail, eocd + 16);
  const locatorAt = size - tailLength + eocd - 20;
  if (locatorAt >= 0) {
    const locator = source.read(locatorAt, 20);
    if (u32(locator, 0) === 0x07064b50) {
      const recordAt = u64(locator, 8);
      if (recordAt + 56 > size) throw checkpointError("zip: ZIP64 end record outside the file");
      const record = source.read(recordAt, 56);
      if (u32(record, 0) !== 0x06064b50) throw checkpointError("zip: bad ZIP64 end-of-central-directory record");
      count = u64(record, 32);
      dirSize = u64(record, 40);
      dirOffset = u64(record, 48);
    }
  }
  const maxDir = options.maxDirectoryBytes ?? 64 * 1024 * 1024;
  if (dirSize > maxDir) {
    throw new SafetensorError(
      "PickleLimit",
      `zip: central directory of ${dirSize} bytes is over the limit of ${maxDir}`,
    );
  }
  if (dirOffset + dirSize > size) throw checkpointError("zip: central directory outside the file");
  const dir = source.read(dirOffset, dirSize);
  const entries = new Map<string, ZipEntry>();
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let at = 0;
  for (let i = 0; i < count; i++) {
    if (at + 46 > dir.length || u32(dir, at) !== 0x02014b50)
      throw checkpointError(`zip: central directory entry ${i} is damaged`);
    const flags = u16(dir, at + 8);
    const method = u16(dir, at + 10);
    let compressedSize = u32(dir, at + 20);
    let uncompressedSize = u32(dir, at + 24);
    const nameLength = u16(dir, at + 28);
    const extraLength = u16(dir, at + 30);
    const commentLength = u16(dir, at + 32);
    let localOffset = u32(dir, at + 42);
    if (at + 46 + nameLength + extraLength + commentLength > dir.length)
      throw checkpointError("zip: central directory entry overruns the directory");
    let name: string;
    try {
      name = decoder.decode(dir.subarray(at + 46, at + 46 + nameLength));
    } catch {
      throw checkpointError("zip: a record name is not valid UTF-8");
    }
    const extra = dir.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength);
    for (let e = 0; e + 4 <= extra.length; ) {
      const id = u16(extra, e);
      const length = u16(extra, e + 2);
      if (id === 0x0001) {
        let p = e + 4;
        const next = (): number => {
          if (p + 8 > e + 4 + length) throw checkpointError(`zip: ZIP64 extra field of ${name} is too short`);
          const v = u64(extra, p);
          p += 8;
          return v;
        };
        if (uncompressedSize === 0xffffffff) uncompressedSize = next();
        if (compressedSize === 0xffffffff) compressedSize = next();
        if (localOffset === 0xffffffff) localOffset = next();
      }
      e += 4 + length;
    }
    if (flags & 1) throw new SafetensorError("UnsupportedPickle", `zip: record ${name} is encrypted`);
    if (method !== 0 && method !== 8)
      throw new SafetensorError("UnsupportedPickle", `zip: record ${name} uses compression method ${method}`);
    if (entries.has(name)) throw checkpointError(`zip: record ${JSON.stringify(name)} appears twice`);
    if (localOffset + 30 > size) throw checkpointError(`zip: local header of ${name} outside the file`);
    const local = source.read(localOffset, 30);
    if (u32(local, 0) !== 0x04034b50) throw checkpointError(`zip: local header of ${name} is damaged`);
    const localNameLength = u16(local, 26);
    const dataOffset = localOffset + 30 + localNameLength + u16(local, 28);
    if (
      localNameLength !== nameLength ||
      !sameBytes(source.read(localOffset + 30, nameLength), dir.subarray(at + 46, at + 46 + nameLength))
    ) {
      throw checkpointError(`zip: local header name differs from the central directory for ${name}`);
    }
    if (dataOffset + compressedSize > size) throw checkpointError(`zip: record ${name} runs past the end of the file`);
    if (method === 0 && compressedSize !== uncompressedSize)
      throw checkpointError(`zip: stored record ${name} has two sizes`);
    entries.set(name, { name, method, compressedSize, size: uncompressedSize, dataOffset });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

/** The running total of declared inflated sizes against `maxInflateBytes`. */
function inflateBudget(options: ContainerOptions): { take(entry: ZipEntry): void } {
  const max = options.maxInflateBytes ?? DEFAULT_MAX_INFLATE_BYTES;
  let total = 0;
  return {
    take(entry: ZipEntry): void {
      total += entry.size;
      if (total > max) {
        throw new SafetensorError(
          "PickleLimit",
          `zip: deflated record ${entry.name} declares ${entry.size} bytes; inflated records would hold ${total} bytes, over maxInflateBytes (${max})`,
        );
      }
    },
  };
}

const DEFAULT_MAX_INFLATE_BYTES = 1 << 30;

/**
 * `openContainer` for platforms without a synchronous inflater (browsers): deflated zip records (the ones reading the
 * checkpoint may need: its pickles, `byteorder`, storages) are inflated first with DecompressionStream, within the
 * same limits. With `inflateRaw` given, or any other format, it is `openContainer`.
 */
export async function openContainerAsync(source: SyncByteSource, options: ContainerOptions = {}): Promise<Container> {
  if (options.inflateRaw || !isZip(source)) return openContainer(source, options);
  let entries: Map<string, ZipEntry>;
  try {
    entries = zipEntries(source, options);
  } catch {
    return openContainer(source, options); // the same error, with what was read before it
  }
  const maxPickle = options.maxPickleBytes ?? DEFAULT_PICKLE_LIMITS.maxPickleBytes;
  const budget = inflateBudget(options);
  const inflated = new Map<string, Uint8Array>();
  for (const entry of entries.values()) {
    if (entry.method !== 8 || (entry.name.endsWith(".pkl") && entry.size > maxPickle)) continue;
    budget.take(entry);
    inflated.set(
      entry.name,
      await inflateRawStream(source.read(entry.dataOffset, entry.compressedSize), entry.size, entry.name),
    );
  }
  return openContainer(source, {
    ...options,
    inflateRaw: (_compressed, _size, name) => {
      const bytes = inflated.get(name);
      if (!bytes) throw checkpointError(`zip: record ${name} was not inflated`);
      return bytes;
    },
  });
}

function isZip(source: SyncByteSource): boolean {
  if (source.byteLength < 4) return false;
  const head = source.read(0, 4);
  return head[0] === 0x50 && head[1] === 0x4b && head[2] === 0x03 && head[3] === 0x04;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function openZip(source: SyncByteSource, options: ContainerOptions, pickles: ScannedPickle[]): Container {
  const entries = zipEntries(source, options);
  const first = entries.keys().next().value as string | undefined;
  if (first === undefined) throw checkpointError("zip: the archive is empty");
  const slash = first.indexOf("/");
  if (slash <= 0)
    throw checkpointError(`zip: record ${JSON.stringify(first)} is not in a top folder, as torch requires`);
  const prefix = first.slice(0, slash + 1);
  const maxPickle = options.maxPickleBytes ?? DEFAULT_PICKLE_LIMITS.maxPickleBytes;
  const inflated = new Map<string, Uint8Array>();
  const budget = inflateBudget(options);
  const recordBytes = (entry: ZipEntry): Uint8Array => {
    if (entry.method === 0) return source.read(entry.dataOffset, entry.size);
    const cached = inflated.get(entry.name);
    if (cached) return cached;
    if (!options.inflateRaw) {
      throw new SafetensorError(
        "UnsupportedPickle",
        `zip: record ${entry.name} is deflated and no inflater was given (openContainerAsync inflates with DecompressionStream)`,
      );
    }
    budget.take(entry);
    const out = options.inflateRaw(source.read(entry.dataOffset, entry.compressedSize), entry.size, entry.name);
    if (out.length !== entry.size)
      throw checkpointError(`zip: record ${entry.name} inflates to ${out.length} bytes, not ${entry.size}`);
    inflated.set(entry.name, out);
    return out;
  };
  const dataPkl = entries.get(`${prefix}data.pkl`);
  if (!dataPkl) {
    if (entries.has(`${prefix}constants.pkl`) || entries.has(`${prefix}code/`)) {
      throw new SafetensorError(
        "UnsupportedPickle",
        "zip: this is a TorchScript archive (torch.jit.save), not a checkpoint",
      );
    }
    throw checkpointError(`zip: no ${prefix}data.pkl record`);
  }
  let main: PickleResult | null = null;
  for (const entry of entries.values()) {
    if (!entry.name.endsWith(".pkl")) continue;
    const loaded = entry === dataPkl;
    if (entry.size > maxPickle) {
      const error = new SafetensorError(
        "PickleLimit",
        `${entry.name}: pickle of ${entry.size} bytes is over the limit of ${maxPickle}`,
      );
      pickles.push(scanned(entry.name, loaded, null, error));
      continue;
    }
    try {
      const result = runPickle(recordBytes(entry), 0, options);
      if (loaded) main = result;
      pickles.push(scanned(entry.name, loaded, result));
    } catch (error) {
      pickles.push(scanned(entry.name, loaded, null, error));
    }
  }
  const byteorder = entries.get(`${prefix}byteorder`);
  let bigEndian = false;
  if (byteorder) {
    const text = new TextDecoder().decode(recordBytes(byteorder)).trim();
    if (text !== "little" && text !== "big")
      throw checkpointError(`zip: byteorder record says ${JSON.stringify(text)}`);
    bigEndian = text === "big";
  }
  return {
    format: "zip",
    pickles,
    get main(): PickleResult {
      if (!main) throw pickles.find((p) => p.loaded)!.error!;
      return main;
    },
    bigEndian,
    storageNumel: null,
    tarTensors: null,
    tarStorages: null,
    storage(key: string): StorageBytes {
      const entry = entries.get(`${prefix}data/${key}`);
      if (!entry)
        throw checkpointError(`zip: storage ${JSON.stringify(key)} is referenced but ${prefix}data/${key} is absent`);
      if (entry.method === 0) return { kind: "range", offset: entry.dataOffset, length: entry.size };
      return { kind: "memory", bytes: recordBytes(entry) };
    },
  };
}

// -------------------------------------------------------------------------------------------- legacy and pickles

/** Run the pickle at `offset` of the source, reading a growing prefix until it fits. */
function pickleAt(source: SyncByteSource, offset: number, options: ContainerOptions): PickleResult {
  const maxPickle = options.maxPickleBytes ?? DEFAULT_PICKLE_LIMITS.maxPickleBytes;
  for (let length = 1 << 16; ; length *= 4) {
    const available = source.byteLength - offset;
    const take = Math.min(length, available, maxPickle);
    const truncated = take < available;
    try {
      return runPickle(source.read(offset, take), 0, options, truncated);
    } catch (error) {
      if (!(error instanceof NeedMoreBytes)) throw error;
      if (take >= maxPickle) {
        throw new SafetensorError(
          "PickleLimit",
          `pickle at byte ${offset} is longer than the limit of ${maxPickle} bytes`,
        );
      }
    }
  }
}

function openLegacy(source: SyncByteSource, options: ContainerOptions, pickles: ScannedPickle[]): Container {
  let at = 0;
  const next = (name: string): PickleResult => {
    try {
      const result = pickleAt(source, at, options);
      pickles.push(scanned(name, true, result));
      at += result.length;
      return result;
    } catch (error) {
      pickles.push(scanned(name, true, null, error));
      throw error;
    }
  };
  const first = next("pickle");
  if (first.value !== LEGACY_MAGIC) {
    // Not a torch legacy file: a plain pickle (torch.load reads it as one too, with no storages).
    return plainPickle(source, pickles, first, at, options);
  }
  const protocol = next("protocol version");
  if (protocol.value !== 1001)
    throw checkpointError(`legacy checkpoint: protocol version ${String(protocol.value)}, expected 1001`);
  next("sys_info");
  const main = next("data");
  const keys = next("storage keys");
  const keyList = itemsOf(keys.value);
  if (!keyList || keyList.some((k) => typeof k !== "string"))
    throw checkpointError("legacy checkpoint: the storage key list is not a list of strings");
  const ranges = new Map<string, StorageBytes>();
  const numels = new Map<string, number>();
  const elementSizes = legacyElementSizes(main);
  for (const key of keyList as string[]) {
    if (at + 8 > source.byteLength)
      throw checkpointError(`legacy checkpoint: storage ${key} is missing (file ends at ${source.byteLength})`);
    const head = source.read(at, 8);
    const numel = u64(head, 0);
    const elementSize = elementSizes.get(key);
    if (elementSize === undefined)
      throw checkpointError(`legacy checkpoint: storage ${key} is listed but never referenced`);
    const length = numel * elementSize;
    if (at + 8 + length > source.byteLength)
      throw checkpointError(`legacy checkpoint: storage ${key} (${length} bytes) runs past the end of the file`);
    if (ranges.has(key)) throw checkpointError(`legacy checkpoint: storage ${key} is listed twice`);
    ranges.set(key, { kind: "range", offset: at + 8, length });
    numels.set(key, numel);
    at += 8 + length;
  }
  return {
    format: "legacy",
    pickles,
    main,
    bigEndian: false,
    storageNumel: numels,
    tarTensors: null,
    tarStorages: null,
    storage(key: string): StorageBytes {
      const range = ranges.get(key);
      if (!range)
        throw checkpointError(`legacy checkpoint: storage ${JSON.stringify(key)} is referenced but not in the file`);
      return range;
    },
  };
}

/** Element sizes of the storages a legacy pickle references, from their storage classes. */
function legacyElementSizes(main: PickleResult): Map<string, number> {
  const sizes = new Map<string, number>();
  for (const pid of main.persistentIds) {
    const items = itemsOf(pid.pid);
    if (items === null || items[0] !== "storage" || items.length < 5) continue;
    const type = items[1];
    const key = items[2];
    const size = typeof type === "object" && type && "name" in type ? storageElementSize(String(type.name)) : null;
    if (typeof key === "string" && size !== null) sizes.set(key, size);
  }
  return sizes;
}

/** Bytes per element of a torch storage class, by class name; null when unknown. */
export function storageElementSize(className: string): number | null {
  const sizes: Record<string, number> = {
    BoolStorage: 1,
    ByteStorage: 1,
    CharStorage: 1,
    ShortStorage: 2,
    IntStorage: 4,
    LongStorage: 8,
    HalfStorage: 2,
    BFloat16Storage: 2,
    FloatStorage: 4,
    DoubleStorage: 8,
    ComplexFloatStorage: 8,
    ComplexDoubleStorage: 16,
    QInt8Storage: 1,
    QUInt8Storage: 1,
    QInt32Storage: 4,
    QUInt4x2Storage: 1,
    QUInt2x4Storage: 1,
    UntypedStorage: 1,
  };
  return Object.hasOwn(sizes, className) ? sizes[className]! : null;
}

function plainPickle(
  source: SyncByteSource,
  pickles: ScannedPickle[],
  main: PickleResult,
  at: number,
  options: ContainerOptions,
): Container {
  // Scan what follows too: torch stops after one pickle, but a scanner must see everything a file carries.
  let offset = at;
  for (let i = 2; offset < source.byteLength && i < 1000; i++) {
    try {
      const result = pickleAt(source, offset, options);
      pickles.push(scanned(`pickle ${i} (after the first)`, false, result));
      offset += result.length;
    } catch (error) {
      pickles.push(scanned(`bytes after the first pickle (at ${offset})`, false, null, error));
      break;
    }
  }
  return {
    format: "pickle",
    pickles,
    main,
    bigEndian: false,
    storageNumel: null,
    tarTensors: null,
    tarStorages: null,
    storage(key: string): StorageBytes {
      throw checkpointError(`plain pickle: storage ${JSON.stringify(key)} is referenced but a plain pickle holds none`);
    },
  };
}

// ---------------------------------------------------------------------------------------------------------- tar

function isTarHeader(block: Uint8Array): boolean {
  const stored = Number.parseInt(
    new TextDecoder("latin1").decode(block.subarray(148, 156)).replace(/\0.*$/, "").trim(),
    8,
  );
  if (!Number.isFinite(stored)) return false;
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 0x20 : block[i]!;
  return sum === stored;
}

interface TarMember {
  readonly offset: number;
  readonly size: number;
}

function tarMembers(source: SyncByteSource): Map<string, TarMember> {
  const members = new Map<string, TarMember>();
  const latin1 = new TextDecoder("latin1");
  let at = 0;
  let paxPath: string | null = null;
  let paxSize: number | null = null;
  while (at + 512 <= source.byteLength) {
    const block = source.read(at, 512);
    if (block.every((b) => b === 0)) break;
    if (!isTarHeader(block)) throw checkpointError(`tar: damaged header at byte ${at}`);
    const text = (from: number, length: number) =>
      latin1.decode(block.subarray(from, from + length)).replace(/\0.*$/s, "");
    let size = Number.parseInt(text(124, 12).trim() || "0", 8);
    if (!Number.isSafeInteger(size) || size < 0) throw checkpointError(`tar: bad size at byte ${at}`);
    const type = String.fromCharCode(block[156]!);
    const prefix = text(345, 155);
    let name = prefix ? `${prefix}/${text(0, 100)}` : text(0, 100);
    const dataAt = at + 512;
    if (dataAt + size > source.byteLength) throw checkpointError(`tar: member ${name} runs past the end of the file`);
    if (type === "x" || type === "g") {
      const records = latin1.decode(source.read(dataAt, size));
      for (const match of records.matchAll(/\d+ (path|size)=([^\n]*)\n/g)) {
        if (match[1] === "path") paxPath = match[2]!;
        else paxSize = Number(match[2]);
      }
    } else {
      if (paxPath !== null) name = paxPath;
      if (paxSize !== null) {
        size = paxSize;
        if (!Number.isSafeInteger(size) || dataAt + size > source.byteLength)
          throw checkpointError(`tar: bad size of ${name}`);
      }
      paxPath = null;
      paxSize = null;
      if (type === "0" || type === "\0") {
        if (members.has(name)) throw checkpointError(`tar: member ${name} appears twice`);
        members.set(name, { offset: dataAt, size });
      }
    }
    at = dataAt + Math.ceil(size / 512) * 512;
  }
  return members;
}

function openTar(source: SyncByteSource, options: ContainerOptions, pickles: ScannedPickle[]): Container {
  const members = tarMembers(source);
  const member = (name: string): TarMember => {
    const m = members.get(name);
    if (!m) throw checkpointError(`tar checkpoint: no ${name} member`);
    return m;
  };
  const run = (name: string, bytes: Uint8Array, at: number): PickleResult => {
    try {
      const result = runPickle(bytes, at, options);
      pickles.push(scanned(name, true, result));
      return result;
    } catch (error) {
      pickles.push(scanned(name, true, null, error));
      throw error;
    }
  };
  const readMember = (name: string): Uint8Array => {
    const m = member(name);
    const maxPickle = options.maxPickleBytes ?? DEFAULT_PICKLE_LIMITS.maxPickleBytes;
    return source.read(m.offset, m.size > maxPickle && name !== "storages" ? maxPickle : m.size);
  };
  // storages: count, then per storage a (key, location, storage_type) pickle, int64 numel and the bytes.
  const storagesMember = member("storages");
  const storageBytes = source.read(storagesMember.offset, storagesMember.size);
  let at = 0;
  const countResult = run("storages: count", storageBytes, at);
  at += countResult.length;
  const count = asInt(countResult.value);
  if (count === null || count < 0) throw checkpointError("tar checkpoint: bad storage count");
  const ranges = new Map<string, StorageBytes>();
  const tarStorages = new Map<string, { type: PyValue; numel: number; root: string; offset: number }>();
  const numels = new Map<string, number>();
  for (let i = 0; i < count; i++) {
    const record = run(`storages: storage ${i}`, storageBytes, at);
    at += record.length;
    const items = itemsOf(record.value);
    const key = items?.[0];
    const type = items?.[2];
    if (items === null || items.length !== 3 || (typeof key !== "string" && typeof key !== "number"))
      throw checkpointError(`tar checkpoint: storage record ${i} is malformed`);
    const elementSize =
      typeof type === "object" && type && "name" in type ? storageElementSize(String(type.name)) : null;
    if (elementSize === null)
      throw checkpointError(`tar checkpoint: storage ${String(key)} has an unknown storage type`);
    if (at + 8 > storageBytes.length) throw checkpointError(`tar checkpoint: storage ${String(key)} is truncated`);
    const numel = u64(storageBytes, at);
    const length = numel * elementSize;
    if (at + 8 + length > storageBytes.length)
      throw checkpointError(`tar checkpoint: storage ${String(key)} runs past its member`);
    ranges.set(String(key), { kind: "range", offset: storagesMember.offset + at + 8, length });
    numels.set(String(key), numel);
    tarStorages.set(String(key), { type: type!, numel, root: String(key), offset: 0 });
    at += 8 + length;
  }
  const views = run("storages: views", storageBytes, at);
  for (const view of itemsOf(views.value) ?? []) {
    const v = itemsOf(view);
    const target = v?.[0];
    const root = v?.[1];
    const offset = asInt(v?.[2]);
    const numel = asInt(v?.[3]);
    const rootInfo = root === undefined ? undefined : tarStorages.get(String(root));
    if (
      v === null ||
      v.length !== 4 ||
      offset === null ||
      numel === null ||
      !rootInfo ||
      offset < 0 ||
      offset + numel > rootInfo.numel
    ) {
      throw checkpointError("tar checkpoint: a storage view is malformed or outside its storage");
    }
    tarStorages.set(String(target), { type: rootInfo.type, numel, root: String(root), offset });
  }
  // tensors: count, then per tensor a (key, storage_id, tensor_type) pickle and its raw geometry.
  const tensorBytes = readMember("tensors");
  at = 0;
  const tensorCount = run("tensors: count", tensorBytes, at);
  at += tensorCount.length;
  const nTensors = asInt(tensorCount.value);
  if (nTensors === null || nTensors < 0) throw checkpointError("tar checkpoint: bad tensor count");
  const tarTensors = new Map<string, TarTensor>();
  const view = new DataView(tensorBytes.buffer, tensorBytes.byteOffset, tensorBytes.byteLength);
  for (let i = 0; i < nTensors; i++) {
    const record = run(`tensors: tensor ${i}`, tensorBytes, at);
    at += record.length;
    const items = itemsOf(record.value);
    if (items === null || items.length !== 3) throw checkpointError(`tar checkpoint: tensor record ${i} is malformed`);
    if (at + 8 > tensorBytes.length) throw checkpointError("tar checkpoint: tensor geometry truncated");
    const ndim = view.getInt32(at, true);
    at += 8;
    if (ndim < 0 || ndim > 64 || at + 16 * ndim + 8 > tensorBytes.length)
      throw checkpointError("tar checkpoint: tensor geometry malformed");
    const shape: number[] = [];
    const stride: number[] = [];
    for (let d = 0; d < ndim; d++) shape.push(Number(view.getBigInt64(at + 8 * d, true)));
    at += 8 * ndim;
    for (let d = 0; d < ndim; d++) stride.push(Number(view.getBigInt64(at + 8 * d, true)));
    at += 8 * ndim;
    const offset = Number(view.getBigInt64(at, true));
    at += 8;
    tarTensors.set(String(items[0]), { storageKey: String(items[1]), shape, stride, offset });
  }
  const main = run("pickle", readMember("pickle"), 0);
  return {
    format: "tar",
    pickles,
    main,
    bigEndian: false,
    storageNumel: numels,
    tarTensors,
    tarStorages,
    storage(key: string): StorageBytes {
      const range = ranges.get(key);
      if (!range)
        throw checkpointError(`tar checkpoint: storage ${JSON.stringify(key)} is referenced but not in the file`);
      return range;
    },
  };
}
