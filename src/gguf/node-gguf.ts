/**
 * `openGguf` for Node: a path opens a local file (positional reads), `s3://` an object store, http(s):// and
 * hf:// a remote file read by Range (the header in one request where it fits); `openGgufSync` for local paths.
 */

import type { ByteSource, ByteSourceOpener } from "../io/async-source.js";
import { PreadSource } from "../io/node-file.js";
import { FileHandleSource } from "../io/node-file-handle.js";
import { toSource } from "../read/async-file.js";
import { type NodeOpenOptions, withEnvironment } from "../read/node-async.js";
import { resolveS3 } from "../remote/s3.js";
import { AsyncGgufFile, GgufFile, type GgufOpenOptions } from "./file.js";

const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

export interface NodeGgufOptions extends GgufOpenOptions, NodeOpenOptions {}

/** Open a GGUF file by path or URL (http(s)://, hf://, s3://), or from any byte source. */
export async function openGguf(
  input: string | URL | ByteSource | ByteSourceOpener,
  options: NodeGgufOptions = {},
): Promise<AsyncGgufFile> {
  if (typeof input === "string" && !URL_SCHEME.test(input)) {
    return AsyncGgufFile.open(await FileHandleSource.open(input), options);
  }
  if (typeof input !== "string" && !(input instanceof URL)) return AsyncGgufFile.open(input, options);
  const resolved = withEnvironment(options);
  const spec = String(input);
  if (/^s3:\/\//i.test(spec)) {
    const { url, http } = resolveS3(spec, resolved);
    return AsyncGgufFile.open(toSource(url, http), { ...resolved, ...options });
  }
  return AsyncGgufFile.open(toSource(spec, resolved), { ...resolved, ...options });
}

/** Open a local GGUF file for synchronous reads. */
export function openGgufSync(path: string, options: GgufOpenOptions = {}): GgufFile {
  const source = PreadSource.open(path);
  try {
    return GgufFile.open(source, options);
  } catch (error) {
    source.close();
    throw error;
  }
}
