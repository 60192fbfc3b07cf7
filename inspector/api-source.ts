/** The served page's source: the JSON API of `safetensors view`, at URLs relative to the page. */
import {
  type ApiError,
  type Inspectable,
  ShownError,
  type SummaryAnswer,
  type TensorReport,
  type TensorRequest,
  type ViewSummary,
} from "./model.js";

async function getJson<T>(url: string): Promise<T> {
  const response = await fetch(url, { headers: { accept: "application/json" } });
  const body = (await response.json().catch(() => null)) as (T & { error?: ApiError }) | null;
  if (body?.error) throw new ShownError(body.error.code, body.error.message);
  if (!response.ok || body === null) throw new ShownError("HttpError", `${url}: HTTP ${response.status}`);
  return body;
}

export class ApiSource implements Inspectable {
  constructor(
    readonly label: string,
    private readonly first: ViewSummary,
  ) {}

  async summary(): Promise<ViewSummary> {
    return this.first;
  }

  tensor(name: string, request: TensorRequest): Promise<TensorReport> {
    const query = new URLSearchParams({ name, bins: String(request.bins), heatmap: String(request.heatmap) });
    return getJson<TensorReport>(`./api/tensor?${query}`);
  }
}

/**
 * The served checkpoint's summary (or its error), or null when this page was not served by `safetensors view`:
 * opened from disk (file://) or from a plain static server, the page is standalone and waits for dropped files.
 */
export async function servedSummary(): Promise<SummaryAnswer | null> {
  if (location.protocol === "file:") return null;
  try {
    const response = await fetch("./api/summary", { headers: { accept: "application/json" } });
    if (!response.headers.get("content-type")?.includes("json")) return null;
    const body = (await response.json()) as SummaryAnswer;
    // An invalid checkpoint is still served: its summary carries the error to show.
    return response.ok || "error" in body ? body : null;
  } catch {
    return null;
  }
}
