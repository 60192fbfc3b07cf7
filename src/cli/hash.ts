/** `safetensors hash`: SHA-256 of the whole file and of each tensor's bytes, in one pass. */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { openFile } from "../node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";

export const command = defineCommand({
  usage: "hash FILE [--json]",
  description: `SHA-256 of the file and of each tensor's bytes. Tensors tile the data region, so one pass over them in
offset order hashes the file too. Text output: "DIGEST  FILE", then "DIGEST  TENSOR" per tensor.
--json prints {"file_sha256","tensors":{NAME:DIGEST}} with tensors in file order.`,
  options: {
    json: { type: "boolean", help: "print JSON" },
  },
  run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("hash takes exactly one FILE");
    using file = openFile(positionals[0]!, { backend: backend ?? "pread" });
    const fileHash = createHash("sha256");
    const prefix = new Uint8Array(8);
    new DataView(prefix.buffer).setBigUint64(0, BigInt(file.header.headerLength), true);
    fileHash.update(prefix);
    const fd = fs.openSync(positionals[0]!, "r");
    try {
      const chunk = Buffer.allocUnsafe(
        Math.min(8 << 20, Math.max(file.header.headerLength, file.header.dataLength, 1)),
      );
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
      const fileDigest = fileHash.digest("hex");
      if (values.json) {
        const entries = [...tensors].map(([name, digest]) => `${JSON.stringify(name)}:${JSON.stringify(digest)}`);
        io.stdout(`{"file_sha256":${JSON.stringify(fileDigest)},"tensors":{${entries.join(",")}}}\n`);
      } else {
        io.stdout(`${fileDigest}  ${positionals[0]}\n`);
        for (const [name, digest] of tensors) io.stdout(`${digest}  ${name}\n`);
      }
    } finally {
      fs.closeSync(fd);
    }
    return 0;
  },
});
