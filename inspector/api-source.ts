/** The served page's source: the JSON API of `safetensors view`, at URLs relative to the page. */
import { type Inspectable, ShownError, type Summary, type TensorDetail, type TensorRequest } from "./model.js";

async function getJson<T>(url: string): Promise<T> {
  const response = await fetch(url, { headers: { accept: "application/json" } });
  const body = (await response.json().catch(() => null)) as (T & { code?: string; message?: string }) | null;
  if (!response.ok) {
    throw new ShownError(body?.code ?? "HttpError", body?.message ?? `${url}: HTTP ${response.status}`);
  }
  if (body === null) throw new ShownError("HttpError", `${url}: not JSON`);
  return body;
}

export class ApiSource implements Inspectable {
  constructor(readonly label: string) {}

  summary(): Promise<Summary> {
    return getJson<Summary>("./api/summary");
  }

  tensor(name: string, request: TensorRequest): Promise<TensorDetail> {
    const query = new URLSearchParams({ name, bins: String(request.bins), heatmap: String(request.heatmap) });
    return getJson<TensorDetail>(`./api/tensor?${query}`);
  }
}

/**
 * Whether this page was served by `safetensors view`: its API answers. Opened from disk (file://) or from a plain
 * static server, the page is standalone and waits for dropped files.
 */
export async function servedSummary(): Promise<Summary | null> {
  if (location.protocol === "file:") return null;
  try {
    const response = await fetch("./api/summary", { headers: { accept: "application/json" } });
    if (!response.headers.get("content-type")?.includes("json")) return null;
    const body = (await response.json()) as Summary;
    // An invalid checkpoint is still served: its summary carries the error to show.
    return response.ok || body.error ? body : null;
  } catch {
    return null;
  }
}
