/**
 * Commands take a local path or a remote location (http(s)://, hf://, s3://) alike. Remote ones are read with the
 * async reader: one request for headers under 1 MiB, the file pinned by its ETag/Last-Modified/size (a change while
 * reading is SourceChanged), HF_* and AWS_* settings from the environment.
 */
import type { AsyncSafetensorsFile } from "../read/async-file.js";
import { isRemoteLocation } from "../remote/location.js";

export { isRemoteLocation };

/** Open a remote location; `use` runs with the file, which is closed afterwards. */
export async function withRemote<T>(location: string, use: (file: AsyncSafetensorsFile) => Promise<T>): Promise<T> {
  // Loaded on first use: the remote readers (fetch, SigV4) are not part of a local command's start-up.
  const { openAsync } = await import("../read/node-async.js");
  const file = await openAsync(location);
  try {
    return await use(file);
  } finally {
    await file.close();
  }
}
