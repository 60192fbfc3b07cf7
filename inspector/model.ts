/**
 * What the page shows, in the shapes of the `safetensors view` JSON API (`GET /api/summary`, `GET /api/tensor`), so
 * the served page and a dropped file render through the same code.
 */

export interface ApiError {
  code: string;
  message: string;
}

export interface SummaryTensor {
  name: string;
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
  /** The shard file that holds it (shard sets only). */
  shard?: string;
}

export interface DtypeRow {
  dtype: string;
  tensors: number;
  parameters: number;
  bytes: number;
}

export interface ShardRow {
  file: string;
  file_bytes: number;
  header_bytes: number;
  tensors: number;
  bytes?: number;
}

export interface Summary {
  /** What was opened: a file name, or a shard set's index. */
  file?: string;
  index?: string;
  file_bytes: number;
  header_bytes: number;
  metadata: Record<string, unknown> | null;
  parameters: number;
  tensors: SummaryTensor[];
  dtypes?: DtypeRow[];
  shards?: ShardRow[];
  warnings?: string[];
  error?: ApiError;
}

export interface TensorStats {
  min: number | null;
  max: number | null;
  mean: number | null;
  std: number | null;
  nan: number;
  inf: number;
  zeros: number;
}

export interface Heatmap {
  rows: number;
  cols: number;
  row_step: number;
  col_step: number;
  values: number[];
}

export interface TensorDetail {
  name: string;
  dtype: string;
  shape: number[];
  byte_range: [number, number];
  /** false, or how the values were sampled. */
  sampled: false | Record<string, unknown>;
  stats: TensorStats;
  histogram: { edges: number[]; counts: number[] };
  heatmap?: Heatmap;
  shard?: string;
}

export interface TensorRequest {
  bins: number;
  heatmap: number;
}

/** Something the page can show: a served checkpoint (the API) or files dropped onto the page. */
export interface Inspectable {
  readonly label: string;
  summary(): Promise<Summary>;
  tensor(name: string, request: TensorRequest): Promise<TensorDetail>;
}

/** An error as the page shows it: a stable code and a message. */
export class ShownError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function asShown(error: unknown): ShownError {
  if (error instanceof ShownError) return error;
  const e = error as { code?: unknown; message?: unknown };
  if (e && typeof e.code === "string" && typeof e.message === "string") return new ShownError(e.code, e.message);
  return new ShownError("Error", String(e?.message ?? error));
}
