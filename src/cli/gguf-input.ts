/**
 * What inspect, validate and hash do with a GGUF file (local or URL): the GGUF header read and checked by
 * src/gguf (one request for a remote header where it fits), shown as a summary, a verdict or digests.
 */

import { createHash } from "node:crypto";
import * as fs from "node:fs";
import type { AsyncGgufFile } from "../gguf/file.js";
import { openGguf } from "../gguf/node-gguf.js";
import { summarizeGguf } from "../gguf/summary.js";
import { ggufAsSafetensorsHeader } from "../gguf/view-header.js";
import { plural } from "../view/inspect-format.js";
import type { ServedTarget } from "../view/node-server.js";
import { summarizeFile } from "../view/summary.js";
import type { Io } from "./io.js";
import { isRemoteLocation } from "./location.js";

/** A local file that starts with the GGUF magic, or a URL whose path ends in .gguf. */
export function isGgufInput(input: string): boolean {
  if (input === "-") return false;
  if (isRemoteLocation(input)) return /\.gguf(?:$|[?#])/i.test(input);
  let fd: number | undefined;
  try {
    fd = fs.openSync(input, "r");
    if (!fs.fstatSync(fd).isFile()) return false;
    const head = new Uint8Array(4);
    return fs.readSync(fd, head, 0, 4, 0) === 4 && new TextDecoder().decode(head) === "GGUF";
  } catch {
    return false;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

async function withGguf<T>(input: string, use: (file: AsyncGgufFile) => Promise<T> | T): Promise<T> {
  const file = await openGguf(input);
  try {
    return await use(file);
  } finally {
    await file.close();
  }
}

const count = (n: number) => n.toLocaleString("en-US");

function short(value: unknown): string {
  const text = JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? String(v) : v)) ?? String(value);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

/** `inspect` of a GGUF: text, or the summary as JSON. */
export function inspectGguf(input: string, json: boolean, io: Io): Promise<number> {
  return withGguf(input, (file) => {
    const s = summarizeGguf(file.header);
    if (json) {
      io.stdout(`${JSON.stringify(s)}\n`);
      return 0;
    }
    const lines = [
      `${input}: GGUF version ${s.version}, ${s.architecture ?? "no architecture"}${s.name ? ` (${s.name})` : ""}`,
      `  ${count(s.fileSize)} bytes, data at ${s.dataOffset} (alignment ${s.alignment}), ${plural(s.metadata.length, "metadata key")}, ${plural(s.tensors.length, "tensor")}`,
      "metadata:",
      ...s.metadata.map((m) => `  ${m.key} (${m.type}) = ${short(m.value)}`),
      "tensors:",
      ...s.tensors.map((t) => `  ${t.name}  ${t.type}  [${t.dims.join(", ")}]  @${t.offset}  ${count(t.bytes)} bytes`),
      "totals:",
      ...Object.entries(s.byType).map(
        ([type, e]) =>
          `  ${type}: ${plural(e.tensors, "tensor")}, ${plural(e.parameters, "parameter")}, ${plural(e.bytes, "byte")}`,
      ),
      `  parameters: ${count(s.parameters)}`,
    ];
    if (s.tokenizer !== null) {
      const t = s.tokenizer;
      lines.push(
        "tokenizer:",
        `  ${t.model ?? "?"}${t.pre ? ` (pre-tokenizer ${t.pre})` : ""}, ${count(t.tokens)} tokens, ${count(t.merges)} merges`,
        ...Object.entries(t.special).map(
          ([k, v]) => `  ${k}: ${v.id}${v.text === null ? "" : ` ${JSON.stringify(v.text)}`}`,
        ),
        `  chat template: ${t.chatTemplate ? `${t.chatTemplate.chars} characters` : "none"}`,
      );
    }
    io.stdout(`${lines.join("\n")}\n`);
    return 0;
  });
}

/** `validate` of a GGUF: throws the reader's coded error, or returns. */
export function validateGguf(input: string): Promise<void> {
  return withGguf(input, () => {});
}

export interface GgufDigests {
  file: string;
  sha256: string;
  tensors: { name: string; sha256: string }[];
}

/** SHA-256 of the whole file and of each tensor's stored bytes, in one pass over the file. */
export function hashGguf(input: string): Promise<GgufDigests> {
  return withGguf(input, async (file) => {
    const whole = createHash("sha256");
    const tensors = [...file.header.tensors].sort((a, b) => a.fileOffset - b.fileOffset);
    const digests = tensors.map(() => createHash("sha256"));
    const size = file.header.fileSize;
    const chunk = 8 << 20;
    for (let at = 0; at < size; at += chunk) {
      const bytes = await file.source.read(at, Math.min(chunk, size - at));
      whole.update(bytes);
      tensors.forEach((t, i) => {
        const start = Math.max(t.fileOffset, at);
        const end = Math.min(t.fileOffset + t.byteLength, at + bytes.length);
        if (end > start) digests[i]!.update(bytes.subarray(start - at, end - at));
      });
    }
    const byName = new Map(tensors.map((t, i) => [t.name, digests[i]!.digest("hex")]));
    return {
      file: input,
      sha256: whole.digest("hex"),
      tensors: file.header.tensors.map((t) => ({ name: t.name, sha256: byName.get(t.name)! })),
    };
  });
}

/** `view` of a GGUF: its tensor table in the inspector's terms (see gguf/view-header.ts), bytes read from the GGUF. */
export async function ggufViewTarget(input: string): Promise<ServedTarget> {
  const gguf = await openGguf(input);
  try {
    const source = input.replace(/[?#].*$/, "");
    const summary = summarizeFile(ggufAsSafetensorsHeader(gguf.header), { source, quantization: null });
    return {
      summary,
      readRanges: (_, ranges) => Promise.all(ranges.map((r) => gguf.source.read(r.start, r.end - r.start))),
      close: () => gguf.close(),
    };
  } catch (error) {
    await gguf.close();
    throw error;
  }
}
