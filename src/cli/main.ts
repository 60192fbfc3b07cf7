/**
 * The `safetensors` command. Exit status: 0 success, 1 invalid input (bad file, missing tensor, I/O error),
 * 2 usage error.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { toFloat32 } from "../codecs/index.js";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { writeAllAt, writeFileAtomic } from "../io/node-write.js";
import { type Backend, openFile } from "../node.js";
import { backendReport } from "./doctor.js";
import { formatInspect, inspectJson } from "./inspect.js";

const USAGE = `usage: safetensors <command> [options]

commands:
  inspect FILE [--json] [--verbose]      tensor table with totals by dtype and parameter count
  validate FILE...                       check files; "ok", or error[<code>]: <message> on stderr
  hash FILE [--json]                     SHA-256 of the file and of each tensor's bytes
  get FILE NAME --out PATH [--as f32] [--slice SPEC]
                                         write a tensor's raw little-endian bytes (or a slice, or f32)
  doctor                                 which read backends this installation has

options:
  --backend auto|mmap|pread              how files are read (default auto)
  -h, --help                             this text`;

class UsageError extends Error {}

export interface Io {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

const processIo: Io = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
};

export async function main(argv: string[], io: Io = processIo): Promise<number> {
  try {
    return await run(argv, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`safetensors: ${error.message}\n\n${USAGE}\n`);
      return 2;
    }
    if (isSafetensorError(error)) {
      io.stderr(`error[${error.code}]: ${error.message}\n`);
      return 1;
    }
    const code = (error as NodeJS.ErrnoException)?.code;
    if (typeof code === "string") {
      io.stderr(`error[IoError]: ${(error as Error).message}\n`);
      return 1;
    }
    throw error;
  }
}

function parse<const O extends NonNullable<ParseArgsConfig["options"]>>(argv: string[], options: O) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

function backendOf(value: unknown): Backend {
  if (value === undefined) return "auto";
  if (value === "auto" || value === "mmap" || value === "pread") return value;
  throw new UsageError(`--backend must be auto, mmap or pread (got ${value})`);
}

async function run(argv: string[], io: Io): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === "-h" || command === "--help" || command === "help") {
    (command === undefined ? io.stderr : io.stdout)(`${USAGE}\n`);
    return command === undefined ? 2 : 0;
  }
  switch (command) {
    case "inspect":
      return inspect(rest, io);
    case "validate":
      return validate(rest, io);
    case "hash":
      return hash(rest, io);
    case "get":
      return get(rest);
    case "doctor":
      io.stdout(backendReport());
      return 0;
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  }
}

function inspect(argv: string[], io: Io): number {
  const { values, positionals } = parse(argv, {
    json: { type: "boolean" },
    verbose: { type: "boolean" },
    backend: { type: "string" },
  });
  if (positionals.length !== 1) throw new UsageError("inspect takes exactly one FILE");
  const path = positionals[0]!;
  using file = openFile(path, { backend: backendOf(values.backend) });
  if (values.json) {
    io.stdout(`${inspectJson(file.header)}\n`);
  } else {
    io.stdout(formatInspect(path, file.header, values.verbose ? file.backend : undefined));
  }
  return 0;
}

function validate(argv: string[], io: Io): number {
  const { values, positionals } = parse(argv, { backend: { type: "string" } });
  if (positionals.length === 0) throw new UsageError("validate takes one or more FILEs");
  const backend = backendOf(values.backend);
  const prefix = (path: string) => (positionals.length > 1 ? `${path}: ` : "");
  let status = 0;
  for (const path of positionals) {
    try {
      openFile(path, { backend }).close();
      io.stdout(`${prefix(path)}ok\n`);
    } catch (error) {
      if (!isSafetensorError(error)) throw error;
      io.stderr(`${prefix(path)}error[${error.code}]: ${error.message}\n`);
      status = 1;
    }
  }
  return status;
}

/** Tensors tile the data region, so one pass over them in offset order hashes the file too. */
function hash(argv: string[], io: Io): number {
  const { values, positionals } = parse(argv, { json: { type: "boolean" }, backend: { type: "string" } });
  if (positionals.length !== 1) throw new UsageError("hash takes exactly one FILE");
  using file = openFile(positionals[0]!, {
    backend: values.backend === undefined ? "pread" : backendOf(values.backend),
  });
  const fileHash = createHash("sha256");
  const prefix = new Uint8Array(8);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(file.header.headerLength), true);
  fileHash.update(prefix);
  const fd = fs.openSync(positionals[0]!, "r");
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
}

/** Slice specs often start with "-" ("-1, :"), which parseArgs would take for an option: bind the next word. */
function bindSliceValue(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--slice" && i + 1 < argv.length) out.push(`--slice=${argv[++i]}`);
    else out.push(argv[i]!);
  }
  return out;
}

function get(argv: string[]): number {
  const { values, positionals } = parse(bindSliceValue(argv), {
    out: { type: "string", short: "o" },
    as: { type: "string" },
    slice: { type: "string" },
    backend: { type: "string" },
  });
  if (positionals.length !== 2) throw new UsageError("get takes FILE and NAME");
  if (values.out === undefined) throw new UsageError("get needs --out PATH (use --out - for standard output)");
  if (values.as !== undefined && values.as !== "f32") throw new UsageError("--as only supports f32");
  const [path, name] = positionals as [string, string];
  using file = openFile(path, { backend: backendOf(values.backend) });
  const info: TensorInfo = file.info(name);
  let bytes: Uint8Array;
  let dtype = info.dtype;
  let count = info.shape.reduce((a, b) => a * b, 1);
  if (values.slice !== undefined) {
    const sliced = file.getSlice(name).get(values.slice);
    bytes = sliced.data;
    count = sliced.numel;
  } else {
    bytes = file.getTensor(name).data;
  }
  if (values.as === "f32" && dtype !== "F32") {
    const floats = toFloat32(dtype, bytes, { count });
    bytes = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
    dtype = "F32";
  }
  if (values.out === "-") writeToStdout(bytes);
  else writeFileAtomic(values.out, (fd) => writeAllAt(fd, bytes, 0));
  return 0;
}

function writeToStdout(bytes: Uint8Array): void {
  for (let done = 0; done < bytes.length; ) {
    try {
      done += fs.writeSync(1, bytes, done, Math.min(bytes.length - done, 1 << 20));
    } catch (error) {
      // A non-blocking pipe that is full: wait for the reader.
      if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
    }
  }
}
