/**
 * `safetensors hash`: SHA-256 of each file (sha256sum's format), of each tensor's bytes and the ecosystem's digests
 * (AutoV2, kohya's sshs_model_hash...), in one read of the file (`src/integrity/digests.ts`).
 */
import * as fs from "node:fs";
import { isSafetensorError } from "../format/errors.js";
import {
  type DigestOptions,
  digestDescriptor,
  FileDigester,
  type FileDigests,
  sizePrefix,
} from "../integrity/digests.js";
import type { AsyncSafetensorsFile } from "../read/async-file.js";
import type { Backend } from "../read/node-files.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { hashGguf, isGgufInput } from "./gguf-input.js";
import { openInput, stdinAsPath, streamStdin } from "./input.js";
import type { Io } from "./io.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { expandSharded } from "./sharded.js";

interface Digests extends FileDigests {
  file: string;
}

function hashPath(label: string, path: string, backend: Backend | undefined, options: DigestOptions): Digests {
  using file = openInput(path, backend ?? "pread");
  const fd = fs.openSync(path, "r");
  try {
    return { file: label, ...digestDescriptor(fd, file.header, label, options) };
  } finally {
    fs.closeSync(fd);
  }
}

async function hashInput(name: string, backend: Backend | undefined, options: DigestOptions): Promise<Digests> {
  if (isGgufInput(name)) {
    // GGUF: the file's and each tensor's SHA-256 (the safetensors ecosystem digests do not apply).
    const g = await hashGguf(name);
    return { file: name, size: 0, sha256: g.sha256, tensors: new Map(g.tensors.map((t) => [t.name, t.sha256])) };
  }
  if (isRemoteLocation(name)) return withRemote(name, (file) => hashRemote(name, file, options));
  if (name !== "-") return hashPath(name, name, backend, options);
  const inPlace = stdinAsPath();
  if (inPlace !== undefined) return hashPath(name, inPlace, backend, options);
  // A pipe: streamed, in memory the size of its header.
  let digester: FileDigester | undefined;
  streamStdin({
    start: (header, headerBytes) => {
      digester = new FileDigester(header, options);
      digester.update(sizePrefix(header.headerLength));
      digester.update(headerBytes);
    },
    data: (chunk) => digester!.update(chunk),
  });
  return { file: name, ...digester!.finish() };
}

/** Remote reads of this size, a few in flight ahead of the hashing: bounded memory, the link kept busy. */
const REMOTE_CHUNK = 8 << 20;
const REMOTE_AHEAD = 4;

async function hashRemote(label: string, file: AsyncSafetensorsFile, options: DigestOptions): Promise<Digests> {
  const { header } = file;
  const digester = new FileDigester(header, options);
  digester.update(sizePrefix(header.headerLength));
  digester.update(await file.readRange(8, header.headerLength));
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
    digester.update(bytes);
  }
  return { file: label, ...digester.finish() };
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
  const ecosystem = d.ecosystem ? `${JSON.stringify(d.ecosystem).slice(1, -1)},` : "";
  return `{${file}"file_sha256":${JSON.stringify(d.sha256)},${ecosystem}"tensors":{${entries.join(",")}}}`;
}

function text(d: Digests, withTensors: boolean): string {
  let out = checksumLine(d.sha256, d.file);
  for (const [key, value] of Object.entries(d.ecosystem ?? {})) out += `# ${key} ${value}\n`;
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
  ecosystem: boolean,
  backend: Backend | undefined,
  io: Io,
): Promise<number> {
  if (names.filter((name) => name === "-").length > 1) throw new UsageError('"-" (standard input) can be read once');
  const several = names.length > 1;
  const jsonEntries: string[] = [];
  let status = 0;
  for (const name of names) {
    try {
      // --json always carries the ecosystem's digests (they come from the same read; the third SHA-256 stream runs
      // on its own thread). Plain text prints them only when asked: by default it is exactly sha256sum's output.
      const digests = await hashInput(name, backend, { ecosystem: ecosystem || json });
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
  usage: "hash FILE|URL... [--tensors] [--ecosystem] [--json]",
  description: `SHA-256 of each file, and of each tensor's bytes, in one pass over the file (tensors tile the data region).
"-" reads standard input (a redirected file in place; a pipe streamed, in memory the size of its header); a URL (http(s)://,
hf://, s3://) is streamed with a few reads in flight.

Text output is sha256sum's: "DIGEST  FILE" per file, names with a backslash or newline escaped as sha256sum does,
so "safetensors hash *.safetensors > SUMS; sha256sum -c SUMS" works. --tensors adds "# tensor DIGEST  NAME" lines
after each file's line: comments to sha256sum -c. --ecosystem adds "# KEY VALUE" comment lines (also comments to
sha256sum -c) with the digests other tools identify files by: autov2 (A1111/Civitai AutoV2: the first 10 hex digits of the file's SHA-256),
sshs_model_hash (kohya sd-scripts / sd-webui-additional-networks: SHA-256 of the bytes after the header, from 8 + N to
the end, so metadata edits keep it), modelspec_hash_sha256 ("0x" + the same), autov1 and sshs_legacy_hash (the first
8 hex digits of the SHA-256 of the 64 KiB at byte 0x100000), data_sha256 (the same as sshs_model_hash). Every digest
comes from the same single read of the file; from 64 MiB on, the tensors' and the data region's SHA-256 run on
worker threads beside the file's.

--json with one FILE prints {"file_sha256","data_sha256","autov1","autov2","sshs_model_hash","sshs_legacy_hash",
"modelspec_hash_sha256","tensors":{NAME:DIGEST}} (tensors in file order; the ecosystem's digests always, --ecosystem
or not); with several FILEs, an array of the same with "file" first (or {"file","error":{"code","message"}} for a file that failed).
Exit status 1 when any file fails; the others are still hashed.`,
  options: {
    tensors: { type: "boolean", help: "also print each tensor's digest (as # comment lines)" },
    ecosystem: { type: "boolean", help: "text: also AutoV1/AutoV2, sshs_model_hash, modelspec.hash_sha256 lines" },
    json: { type: "boolean", help: "print JSON (always includes the tensors and the ecosystem's digests)" },
  },
  run({ values, positionals }, { io, backend }) {
    if (positionals.length === 0) throw new UsageError("hash takes one or more FILEs");
    return run(
      expandSharded(positionals, backend, io),
      values.json ?? false,
      values.tensors ?? false,
      values.ecosystem ?? false,
      backend,
      io,
    );
  },
});
