/**
 * One error type for the whole library. `code` is stable API: match on it, never on `message`.
 *
 * The first group mirrors the reference implementation's header checks (in the order they run); the
 * second covers everything after a header is known to be valid.
 */
/** The header checks' codes, in the order `parseHeader` runs them. */
export const HEADER_ERROR_CODES = [
  "HeaderTooSmall",
  "HeaderTooLarge",
  "InvalidHeaderLength",
  "InvalidHeaderUtf8",
  "InvalidHeaderJson",
  "InvalidHeaderStructure",
  "DuplicateKey",
  "UnknownDtype",
  "InvalidOffset",
  "ValidationOverflow",
  "MisalignedSlice",
  "TensorInvalidInfo",
  "MetadataIncompleteBuffer",
] as const;

/** The codes of the reference implementation's header checks (`HEADER_ERROR_CODES`). */
export type HeaderErrorCode = (typeof HEADER_ERROR_CODES)[number];

/** Every code a `SafetensorError` can carry; docs/errors.md says what each means. */
export type SafetensorErrorCode =
  | HeaderErrorCode
  // Use of a valid file, and writing.
  | "TensorNotFound"
  | "InvalidTensor"
  | "InvalidMetadata"
  | "InvalidSlice"
  | "UnsupportedDtype"
  | "TooLarge"
  | "Closed"
  | "IoError"
  | "BackendUnavailable"
  | "InvalidOption"
  // Writing files (streaming writer, saves): a region written twice, bytes past a tensor's end, bytes never written,
  // and the two IO failures a caller can act on (no space / file size limit; a read-only or forbidden directory).
  | "WriteConflict"
  | "WriteOutOfRange"
  | "IncompleteWrite"
  | "DiskFull"
  | "NotWritable"
  // In-place edits (src/edit): an undo journal that is torn, damaged or not this file's; a file whose last edit was
  // interrupted (its journal is still there: recover it); a mask that does not fit its tensor; a write whose
  // read-back does not show exactly the intended change.
  | "JournalCorrupt"
  | "InterruptedEdit"
  | "InvalidMask"
  | "VerificationFailed"
  // Integrity (src/integrity): a delta patch that is malformed, made for another base, or whose result is not the
  // file it promises; a manifest that is malformed or signed by another key (or tampered with).
  | "PatchBaseMismatch"
  | "PatchInvalid"
  | "PatchTargetMismatch"
  | "ManifestInvalid"
  | "SignatureInvalid"
  | "SignatureKeyMismatch"
  // Sharded checkpoints.
  | "InvalidIndex"
  | "InterruptedSave"
  | "UnsafePath"
  // Async and remote sources.
  | "HttpError"
  | "SourceChanged"
  // WebGPU (src/gpu): the device refused a buffer or a command (out of memory, a limit, a lost device).
  | "GpuError"
  // The input is another kind of file altogether (a PyTorch checkpoint, an index, a web page...): see sniff.ts.
  | "NotSafetensors"
  // PyTorch pickle checkpoints (src/pickle).
  | "InvalidCheckpoint"
  | "InvalidPickle"
  | "PickleLimit"
  | "UnsafePickle"
  | "UnsupportedPickle"
  // Merges and LoRA bakes (src/merge): a config that is wrong, one that asks for what is not supported (refused by
  // name before anything is read), inputs that do not fit together, an adapter that is malformed or unsupported.
  | "InvalidMergeConfig"
  | "UnsupportedMergeConfig"
  | "MergeMismatch"
  | "InvalidAdapter"
  | "UnsupportedAdapter"
  // GGUF (src/gguf): a malformed GGUF file; a GGUF past one of the reader's limits (counts, string and array
  // lengths, header size); a tensor type we cannot decode; a model we cannot convert (architecture, tokenizer or
  // config refused by name before anything is written).
  | "InvalidGguf"
  | "GgufLimit"
  | "UnsupportedGgufType"
  | "UnsupportedModel";

/** The one error type of the library: match on `code` (stable), never on `message`. */
export class SafetensorError extends Error {
  override readonly name = "SafetensorError";
  readonly code: SafetensorErrorCode;
  /** The tensor the error is about, when there is one. */
  readonly tensor: string | undefined;
  /**
   * The file the error is about, when the code that failed knew it: the shard of a sharded checkpoint (also named in
   * the message), or the path given to `openFile`.
   */
  readonly file: string | undefined;
  /** `TensorNotFound`: the names closest to the one asked for, closest first (also in the message). */
  readonly suggestions: readonly string[] | undefined;

  constructor(
    code: SafetensorErrorCode,
    message: string,
    options?: { tensor?: string; file?: string; suggestions?: readonly string[]; cause?: unknown },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.tensor = options?.tensor;
    this.file = options?.file;
    this.suggestions = options?.suggestions;
  }
}

/**
 * `error` about `file`: a `SafetensorError` that does not name a file yet gets `file` set and, with `prefix`, the
 * message prefixed with it (a shard's error names its shard: "DIR/model-00003-of-00006.safetensors: tensors cover
 * ..."). Anything else is returned as it is. The original stays reachable as `cause` when it had none of its own.
 */
export function inFile(error: unknown, file: string, prefix: boolean): unknown {
  if (!(error instanceof SafetensorError) || error.file !== undefined) return error;
  const message = prefix && !error.message.includes(file) ? `${file}: ${error.message}` : error.message;
  const { tensor, suggestions } = error;
  return new SafetensorError(error.code, message, { tensor, file, suggestions, cause: error.cause ?? error });
}

/**
 * A system error's text said once: "no such file or directory (ENOENT)" for Node's "ENOENT: no such file or
 * directory, lstat '/abs/path'" (the code twice, the path the caller's message already names) and for the native
 * addon's "open: No such file or directory" (code ENOENT).
 */
export function systemErrorText(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  let text = String((error as { message?: unknown } | null)?.message ?? error).split("\n")[0] ?? "";
  if (typeof code === "string") {
    if (text.startsWith(`${code}: `)) text = text.slice(code.length + 2);
    // Node: ", lstat '/path'" (and " -> '/dest'"); the addon: "open: " before the system's text.
    text = text.replace(/, [a-z_]+ '.*'$/s, "").replace(/^[a-z_]+: (?=[A-Z])/, "");
  }
  text = text.length > 1 && /^[A-Z][a-z]/.test(text) ? text[0]!.toLowerCase() + text.slice(1) : text;
  return typeof code === "string" && !text.includes(code) ? `${text} (${code})` : text;
}

/** Whether `error` is a `SafetensorError` (narrows its type). */
export function isSafetensorError(error: unknown): error is SafetensorError {
  return error instanceof SafetensorError;
}

/** Names longer than this are shortened in messages (the full name stays in `SafetensorError.tensor`). */
const MESSAGE_NAME_CHARS = 200;

/**
 * Quote a tensor name for messages so that odd names (empty, spaces, control characters) stay visible. A very long
 * name (a hostile header can hold one of 100 M characters) is cut, with its length said.
 */
export function quoteName(name: string): string {
  if (name.length <= MESSAGE_NAME_CHARS) return JSON.stringify(name);
  return `${JSON.stringify(name.slice(0, MESSAGE_NAME_CHARS))}… (${name.length} characters)`;
}
