/**
 * What the page shows, in the shapes of the `safetensors view` JSON API: `GET /api/summary` is a `ViewSummary`
 * (src/view/summary.ts), `GET /api/tensor` a `TensorReport`. The served page and dropped files render through the
 * same code.
 */
import type { TensorReport } from "../src/view/report.js";
import type { ViewSummary } from "../src/view/summary.js";

export type { TensorReport, ViewSummary };

export interface ApiError {
  code: string;
  message: string;
}

/** `/api/summary`: the summary, or the error that kept the file from opening. */
export type SummaryAnswer = ViewSummary | { error: ApiError };

export interface TensorRequest {
  bins: number;
  heatmap: number;
}

/** Something the page can show: a served checkpoint (the API) or files dropped onto the page. */
export interface Inspectable {
  readonly label: string;
  summary(): Promise<ViewSummary>;
  tensor(name: string, request: TensorRequest): Promise<TensorReport>;
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
