/** `safetensors hash`: SHA-256 of the whole file and of each tensor's bytes, in one pass. */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import type { AsyncSafetensorsFile } from "../async-file.js";
import { SafetensorError } from "../format/errors.js";
import { type Backend, openFile } from "../node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { isRemoteLocation, withRemote } from "./location.js";

export const command = defineCommand({
  usage: "hash FILE|URL [--json]",
  description: `SHA-256 of the file and of each tensor's bytes. Tensors tile the data region, so one pass over them in
offset order hashes the file too. Text output: "DIGEST  FILE", then "DIGEST  TENSOR" per tensor.
--json prints {"file_sha256","tensors":{NAME:DIGEST}} with tensors in file order.`,
  options: {
    json: { type: "boolean", help: "print JSON" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("hash takes exactly one FILE");
    const location = positionals[0]!;
    const { fileDigest, tensors } = isRemoteLocation(location)
      ? await withRemote(location, hashAsync)
      : hashLocal(location, backend);
    if (values.json) {
      const entries = [...tensors].map(([name, digest]) => `${JSON.stringify(name)}:${JSON.stringify(digest)}`);
      io.stdout(`{"file_sha256":${JSON.stringify(fileDigest)},"tensors":{${entries.join(",")}}}\n`);
    } else {
      io.stdout(`${fileDigest}  ${location}\n`);
      for (const [name, digest] of tensors) io.stdout(`${digest}  ${name}\n`);
    }
    return 0;
  },
});

interface Digests {
  fileDigest: string;
  tensors: Map<string, string>;
}

function hashLocal(path: string, backend: Backend | undefined): Digests {
  using file = openFile(path, { backend: backend ?? "pread" });
  const fileHash = createHash("sha256");
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(file.header.headerLength), true);
  fileHash.update(prefix);
  const fd = fs.openSync(path, "r");
  try {
    const chunk = Buffer.allocUnsafe(Math.min(8 << 20, Math.max(file.header.headerLength, file.header.dataLength, 1)));
    const readRange = (offset: number, length: number, sinks: ((bytes: Uint8Array) => void)[]) => {
      for (let done = 0; done < length; ) {
        const want = Math.min(chunk.length, length - done);
        const got = fs.readSync(fd, chunk, 0, want, offset + done);
        if (got === 0) throw new SafetensorError("IoError", "file changed while hashing (unexpected end of file)");
        for (const sink of sinks) sink(chunk.subarray(0, got));
        done += got;
      }
    };
    readRange(8, file.header.headerLength, [(b) => fileHash.update(b)]);
    const tensors = new Map<string, string>();
    for (const info of file.header.tensors.values()) {
      const tensorHash = createHash("sha256");
      readRange(file.header.dataStart + info.dataOffsets[0], info.byteLength, [
        (b) => fileHash.update(b),
        (b) => tensorHash.update(b),
      ]);
      tensors.set(info.name, tensorHash.digest("hex"));
    }
    return { fileDigest: fileHash.digest("hex"), tensors };
  } finally {
    fs.closeSync(fd);
  }
}

/** Remote reads of this size, a few in flight ahead of the hashing: bounded memory, the link kept busy. */
const REMOTE_CHUNK = 8 << 20;
const REMOTE_AHEAD = 4;

async function hashAsync(file: AsyncSafetensorsFile): Promise<Digests> {
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
  return { fileDigest: fileHash.digest("hex"), tensors };
}
