/**
 * A model folder for conversion, local or remote: its small files (config.json, tokenizer files) and its
 * safetensors parts, found as llama.cpp's converter finds them (the index's shards in name order, else
 * `model*.safetensors` in name order). Remote folders: `hf://ORG/REPO[@REV]`, `https://…/DIR/`, `s3://BUCKET/DIR/`.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { Header } from "../format/header.js";
import { AsyncSafetensorsFile, toSource } from "../read/async-file.js";
import { type NodeOpenOptions, withEnvironment } from "../read/node-async.js";
import { openFile } from "../read/node-files.js";
import { resolveHfUrl } from "../remote/hf.js";
import { HttpSource } from "../remote/http.js";
import { resolveS3 } from "../remote/s3.js";
import type { TokenizerFiles } from "./vocab.js";

type Json = Record<string, unknown>;

/** Largest small file read (config, tokenizer files): 256 MiB. */
export const DEFAULT_MAX_MODEL_FILE_BYTES = 256 << 20;

export interface ModelTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** Which part (index into `parts`) and where its bytes are. */
  readonly part: number;
  readonly offset: number;
  readonly length: number;
}

export interface ModelPart {
  readonly file: string;
  /** Local parts: the path (read with positional reads, copied with copy_file_range). */
  readonly path?: string;
  /** Remote parts: the opened file (read by range). */
  readonly remote?: AsyncSafetensorsFile;
}

export interface ModelFolder {
  readonly name: string;
  readonly remote: boolean;
  readonly parts: readonly ModelPart[];
  readonly tensors: readonly ModelTensor[];
  readonly config: Json;
  readonly generationConfig: Json | undefined;
  readonly tokenizer: TokenizerFiles;
  close(): Promise<void>;
}

const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

function parseJson(bytes: Uint8Array | null, file: string, required: boolean): Json | undefined {
  if (bytes === null) {
    if (required) throw new SafetensorError("UnsupportedModel", `the model has no ${file}`);
    return undefined;
  }
  try {
    const value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
    return value as Json;
  } catch (cause) {
    throw new SafetensorError("UnsupportedModel", `${file} is not a JSON object`, { cause });
  }
}

interface Access {
  name: string;
  remote: boolean;
  read(file: string): Promise<Uint8Array | null>;
  list(): Promise<string[] | null>;
  openPart(file: string): Promise<{ file: string; path?: string; remote?: AsyncSafetensorsFile; header: Header }>;
}

function localAccess(dir: string, maxBytes: number): Access {
  return {
    name: pythonDirName(dir),
    remote: false,
    async read(file) {
      const p = path.join(dir, file);
      let stat: fs.Stats;
      try {
        stat = fs.statSync(p);
      } catch {
        return null;
      }
      if (!stat.isFile()) return null;
      if (stat.size > maxBytes) throw new SafetensorError("TooLarge", `${p} is larger than ${maxBytes} bytes`);
      return fs.readFileSync(p);
    },
    async list() {
      return fs.readdirSync(dir);
    },
    async openPart(file) {
      const p = path.join(dir, file);
      const f = openFile(p, { backend: "pread" });
      try {
        return { file, path: p, header: f.header };
      } finally {
        f.close();
      }
    },
  };
}

/** Path(dir).name as Python gives it: the last component, "" for "." and "/". */
function pythonDirName(dir: string): string {
  const trimmed = dir.replace(/\/+$/, "");
  const base = path.basename(trimmed);
  return base === "." || base === ".." ? "" : base;
}

function remoteAccess(location: string, options: NodeOpenOptions, maxBytes: number): Access {
  const env = withEnvironment(options);
  let base = location.replace(/\/+$/, "");
  const urlOf = (file: string): { url: string; http: NodeOpenOptions } => {
    if (/^hf:\/\//i.test(base)) {
      const { url, headers } = resolveHfUrl(`${base}/${file}`, env);
      return { url, http: { ...env, headers } };
    }
    if (/^s3:\/\//i.test(base)) {
      const { url, http } = resolveS3(`${base}/${file}`, env);
      return { url, http: { ...env, ...http } };
    }
    return { url: new URL(file, `${base}/`).href, http: env };
  };
  const segments = base.replace(URL_SCHEME, "").split("/");
  let name = segments[segments.length - 1] ?? "";
  if (/^hf:\/\//i.test(base)) {
    name = name.replace(/@.*$/, "");
    base = base.replace(/\/+$/, "");
  }
  return {
    name,
    remote: true,
    async read(file) {
      const { url, http } = urlOf(file);
      try {
        const { source, head } = await new HttpSource(url, http).openWithHead(maxBytes + 1);
        await source.close();
        if (head.length > maxBytes) throw new SafetensorError("TooLarge", `${file} is larger than ${maxBytes} bytes`);
        return head;
      } catch (error) {
        if (
          error instanceof SafetensorError &&
          error.code === "HttpError" &&
          /HTTP (404|403|401)\b/.test(error.message)
        ) {
          return null;
        }
        throw error;
      }
    },
    async list() {
      return null;
    },
    async openPart(file) {
      const { url, http } = urlOf(file);
      const remote = await AsyncSafetensorsFile.open(toSource(url, http), http);
      return { file, remote, header: remote.header };
    },
  };
}

