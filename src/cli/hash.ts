/** `safetensors hash`: SHA-256 of each file (sha256sum's format) and of each tensor's bytes, in one pass. */
import { createHash, type Hash } from "node:crypto";
import * as fs from "node:fs";
import type { AsyncSafetensorsFile } from "../async-file.js";
import type { SafetensorsFile } from "../file.js";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import type { Header, TensorInfo } from "../format/header.js";
import type { Backend } from "../node-files.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { openInput, stdinAsPath, streamStdin } from "./input.js";
import type { Io } from "./io.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { expandSharded } from "./sharded.js";

interface Digests {
  file: string;
  sha256: string;
  tensors: Map<string, string>;
}

const CHUNK = 8 << 20;

/**
 * Hash an opened file given a way to read its byte ranges. Tensors tile the data region and come in offset order,
 * so hashing the prefix, the header and then every tensor in turn hashes the whole file in the same pass.
 */
function digestsOf(
  label: string,
  file: SafetensorsFile,
  read: (offset: number, length: number, sinks: Hash[]) => void,
): Digests {
  const whole = createHash("sha256");
  read(0, file.header.dataStart, [whole]);
  const tensors = new Map<string, string>();
  for (const info of file.header.tensors.values()) {
    const tensor = createHash("sha256");
    read(file.header.dataStart + info.dataOffsets[0], info.byteLength, [whole, tensor]);
    tensors.set(info.name, tensor.digest("hex"));
  }
  return { file: label, sha256: whole.digest("hex"), tensors };
}

function hashPath(label: string, path: string, backend: Backend | undefined): Digests {
  using file = openInput(path, backend ?? "pread");
  const fd = fs.openSync(path, "r");
  try {
    const chunk = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(file.header.fileLength, 1)));
    return digestsOf(label, file, (offset, length, sinks) => {
      for (let done = 0; done < length; ) {
        const got = fs.readSync(fd, chunk, 0, Math.min(chunk.length, length - done), offset + done);
        if (got === 0) throw new SafetensorError("IoError", `${label} changed while hashing (unexpected end of file)`);
        for (const sink of sinks) sink.update(chunk.subarray(0, got));
        done += got;
      }
    });
  } finally {
    fs.closeSync(fd);
  }
}

async function hashInput(name: string, backend: Backend | undefined): Promise<Digests> {
  if (isRemoteLocation(name)) return withRemote(name, (file) => hashRemote(name, file));
  if (name !== "-") return hashPath(name, name, backend);
  const inPlace = stdinAsPath();
  if (inPlace !== undefined) return hashPath(name, inPlace, backend);
  // A pipe: streamed, in memory the size of its header.
  let hasher: StreamHasher | undefined;
  streamStdin({
    start: (header, headerBytes) => {
      hasher = new StreamHasher(header, headerBytes);
    },
    data: (chunk) => hasher!.update(chunk),
  });
  return hasher!.digests(name);
}

/** Remote reads of this size, a few in flight ahead of the hashing: bounded memory, the link kept busy. */
const REMOTE_CHUNK = 8 << 20;
const REMOTE_AHEAD = 4;

/**
 * The digests of a file whose bytes arrive in order: the prefix and header, then the data region in chunks of any
 * size. Tensors tile the data region in offset order, so each byte goes to the whole file's hash and its tensor's.
 */
class StreamHasher {
  readonly #whole = createHash("sha256");
  readonly #tensors = new Map<string, string>();
  readonly #infos: TensorInfo[];
  #current = 0;
  #at = 0;
  #hash = createHash("sha256");

  constructor(header: Header, headerBytes: Uint8Array) {
    const prefix = new Uint8Array(8);
    new DataView(prefix.buffer).setBigUint64(0, BigInt(header.headerLength), true);
    this.#whole.update(prefix);
    this.#whole.update(headerBytes);
    this.#infos = [...header.tensors.values()];
    this.#finishEnded();
  }

