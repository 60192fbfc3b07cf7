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

/** The identity of a mapped file, as every window names it (a class: see native.ts AddonOpenedFile). */
class FileIdentity implements MappedFile {
  // `declare`d and assigned, not parameter properties: those compile to field declarations, whose initializer V8
  // compiles on the first loadFile (see read/tensor.ts Tensor).
  declare readonly path: string;
  declare readonly dev: number;
  declare readonly ino: number;
  constructor(path: string, dev: number, ino: number) {
    this.path = path;
    this.dev = dev;
    this.ino = ino;
  }
}

export function mappedFile(path: string, dev: number, ino: number): MappedFile {
  return new FileIdentity(path, dev, ino);
}

/** Where a window's bytes come from (a class: an object literal with a double field is copied by a runtime call). */
class WindowOrigin {
  declare readonly file: MappedFile;
  declare readonly start: number;
  constructor(file: MappedFile, start: number) {
    this.file = file;
    this.start = start;
  }
}

const windows = new WeakMap<ArrayBufferLike, WindowOrigin>();

/** `view` is a window of `file` whose byte 0 is byte `start` of the file. */
export function registerWindow(view: ArrayBufferView, file: MappedFile, start: number): void {
  registerBuffer(view.buffer, file, start - view.byteOffset);
}

/** `buffer` is a window of `file` whose byte 0 is byte `start` of the file (no view made to say so). */
// biome-ignore format: the parentheses make V8 compile it with the module (read/node-files.ts loadMapped)
export const registerBuffer = (function registerBuffer(buffer: ArrayBufferLike, file: MappedFile, start: number): void {
  windows.set(buffer, new WindowOrigin(file, start));
});

/** The file and offset `view`'s bytes come from, or null when it is not a registered window. */
export function fileRangeOf(view: ArrayBufferView): { file: MappedFile; offset: number } | null {
  const window = windows.get(view.buffer);
  return window ? { file: window.file, offset: window.start + view.byteOffset } : null;
}
