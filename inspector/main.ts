/**
 * The inspector page. Served by `safetensors view`, it shows the checkpoint behind the API; opened on its own (from
 * disk or any static server) it opens files dropped onto it, or picked, right here in the page.
 */
import "./style.css";
import { ApiSource, servedSummary } from "./api-source.js";
import { dtypeChart, histogramChart } from "./charts.js";
import { float, group, humanBytes, humanCount, shapeText } from "./format.js";
import { drawHeatmap } from "./heatmap.js";
import { openDropped } from "./local-source.js";
import { metadataRows, trainingFacts } from "./metadata-view.js";
import { asShown, type DtypeRow, type Inspectable, type Summary, type SummaryTensor } from "./model.js";
import { buildTree } from "./tree-model.js";
import { TreeView } from "./tree-view.js";

const BINS = 64;
const HEATMAP = 128;

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Partial<HTMLElementTagNameMap[K]> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
}

let current: Inspectable | null = null;
let summary: Summary | null = null;
let byName = new Map<string, SummaryTensor>();
/** Bumped per pick, so a slow tensor read never overwrites a later pick. */
let pickSerial = 0;

const tree = new TreeView($("tree"), (node) => {
  if (node.tensor) void showTensor(node.tensor.name);
});

function status(text: string): void {
  $("status").textContent = text;
}

function showError(error: unknown, where = ""): void {
  const shown = asShown(error);
  const box = $("error");
  box.replaceChildren(el("strong", { className: "code" }, shown.code), ` ${where}${shown.message}`);
  box.hidden = false;
}

function dtypeRows(s: Summary): DtypeRow[] {
  if (s.dtypes) return s.dtypes;
  const rows = new Map<string, DtypeRow>();
  for (const t of s.tensors) {
    const row = rows.get(t.dtype) ?? { dtype: t.dtype, tensors: 0, parameters: 0, bytes: 0 };
    row.tensors++;
    row.parameters += t.shape.reduce((a, b) => a * b, 1);
    row.bytes += t.data_offsets[1] - t.data_offsets[0];
    rows.set(t.dtype, row);
  }
  return [...rows.values()];
}

/** A label and its value in a `<dl>`, wrapped in a div so the pair stays together in a grid. */
function card(label: string, value: string, title?: string): HTMLElement[] {
  const dd = el("dd", {}, value);
  if (title) dd.title = title;
  return [el("div", {}, el("dt", {}, label), dd)];
}

function renderSummary(s: Summary): void {
  const dtypes = [...dtypeRows(s)].sort((a, b) => b.bytes - a.bytes);
  $("cards").replaceChildren(
    ...card("file bytes", humanBytes(s.file_bytes), `${group(s.file_bytes)} bytes`),
    ...card("header bytes", group(s.header_bytes)),
    ...card("tensors", group(s.tensors.length)),
    ...card("parameters", humanCount(s.parameters), `${group(s.parameters)} parameters`),
    ...(s.shards ? card("shards", group(s.shards.length)) : []),
  );
  $("cards").dataset.parameters = String(s.parameters);
  const table = $<HTMLTableElement>("dtype-table");
  table.replaceChildren(
    el(
      "thead",
      {},
      el("tr", {}, el("th", {}, "dtype"), el("th", {}, "tensors"), el("th", {}, "parameters"), el("th", {}, "bytes")),
    ),
    el(
      "tbody",
      {},
      ...dtypes.map((r) =>
        el(
          "tr",
          {},
          el("td", {}, r.dtype),
          el("td", {}, group(r.tensors)),
          el("td", {}, group(r.parameters)),
          el("td", {}, group(r.bytes)),
        ),
      ),
    ),
  );
  dtypeChart($<HTMLCanvasElement>("dtype-chart"), dtypes);
  ($("dtype-chart").parentElement as HTMLElement).style.height = `${Math.max(80, 28 * dtypes.length + 40)}px`;
  $("warnings").replaceChildren(...(s.warnings ?? []).map((w) => el("li", {}, w)));

  const metadata = s.metadata ?? {};
  const rows = metadataRows(metadata);
  $("metadata-box").hidden = rows.length === 0;
  $("metadata-count").textContent = `(${rows.length} keys)`;
  $("metadata").replaceChildren(
    ...rows.map((r) => {
      const value =
        r.json !== undefined
          ? el(
              "details",
              {},
              el("summary", {}, r.text.length > 80 ? `${r.text.slice(0, 77)}…` : r.text),
              el("pre", {}, JSON.stringify(r.json, null, 2)),
            )
          : el("span", { className: "value" }, r.text);
      return el("tr", {}, el("th", { scope: "row" }, r.key), el("td", {}, value));
    }),
  );
  const facts = trainingFacts(metadata);
  $("facts-box").hidden = facts.length === 0;
  $("facts").replaceChildren(...facts.flatMap((f) => card(f.label, f.value)));

  $("shards-box").hidden = !s.shards;
  if (s.shards) {
    $("shards-count").textContent = `(${s.shards.length})`;
    $("shards").replaceChildren(
      el(
        "thead",
        {},
        el("tr", {}, el("th", {}, "shard"), el("th", {}, "tensors"), el("th", {}, "bytes"), el("th", {}, "header")),
      ),
      el(
        "tbody",
        {},
        ...s.shards.map((sh) =>
          el(
            "tr",
            {},
            el("td", { className: "name" }, sh.file),
            el("td", {}, group(sh.tensors)),
            el("td", { title: `${group(sh.file_bytes)} bytes` }, humanBytes(sh.file_bytes)),
            el("td", {}, group(sh.header_bytes)),
          ),
        ),
      ),
    );
  }

  const select = $<HTMLSelectElement>("dtype-filter");
  select.replaceChildren(
    el("option", { value: "" }, "all dtypes"),
    ...dtypes.map((r) => el("option", { value: r.dtype }, `${r.dtype} (${group(r.tensors)})`)),
  );
}