export interface OpenModelOptions extends NodeOpenOptions {
  maxFileBytes?: number;
}

/**
 * Open MODEL: a directory, an index file (model.safetensors.index.json), or a remote folder. Reads config.json and
 * the tokenizer files and every part's header; tensor bytes are read later.
 */
export async function openModelFolder(model: string, options: OpenModelOptions = {}): Promise<ModelFolder> {
  const maxBytes = options.maxFileBytes ?? DEFAULT_MAX_MODEL_FILE_BYTES;
  let location = model;
  let indexName: string | undefined;
  if (/\.json$/i.test(location)) {
    indexName = location.replace(/^.*\//, "");
    location = URL_SCHEME.test(location) ? location.slice(0, location.lastIndexOf("/")) : path.dirname(location);
  } else if (!URL_SCHEME.test(location)) {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(location);
    } catch (cause) {
      throw new SafetensorError("IoError", `cannot read ${location}`, { cause });
    }
    if (!stat.isDirectory()) {
      throw new SafetensorError(
        "UnsupportedModel",
        `${location}: MODEL is a directory (or index) with config.json and the tokenizer files`,
      );
    }
  }
  const access = URL_SCHEME.test(location)
    ? remoteAccess(location, options, maxBytes)
    : localAccess(location, maxBytes);
  const read = (file: string) => access.read(file);
  const [config, generation, tokenizerJson, tokenizerConfig, spm, addedTokens, jinja, templateJson] = await Promise.all(
    [
      read("config.json"),
      read("generation_config.json"),
      read("tokenizer.json"),
      read("tokenizer_config.json"),
      read("tokenizer.model"),
      read("added_tokens.json"),
      read("chat_template.jinja"),
      read("chat_template.json"),
    ],
  );
  const configJson = parseJson(config, "config.json", true)!;
  let generationConfig: Json | undefined;
  try {
    generationConfig = parseJson(generation, "generation_config.json", false);
  } catch {
    generationConfig = undefined; // the converter ignores a generation_config.json it cannot read
  }
  const tokenizer: TokenizerFiles = {
    config: configJson,
    tokenizerJson: parseJson(tokenizerJson, "tokenizer.json", false),
    tokenizerConfig: parseJson(tokenizerConfig, "tokenizer_config.json", false),
    sentencePiece: spm ?? undefined,
    addedTokensJson: parseJson(addedTokens, "added_tokens.json", false),
    chatTemplateJinja: jinja === null ? undefined : new TextDecoder().decode(jinja),
    chatTemplateJson: parseJson(templateJson, "chat_template.json", false),
  };
  // Parts: the index's shards, else model*.safetensors (local) or model.safetensors (remote).
  let partNames: string[];
  const index = parseJson(
    await read(indexName ?? "model.safetensors.index.json"),
    indexName ?? "index",
    indexName !== undefined,
  );
  if (index !== undefined) {
    const weightMap = index.weight_map;
    if (weightMap === null || typeof weightMap !== "object") {
      throw new SafetensorError("InvalidIndex", "the index has no weight_map");
    }
    partNames = [...new Set(Object.values(weightMap as Record<string, string>))].sort();
  } else {
    const listed = await access.list();
    partNames =
      listed === null
        ? ["model.safetensors"]
        : listed.filter((f) => f.startsWith("model") && f.endsWith(".safetensors")).sort();
  }
  if (partNames.length === 0)
    throw new SafetensorError("UnsupportedModel", "the model has no model*.safetensors files");
  for (const p of partNames) {
    if (p.includes("/") || p.includes("\\") || p === ".." || p.startsWith(".")) {
      throw new SafetensorError("UnsafePath", `index names an unsafe shard ${JSON.stringify(p)}`);
    }
  }
  const parts: ModelPart[] = [];
  const tensors: ModelTensor[] = [];
  const seen = new Set<string>();
  try {
    for (const file of partNames) {
      const opened = await access.openPart(file);
      const i = parts.length;
      parts.push({ file, path: opened.path, remote: opened.remote });
      const names = [...opened.header.tensors.keys()].sort();
      for (const name of names) {
        if (seen.has(name))
          throw new SafetensorError("InvalidIndex", `tensor ${JSON.stringify(name)} is in two shards`);
        seen.add(name);
        const info = opened.header.tensors.get(name)!;
        tensors.push({
          name,
          dtype: info.dtype,
          shape: info.shape,
          part: i,
          offset: opened.header.dataStart + info.dataOffsets[0],
          length: info.byteLength,
        });
      }
    }
  } catch (error) {
    await Promise.all(parts.map((p) => p.remote?.close()));
    throw error;
  }
  return {
    name: access.name,
    remote: access.remote,
    parts,
    tensors,
    config: configJson,
    generationConfig,
    tokenizer,
    async close() {
      await Promise.all(parts.map((p) => p.remote?.close()));
    },
  };
}
