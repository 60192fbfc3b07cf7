/** What the orchestrator and the workers (ours and bench/ref_worker.py) say to each other. */

/** A worker's argument (one JSON string). */
export interface WorkerRequest {
  figure: string;
  /** Ours: the backend row. The reference: "main" or the key of a reference extra. */
  variant: string;
  path: string;
  pt: string | null;
  scratch: string;
}

/** What a worker prints as its last stdout line, prefixed by `RESULT `. */
export interface WorkerResult {
  ok: boolean;
  /** Wall time of just the measured operation (or the median of the repeated calls). */
  ms?: number;
  /** RSS after minus RSS before the operation, MiB. */
  rss_delta_mib?: number;
  /** The figure cannot be measured here (missing backend or API): not an error. */
  unavailable?: string;
  error?: string;
  /** Figure-specific extras (backend actually used, whether the addon was loaded, bytes, ...). */
  extra?: Record<string, number | string>;
}

export const RESULT_PREFIX = "RESULT ";

/** The environment variable that disables the native addon (`pread-no-addon` row). */
export const NO_NATIVE_ENV = "SAFETENSORS_NO_NATIVE";
