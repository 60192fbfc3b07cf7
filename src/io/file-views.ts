/**
 * Which views are windows onto a file: memory maps register each window here, so that a save of tensors that are
 * views of a file can copy the bytes file to file (`copy_file_range`, as `cp` does) instead of from memory. Node-only.
 */

/**
 * A mapped file: its path when it was opened and its identity (`fs.fstatSync`'s dev and ino of the descriptor that
 * was mapped, taken at open: node-file.ts `openWithHead`), to tell a file later replaced at that path.
 */
export interface MappedFile {
  readonly path: string;
  readonly dev: number;
  readonly ino: number;
}

/**
 * The identity of a mapped file, as every window names it. Object literals, not classes: the first `new` of a class
 * compiles its constructor and builds its initial map inside the caller's call, and loadFile's first call (what issue
 * 18's probe times against the reference's load_file) made one of each. Measured with callgrind, the bench's 48-tensor
 * checkpoint, the first loadFile after a gc(): Node 20 1.08 -> 0.99 M instructions, Node 22 0.80 -> 0.71 M, Node 24
 * 0.76 -> 0.68 M; a later call costs ~14 k more (~4 us: the literals' double fields are copied by a runtime call).
 */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const mappedFile = (function mappedFile(path: string, dev: number, ino: number): MappedFile {
  return { path, dev, ino };
});

/** Where a window's bytes come from. */
interface WindowOrigin {
  readonly file: MappedFile;
  readonly start: number;
}

const windows = new WeakMap<ArrayBufferLike, WindowOrigin>();

/** `view` is a window of `file` whose byte 0 is byte `start` of the file. */
export function registerWindow(view: ArrayBufferView, file: MappedFile, start: number): void {
  registerBuffer(view.buffer, file, start - view.byteOffset);
}

/** `buffer` is a window of `file` whose byte 0 is byte `start` of the file (no view made to say so). */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const registerBuffer = (function registerBuffer(buffer: ArrayBufferLike, file: MappedFile, start: number): void {
  windows.set(buffer, { file, start });
});

/** The file and offset `view`'s bytes come from, or null when it is not a registered window. */
export function fileRangeOf(view: ArrayBufferView): { file: MappedFile; offset: number } | null {
  const window = windows.get(view.buffer);
  return window ? { file: window.file, offset: window.start + view.byteOffset } : null;
}