function applyFilter(): void {
  if (!summary) return;
  const text = $<HTMLInputElement>("filter").value.trim().toLowerCase();
  const dtype = $<HTMLSelectElement>("dtype-filter").value;
  const filtered = text !== "" || dtype !== "";
  const matching = filtered
    ? summary.tensors.filter((t) => (!dtype || t.dtype === dtype) && (!text || t.name.toLowerCase().includes(text)))
    : summary.tensors;
  // A filtered tree opens fully: the matches are what the reader asked to see (the list is virtualized).
  tree.show(buildTree(matching), filtered);
  $("tree-count").textContent = filtered
    ? `${group(matching.length)} of ${group(summary.tensors.length)} tensors match`
    : `${group(matching.length)} tensors`;
}

function statRow(label: string, value: string): HTMLElement {
  return el("tr", {}, el("th", { scope: "row" }, label), el("td", {}, value));
}

async function showTensor(name: string): Promise<void> {
  if (!current) return;
  const serial = ++pickSerial;
  tree.select(name);
  const detail = $("detail");
  const info = byName.get(name);
  detail.replaceChildren(el("h2", { className: "name" }, name), el("p", { className: "hint" }, "Reading…"));
  try {
    const d = await current.tensor(name, { bins: BINS, heatmap: HEATMAP });
    if (serial !== pickSerial) return;
    const bytes = d.byte_range[1] - d.byte_range[0];
    const stats = el("table", { className: "stats" });
    stats.append(
      statRow("dtype", d.dtype),
      statRow("shape", shapeText(d.shape)),
      statRow("elements", group(d.shape.reduce((a, b) => a * b, 1))),
      statRow("bytes", `${group(bytes)} (${humanBytes(bytes)})`),
      statRow("byte range", `[${group(d.byte_range[0])}, ${group(d.byte_range[1])})`),
      ...((d.shard ?? info?.shard) ? [statRow("shard", (d.shard ?? info?.shard)!)] : []),
      statRow("min", float(d.stats.min)),
      statRow("max", float(d.stats.max)),
      statRow("mean", float(d.stats.mean)),
      statRow("std", float(d.stats.std)),
      statRow("zeros", group(d.stats.zeros)),
      statRow("NaN", group(d.stats.nan)),
      statRow("±inf", group(d.stats.inf)),
    );
    for (const row of Array.from(stats.querySelectorAll("tr"))) {
      row.dataset.stat = row.firstElementChild!.textContent!;
    }
    const parts: HTMLElement[] = [el("h2", { className: "name" }, name), stats];
    if (d.sampled) {
      parts.push(el("p", { className: "sampled" }, `Sampled: ${describeSampling(d.sampled)}`));
    }
    const histogram = el("canvas", { id: "histogram" });
    histogram.setAttribute("role", "img");
    histogram.setAttribute("aria-label", `histogram of ${name} over ${d.histogram.counts.length} bins`);
    parts.push(el("h3", {}, "Histogram (finite values)"), el("div", { className: "chart-box histogram" }, histogram));
    let heat: HTMLCanvasElement | null = null;
    if (d.heatmap) {
      heat = el("canvas", { id: "heatmap", className: "heatmap" });
      heat.setAttribute("role", "img");
      const m = d.heatmap;
      const step = m.row_step > 1 || m.col_step > 1 ? `, every ${m.row_step}th row and ${m.col_step}th column` : "";
      heat.setAttribute("aria-label", `heat map ${m.rows}×${m.cols}${step}`);
      parts.push(
        el("h3", {}, "Heat map"),
        el("p", { className: "hint" }, `${m.rows} × ${m.cols} cells${step}; blue negative, red positive`),
        heat,
      );
    }
    detail.replaceChildren(...parts);
    histogramChart(histogram, d.histogram.edges, d.histogram.counts);
    if (heat && d.heatmap) {
      drawHeatmap(heat, d.heatmap);
      // Cells scaled up to at most 512 px wide and 360 px tall, keeping their aspect.
      const scale = Math.min(512 / d.heatmap.cols, 360 / d.heatmap.rows);
      heat.style.width = `${Math.round(d.heatmap.cols * scale)}px`;
    }
  } catch (error) {
    if (serial !== pickSerial) return;
    const shown = asShown(error);
    detail.replaceChildren(
      el("h2", { className: "name" }, name),
      el("p", { className: "error" }, el("strong", { className: "code" }, shown.code), ` ${shown.message}`),
    );
  }
}

