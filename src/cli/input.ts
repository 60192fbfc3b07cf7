/**
 * Opening a command's input: a path, or "-" for standard input; and when the bytes are not a safetensors file at
 * all, naming what they are (`NotSafetensors`, with the command or step to use) instead of a header error such as
 * `HeaderTooLarge`.
 */
import * as fs from "node:fs";
import { isatty } from "node:tty";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import { type Header, parseHeader, readHeaderJson, readHeaderLength } from "../format/header.js";
import { SNIFF_BYTES } from "../format/sniff.js";
import { MemorySource } from "../io/source.js";
import { SafetensorsFile } from "../read/file.js";
import type { Backend } from "../read/node-files.js";
import { describeInput, explainNotSafetensors, openLocal } from "../read/node-input.js";
import { UsageError } from "./args.js";

/** `tty.isatty`, not `process.stdin.isTTY`: creating `process.stdin` makes a pipe non-blocking (reads then poll). */
function refuseTerminal(): void {
  if (isatty(0)) throw new UsageError(`"-" reads standard input, which is a terminal: pipe a file into it`);
}

/** One read from standard input into `into` (0 at its end), waiting out a non-blocking pipe that is empty. */
function readSomeStdin(into: Uint8Array): number {
  for (;;) {
    try {
      return fs.readSync(0, into, 0, into.length, null);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EOF") return 0;
      if (code !== "EAGAIN") throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

/** Fill `into` from standard input; returns how many bytes it got (fewer only at its end). */
function readStdinFully(into: Uint8Array): number {
  let done = 0;
  while (done < into.length) {
    const got = readSomeStdin(into.subarray(done));
    if (got === 0) break;
    done += got;
  }
  return done;
}

/** All of standard input, read synchronously (pipes and files alike). */
export function readStdin(): Uint8Array {
  refuseTerminal();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (let chunk = Buffer.allocUnsafe(1 << 20); ; ) {
    const got = readSomeStdin(chunk);
    if (got === 0) break;
    chunks.push(chunk.subarray(0, got));
    total += got;
    if (got === chunk.length) chunk = Buffer.allocUnsafe(Math.min(chunk.length * 2, 64 << 20));
    else chunk = chunk.subarray(got);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
}

/**
 * Standard input (a pipe) read as a stream, in memory the size of its header: the header is parsed, then the data
 * region is handed to the consumer chunk by chunk in order, and counted. The header check needs the file's length,
 * which a pipe only tells at its end: the header is checked against the length its tensors claim (the length is
 * the parser's last check), and the count at the end must match, or the error is the parser's for the real length.
 */
export interface StreamConsumer {
  /** The header is valid (but for the final length check): `headerBytes` are the N bytes after the prefix. */
  start(header: Header, headerBytes: Uint8Array): void;
  /** The data region, in order, in chunks of any size. */
  data(chunk: Uint8Array): void;
}

export function streamStdin(consumer?: StreamConsumer): Header {
  refuseTerminal();
  const head = new Uint8Array(SNIFF_BYTES);
  const got = readStdinFully(head);
  const fail = (error: unknown, length?: number): never => {
    throw explainNotSafetensors(error, "-", head.subarray(0, got), length);
  };
  const attempt = <T>(run: () => T, length?: number): T => {
    try {
      return run();
    } catch (error) {
      return fail(error, length);
    }
  };
  if (got < 8) attempt(() => readHeaderLength(head.subarray(0, got), got), got);
  const n = attempt(() => readHeaderLength(head, Number.MAX_SAFE_INTEGER));
  const headerBytes = new Uint8Array(n);
  headerBytes.set(head.subarray(8, Math.min(got, 8 + n)));
  const inHead = Math.max(0, Math.min(got - 8, n));
  const gotHeader = inHead + (inHead < n ? readStdinFully(headerBytes.subarray(inHead)) : 0);
  if (gotHeader < n) attempt(() => readHeaderLength(head, 8 + gotHeader), 8 + gotHeader);
  let header: Header;
  try {
    header = parseHeader(headerBytes, 8 + n);
  } catch (error) {
    if (!isSafetensorError(error) || error.code !== "MetadataIncompleteBuffer") fail(error);
    let claimed = 0;
    for (const entry of readHeaderJson(headerBytes).entries) claimed = Math.max(claimed, Number(entry.end));
    header = attempt(() => parseHeader(headerBytes, 8 + n + claimed));
  }
  consumer?.start(header, headerBytes);
  let count = 0;
  const take = (chunk: Uint8Array) => {
    const wanted = Math.max(0, Math.min(chunk.length, header.dataLength - count));
    if (wanted > 0) consumer?.data(chunk.subarray(0, wanted));
    count += chunk.length;
  };
  if (got > 8 + n) take(head.subarray(8 + n, got));
  for (const chunk = Buffer.allocUnsafe(1 << 20); ; ) {
    const read = readSomeStdin(chunk);
    if (read === 0) break;
    take(chunk.subarray(0, read));
  }
  if (count !== header.dataLength) attempt(() => parseHeader(headerBytes, 8 + n + count));
  return header;
}

/** A safetensors file over bytes in memory (`label` names them in errors: "-" for standard input). */
export function openBytes(label: string, bytes: Uint8Array): SafetensorsFile {
  try {
    return SafetensorsFile.open(new MemorySource(bytes));
  } catch (error) {
    throw explainNotSafetensors(error, label, bytes.subarray(0, SNIFF_BYTES), bytes.length);
  }
}

/**
 * Standard input as a path when it is a regular file (`< model.safetensors`: read in place, like any file), else
 * undefined (a pipe: it has to be read into memory).
 */
export function stdinAsPath(): string | undefined {
  try {
    return process.platform !== "win32" && fs.fstatSync(0).isFile() ? "/dev/stdin" : undefined;
  } catch {
    return undefined;
  }
}

/** Open `file` ("-" reads standard input) for reading its header and tensors. */
export function openInput(file: string, backend: Backend): SafetensorsFile {
  if (file === "-") {
    const inPlace = stdinAsPath();
    if (inPlace === undefined) return openBytes(file, readStdin());
    return relabel(() => openLocal(inPlace, backend), inPlace, file);
  }
  return openLocal(file, backend);
}

/**
 * Just the header of `file` (all its checks made), with the backend that read it. Standard input from a pipe is
 * streamed through, never held in memory.
 */
export function inputHeader(file: string, backend: Backend): { header: Header; backend: string } {
  if (file === "-" && stdinAsPath() === undefined) return { header: streamStdin(), backend: "stdin" };
  using opened = openInput(file, backend);
  return { header: opened.header, backend: opened.backend };
}

/** Errors about `from` (the /dev/stdin path) name `to` ("standard input") instead. */
function relabel<T>(run: () => T, from: string, to: string): T {
  try {
    return run();
  } catch (error) {
    if (!isSafetensorError(error) || !error.message.includes(from)) throw error;
    throw new SafetensorError(error.code, error.message.replaceAll(from, describeInput(to)), { cause: error });
  }
}
