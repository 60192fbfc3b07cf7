/**
 * Deflated zip records without node:zlib: the platform's `DecompressionStream("deflate-raw")` (browsers, Deno, Node
 * ≥ 20). It is asynchronous and the container readers are synchronous, so the records are inflated before the
 * container is opened (`openContainerAsync`), each into a buffer of its declared size: a record that inflates to more
 * is cut off there and refused, so a zip bomb costs at most its declared sizes, which `maxInflateBytes` bounds.
 */
import { SafetensorError } from "../format/errors.js";

/** Inflate `compressed` (raw deflate) to exactly `size` bytes; more or fewer is InvalidCheckpoint. */
export async function inflateRawStream(compressed: Uint8Array, size: number, name: string): Promise<Uint8Array> {
  if (typeof DecompressionStream !== "function") {
    throw new SafetensorError(
      "UnsupportedPickle",
      `zip: record ${name} is deflated and this platform has neither node:zlib nor DecompressionStream`,
    );
  }
  const bad = (why: string): SafetensorError =>
    new SafetensorError("InvalidCheckpoint", `zip: deflated record ${name} ${why}`);
  const stream = new DecompressionStream("deflate-raw");
  const writer = stream.writable.getWriter();
  // Errors of the input side surface on the reader too; these promises only must not go unhandled.
  writer.write(compressed as Uint8Array<ArrayBuffer>).catch(() => {});
  writer.close().catch(() => {});
  const reader = stream.readable.getReader();
  const out = new Uint8Array(size);
  let length = 0;
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (error) {
        throw bad(`does not inflate: ${(error as Error).message}`);
      }
      if (chunk.done) break;
      if (length + chunk.value.length > size) throw bad(`inflates to more than its declared ${size} bytes`);
      out.set(chunk.value, length);
      length += chunk.value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  if (length !== size) throw bad(`inflates to ${length} bytes, not its declared ${size}`);
  return out;
}