function describeSampling(sampled: Record<string, unknown>): string {
  const parts = Object.entries(sampled).map(
    ([k, v]) => `${k.replace(/_/g, " ")} ${typeof v === "number" ? group(v) : String(v)}`,
  );
  return parts.length ? parts.join(", ") : "yes";
}

async function load(source: Inspectable, s?: Summary): Promise<void> {
  current = source;
  $("error").hidden = true;
  $("detail").replaceChildren(el("p", { className: "hint" }, "Pick a tensor to see its values."));
  $("source").textContent = source.label;
  document.title = `${source.label} · safetensors inspector`;
  status(`Reading ${source.label}…`);
  try {
    summary = s ?? (await source.summary());
  } catch (error) {
    summary = null;
    status("");
    $("view").hidden = true;
    showError(error);
    return;
  }
  status("");
  if (summary.error) {
    $("view").hidden = true;
    showError(summary.error);
    return;
  }
  $("welcome").hidden = true;
  $("view").hidden = false;
  byName = new Map(summary.tensors.map((t) => [t.name, t]));
  renderSummary(summary);
  $<HTMLInputElement>("filter").value = "";
  applyFilter();
}

async function openFiles(files: File[]): Promise<void> {
  if (!files.length) return;
  status(`Opening ${files.length === 1 ? files[0]!.name : `${files.length} files`}…`);
  try {
    const source = await openDropped(files);
    await load(source);
  } catch (error) {
    status("");
    $("view").hidden = true;
    showError(error, files.length === 1 ? `${files[0]!.name}: ` : "");
  }
}

function wireDrop(): void {
  const overlay = $("drop");
  let depth = 0;
  window.addEventListener("dragenter", (e) => {
    if (!e.dataTransfer?.types.includes("Files")) return;
    depth++;
    overlay.hidden = false;
  });
  window.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (!depth) overlay.hidden = true;
  });
  window.addEventListener("dragover", (e) => e.preventDefault());
  window.addEventListener("drop", (e) => {
    e.preventDefault();
    depth = 0;
    overlay.hidden = true;
    void openFiles(Array.from(e.dataTransfer?.files ?? []));
  });
  $<HTMLInputElement>("pick").addEventListener("change", (e) => {
    const input = e.target as HTMLInputElement;
    void openFiles(Array.from(input.files ?? []));
    input.value = "";
  });
}

async function start(): Promise<void> {
  wireDrop();
  let timer = 0;
  $("filter").addEventListener("input", () => {
    clearTimeout(timer);
    timer = window.setTimeout(applyFilter, 120);
  });
  $("dtype-filter").addEventListener("change", applyFilter);
  const served = await servedSummary();
  if (served) {
    await load(new ApiSource(served.index ?? served.file ?? location.host), served);
  } else {
    $("welcome").hidden = false;
  }
  document.body.dataset.ready = "true";
}

void start();
