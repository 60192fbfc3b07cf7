/** `safetensors hash`: SHA-256 of each file (sha256sum's format) and of each tensor's bytes, in one pass. */
import { createHash, type Hash } from "node:crypto";
import * as fs from "node:fs";
import type { AsyncSafetensorsFile } from "../async-file.js";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import type { Backend, SafetensorsFile } from "../node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { openBytes, openInput, readStdin, stdinAsPath } from "./input.js";
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
  // A pipe: its length (which the header check needs) is only known at its end, so it is read into memory.
  const bytes = readStdin();
  using file = openBytes(name, bytes);
  return digestsOf(name, file, (offset, length, sinks) => {
    for (const sink of sinks) sink.update(bytes.subarray(offset, offset + length));
  });
}

/** Remote reads of this size, a few in flight ahead of the hashing: bounded memory, the link kept busy. */
const REMOTE_CHUNK = 8 << 20;
const REMOTE_AHEAD = 4;

async function hashRemote(label: string, file: AsyncSafetensorsFile): Promise<Digests> {
  const { header } = file;
  const fileHash = createHash("sha256");
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(header.headerLength), true);
  fileHash.update(prefix);
  fileHash.update(await file.readRange(8, header.headerLength));
  const infos = [...header.tensors.values()];
  const tensors = new Map<string, string>();
  // Tensors tile the data region in offset order: walk it in chunks, handing each byte to its tensor.
  let current = 0;
  let tensorHash = createHash("sha256");
  const finishEmpty = (at: number) => {
    while (current < infos.length && infos[current]!.dataOffsets[1] === at) {
      tensors.set(infos[current]!.name, tensorHash.digest("hex"));
      tensorHash = createHash("sha256");
      current++;
    }
  };
  finishEmpty(0);
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
    fileHash.update(bytes);
    const start = chunkStarts[k]!;
    for (let at = start; at < start + bytes.length; ) {
      const end = Math.min(infos[current]!.dataOffsets[1], start + bytes.length);
      tensorHash.update(bytes.subarray(at - start, end - start));
      at = end;
      finishEmpty(at);
    }
  }
  return { file: label, sha256: fileHash.digest("hex"), tensors };
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
"-" reads standard input (streamed when it is a redirected file; a pipe is read into memory); a URL (http(s)://,
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
