/**
 * What `inspect` shows of a GGUF: version, alignment and data offset; metadata with arrays summarised (type, count,
 * first items); the tensor table (name, type, dimensions, offset, bytes); parameter counts by type; and the
 * tokenizer (model, pre-tokenizer, vocabulary size, special tokens with their text, merges, chat template). Pure.
 */
import type { GgufHeader } from "./reader.js";
import type { GgufArray, GgufValue } from "./types.js";

export interface GgufSummary {
  format: "gguf";
  version: number;
  alignment: number;
  dataOffset: number;
  fileSize: number;
  architecture: string | null;
  name: string | null;
  metadata: { key: string; type: string; value: unknown }[];
  tensors: { name: string; type: string; dims: number[]; offset: number; bytes: number }[];
  parameters: number;
  byType: Record<string, { tensors: number; parameters: number; bytes: number }>;
  tokenizer: {
    model: string | null;
    pre: string | null;
    tokens: number;
    merges: number;
    special: Record<string, { id: number; text: string | null }>;
    chatTemplate: { chars: number } | null;
  } | null;
}

/** How many items of an array `inspect` shows before "…". */
export const ARRAY_PREVIEW = 8;

function plain(v: unknown): unknown {
  return typeof v === "bigint" ? (Number.isSafeInteger(Number(v)) ? Number(v) : String(v)) : v;
}

function arraySummary(a: GgufArray): { itemType: string; count: number; head: unknown[] } {
  const head: unknown[] = [];
  const n = Math.min(ARRAY_PREVIEW, a.items.length);
  for (let i = 0; i < n; i++) {
    const item = (a.items as ArrayLike<unknown>)[i];
    head.push(a.itemType === "ARRAY" ? arraySummary(item as GgufArray) : plain(item));
  }
  return { itemType: a.itemType, count: a.items.length, head };
}

/** A metadata value for display and JSON: scalars as they are (64-bit integers as numbers when safe), arrays summarised. */
export function displayValue(v: GgufValue): unknown {
  return v.type === "ARRAY" ? arraySummary(v.value) : plain(v.value);
}

function scalar(header: GgufHeader, key: string): unknown {
  const v = header.metadata.get(key);
  return v === undefined || v.type === "ARRAY" ? undefined : plain(v.value);
}

export function summarizeGguf(header: GgufHeader): GgufSummary {
  const byType: GgufSummary["byType"] = {};
  let parameters = 0;
  for (const t of header.tensors) {
    const entry = byType[t.type.name] ?? { tensors: 0, parameters: 0, bytes: 0 };
    byType[t.type.name] = entry;
    entry.tensors++;
    entry.parameters += t.elements;
    entry.bytes += t.byteLength;
    parameters += t.elements;
  }
  const tokens = header.metadata.get("tokenizer.ggml.tokens");
  const tokenList = tokens?.type === "ARRAY" && tokens.value.itemType === "STRING" ? tokens.value.items : null;
  const merges = header.metadata.get("tokenizer.ggml.merges");
  const model = scalar(header, "tokenizer.ggml.model");
  const special: Record<string, { id: number; text: string | null }> = {};
  for (const [key] of header.metadata) {
    const m = /^tokenizer\.ggml\.(\w+)_token_id$/.exec(key);
    if (m === null) continue;
    const id = Number(scalar(header, key));
    special[m[1]!] = { id, text: tokenList?.[id] ?? null };
  }
  const template = scalar(header, "tokenizer.chat_template");
  return {
    format: "gguf",
    version: header.version,
    alignment: header.alignment,
    dataOffset: header.dataOffset,
    fileSize: header.fileSize,
    architecture: (scalar(header, "general.architecture") as string | undefined) ?? null,
    name: (scalar(header, "general.name") as string | undefined) ?? null,
    metadata: [...header.metadata].map(([key, v]) => ({
      key,
      type: v.type === "ARRAY" ? `ARRAY[${v.value.itemType}]` : v.type,
      value: displayValue(v),
    })),
    tensors: header.tensors.map((t) => ({
      name: t.name,
      type: t.type.name,
      dims: [...t.dims],
      offset: t.fileOffset,
      bytes: t.byteLength,
    })),
    parameters,
    byType,
    tokenizer:
      model === undefined && tokenList === null
        ? null
        : {
            model: (model as string | undefined) ?? null,
            pre: (scalar(header, "tokenizer.ggml.pre") as string | undefined) ?? null,
            tokens: tokenList?.length ?? 0,
            merges: merges?.type === "ARRAY" ? merges.value.items.length : 0,
            special,
            chatTemplate: typeof template === "string" ? { chars: template.length } : null,
          },
  };
}