  #finishEnded(): void {
    while (this.#current < this.#infos.length && this.#infos[this.#current]!.dataOffsets[1] === this.#at) {
      this.#tensors.set(this.#infos[this.#current]!.name, this.#hash.digest("hex"));
      this.#hash = createHash("sha256");
      this.#current++;
    }
  }

  update(bytes: Uint8Array): void {
    this.#whole.update(bytes);
    for (let i = 0; i < bytes.length; ) {
      const take = Math.min(bytes.length - i, this.#infos[this.#current]!.dataOffsets[1] - this.#at);
      this.#hash.update(bytes.subarray(i, i + take));
      i += take;
      this.#at += take;
      this.#finishEnded();
    }
  }

  digests(label: string): Digests {
    return { file: label, sha256: this.#whole.digest("hex"), tensors: this.#tensors };
  }
}

async function hashRemote(label: string, file: AsyncSafetensorsFile): Promise<Digests> {
  const { header } = file;
  const hasher = new StreamHasher(header, await file.readRange(8, header.headerLength));
  const chunkStarts: number[] = [];
  for (let at = 0; at < header.dataLength; at += REMOTE_CHUNK) chunkStarts.push(at);
  const fetch = (start: number) => {
    const read = file.readRange(header.dataStart + start, Math.min(REMOTE_CHUNK, header.dataLength - start));
    // Awaited in order later; a failure of a read further ahead must not count as unhandled meanwhile.
    read.catch(() => {});
    return read;
  };
  const pending = chunkStarts.slice(0, REMOTE_AHEAD).map(fetch);
  for (let k = 0; k < chunkStarts.length; k++) {
    const bytes = await pending.shift()!;
    if (k + REMOTE_AHEAD < chunkStarts.length) pending.push(fetch(chunkStarts[k + REMOTE_AHEAD]!));
    hasher.update(bytes);
  }
  return hasher.digests(label);
}

/**
 * sha256sum's escaping: a name with a backslash, newline or carriage return gets a leading "\" on its line and
 * those characters written as \\, \n, \r (what `sha256sum -c` reads back).
 */
export function checksumLine(digest: string, name: string, prefix = ""): string {
  if (!/[\\\n\r]/.test(name)) return `${prefix}${digest}  ${name}\n`;
  const escaped = name.replace(/[\\\n\r]/g, (c) => (c === "\\" ? "\\\\" : c === "\n" ? "\\n" : "\\r"));
  return `${prefix}\\${digest}  ${escaped}\n`;
}

function jsonOf(d: Digests, withName: boolean): string {
  const entries = [...d.tensors].map(([name, digest]) => `${JSON.stringify(name)}:${JSON.stringify(digest)}`);
  const file = withName ? `"file":${JSON.stringify(d.file)},` : "";
  return `{${file}"file_sha256":${JSON.stringify(d.sha256)},"tensors":{${entries.join(",")}}}`;
}

function text(d: Digests, withTensors: boolean): string {
  let out = checksumLine(d.sha256, d.file);
  // Tensor lines are comments to `sha256sum -c` (it skips lines starting with "#"), so the output stays checkable.
  if (withTensors) for (const [name, digest] of d.tensors) out += checksumLine(digest, name, "# tensor ");
  return out;
}

function errorParts(error: unknown): { code: string; message: string } | undefined {
  if (isSafetensorError(error)) return { code: error.code, message: error.message };
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === "string" && code !== "EPIPE") return { code: "IoError", message: (error as Error).message };
  return undefined;
}

async function run(
  names: string[],
  json: boolean,
  tensors: boolean,
  backend: Backend | undefined,
  io: Io,
): Promise<number> {
  if (names.filter((name) => name === "-").length > 1) throw new UsageError('"-" (standard input) can be read once');
  const several = names.length > 1;
  const jsonEntries: string[] = [];
  let status = 0;
  for (const name of names) {
    try {
      const digests = await hashInput(name, backend);
      if (!json) io.stdout(text(digests, tensors));
      else if (several) jsonEntries.push(jsonOf(digests, true));
      else io.stdout(`${jsonOf(digests, false)}\n`);
    } catch (error) {
      const parts = errorParts(error);
      if (!parts || !several) throw error;
      status = 1;
      io.stderr(`${name}: error[${parts.code}]: ${parts.message}\n`);
      if (json) jsonEntries.push(`{"file":${JSON.stringify(name)},"error":${JSON.stringify(parts)}}`);
    }
  }
  if (json && several) io.stdout(`[${jsonEntries.join(",\n")}]\n`);
  return status;
}

export const command = defineCommand({
  usage: "hash FILE|URL... [--tensors] [--json]",
  description: `SHA-256 of each file, and of each tensor's bytes, in one pass over the file (tensors tile the data region).
"-" reads standard input (a redirected file in place; a pipe streamed, in memory the size of its header); a URL (http(s)://,
hf://, s3://) is streamed with a few reads in flight.

Text output is sha256sum's: "DIGEST  FILE" per file, names with a backslash or newline escaped as sha256sum does,
so "safetensors hash *.safetensors > SUMS; sha256sum -c SUMS" works. --tensors adds "# tensor DIGEST  NAME" lines
after each file's line: comments to sha256sum -c.

--json with one FILE prints {"file_sha256","tensors":{NAME:DIGEST}} (tensors in file order); with several, an array
of {"file","file_sha256","tensors"} (or {"file","error":{"code","message"}} for a file that failed).
Exit status 1 when any file fails; the others are still hashed.`,
  options: {
    tensors: { type: "boolean", help: "also print each tensor's digest (as # comment lines)" },
    json: { type: "boolean", help: "print JSON (always includes the tensors)" },
  },
  run({ values, positionals }, { io, backend }) {
    if (positionals.length === 0) throw new UsageError("hash takes one or more FILEs");
    return run(expandSharded(positionals, backend, io), values.json ?? false, values.tensors ?? false, backend, io);
  },
});
