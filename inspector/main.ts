/**
 * The inspector page. Served by `safetensors view`, it shows the checkpoint behind the API; opened on its own (from
 * disk or any static server) it opens files dropped onto it, or picked, right here in the page.
 */
import "./style.css";
import type { TensorEntry } from "../src/view/summary.js";
import { buildTree } from "../src/view/tree.js";
import { ApiSource, servedSummary } from "./api-source.js";
import { dtypeChart, histogramChart } from "./charts.js";
import { float, group, humanBytes, humanCount, shapeText } from "./format.js";
import { drawHeatmap } from "./heatmap.js";
import { openDropped } from "./local-source.js";
import { asShown, type Inspectable, type TensorReport, type ViewSummary } from "./model.js";
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
let summary: ViewSummary | null = null;
let byName = new Map<string, TensorEntry>();
/** Bumped per pick, so a slow tensor read never overwrites a later pick. */
let pickSerial = 0;

const tree = new TreeView($("tree"), (name) => void showTensor(name));

function status(text: string): void {
  $("status").textContent = text;
}

function showError(error: unknown, where = ""): void {
  const shown = asShown(error);
  const box = $("error");
  box.replaceChildren(el("strong", { className: "code" }, shown.code), ` ${where}${shown.message}`);
  box.hidden = false;
}

/** A label and its value in a `<dl>`, wrapped in a div so the pair stays together in a grid. */
function card(label: string, value: string, title?: string): HTMLElement[] {
  const dd = el("dd", {}, value);
  if (title) dd.title = title;
  return [el("div", {}, el("dt", {}, label), dd)];
}

function table(head: string[], rows: (string | HTMLElement)[][]): HTMLElement[] {
  return [
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))),
  ];
}

function renderSummary(s: ViewSummary): void {
  const t = s.totals;
  const hub = s.hub_parameters.total;
  $("cards").replaceChildren(
    ...card("file bytes", humanBytes(t.file_bytes), `${group(t.file_bytes)} bytes`),
    ...card("header bytes", group(t.header_bytes)),
    ...card("tensors", group(t.tensors)),
    ...card("parameters", humanCount(t.parameters), `${group(t.parameters)} elements, as inspect counts them`),
    ...(hub === t.parameters
      ? []
      : card(
          "Hub parameters",
          humanCount(hub),
          `${group(hub)}: packed quantized weights unpacked, scales not counted`,
        )),
    ...(s.kind === "sharded" ? card("shards", group(t.files)) : []),
  );
  $("cards").dataset.parameters = String(t.parameters);
  $("cards").dataset.hubParameters = String(hub);
  const quantization = s.hub_parameters.quantization;
  const dtypes = s.dtypes;
  $("dtype-table").replaceChildren(
    ...table(
      ["dtype", "tensors", "parameters", "bytes"],
      dtypes.map((r) => [r.dtype, group(r.tensors), group(r.parameters), group(r.bytes)]),
    ),
  );
  dtypeChart($<HTMLCanvasElement>("dtype-chart"), dtypes);
  ($("dtype-chart").parentElement as HTMLElement).style.height = `${Math.max(80, 28 * dtypes.length + 40)}px`;
  const warnings = [
    ...(s.kind === "sharded" ? s.warnings : []),
    ...(quantization
      ? [`quantized: ${quantization.method}${quantization.bits ? ` ${quantization.bits}-bit` : ""}`]
      : []),
  ];
  $("warnings").replaceChildren(...warnings.map((w) => el("li", {}, w)));

  const view = s.metadata_view;
  $("metadata-box").hidden = view.rows.length === 0;
  $("metadata-count").textContent = `(${group(view.rows.length)} ${view.rows.length === 1 ? "key" : "keys"})`;
  $("metadata").replaceChildren(
    ...view.rows.map((r) => {
      const value =
        r.json !== undefined
          ? el(
              "details",
              {},
              el("summary", {}, r.value.length > 80 ? `${r.value.slice(0, 77)}…` : r.value),
              el("pre", {}, JSON.stringify(r.json, null, 2)),
            )
          : el("span", { className: "value" }, r.value);
      return el("tr", {}, el("th", { scope: "row" }, r.key), el("td", {}, value));
    }),
  );
  // The surfaced facts (src/view/metadata.ts), top tags among them; each pair names its fact for scripts and tests.
  const facts = view.facts.map((f) => {
    const [pair] = card(f.label, f.value, f.keys.join(", "));
    pair!.dataset.fact = f.id;
    return pair!;
  });
  $("facts-box").hidden = facts.length === 0;
  $("facts").replaceChildren(...facts);

  $("shards-box").hidden = s.kind !== "sharded";
  if (s.kind === "sharded") {
    $("shards-count").textContent = `(${s.placement.length})`;
    $("shards").replaceChildren(
      ...table(
        ["shard", "tensors", "parameters", "bytes", "header"],
        s.placement.map((p) => {
          const bytes = el("span", { title: `${group(p.file_bytes)} bytes` }, humanBytes(p.file_bytes));
          return [p.file ?? "", group(p.tensors), group(p.parameters), bytes, group(p.header_bytes)];
        }),
      ),
    );
  }

  const select = $<HTMLSelectElement>("dtype-filter");
  select.replaceChildren(
    el("option", { value: "" }, "all dtypes"),
    ...dtypes.map((r) => el("option", { value: r.dtype }, `${r.dtype} (${group(r.tensors)})`)),
  );
}

/** The name filter's pending debounce: any filter run cancels it, so a stale one never resets the tree later. */
let filterTimer = 0;

function applyFilter(): void {
  clearTimeout(filterTimer);
  if (!summary) return;
  const text = $<HTMLInputElement>("filter").value.trim().toLowerCase();
  const dtype = $<HTMLSelectElement>("dtype-filter").value;
  const filtered = text !== "" || dtype !== "";
  const all = summary.tensor_index;
  const matching = filtered
    ? all.filter((t) => (!dtype || t.dtype === dtype) && (!text || t.name.toLowerCase().includes(text)))
    : all;
  // A filtered tree opens fully: the matches are what the reader asked to see (the list is virtualized).
  tree.show(buildTree(matching), byName, filtered);
  $("tree-count").textContent = filtered
    ? `${group(matching.length)} of ${group(all.length)} tensors match`
    : `${group(matching.length)} tensors`;
}

function sampledText(d: TensorReport): string | null {
  const parts: string[] = [];
  if (d.sampled) {
    const s = d.sampled;
    parts.push(
      `stats and histogram from ${group(s.elements)} of ${group(s.of)} elements (${group(s.blocks)} evenly spaced blocks of ${group(s.block_elements)})`,
    );
  }
  if (d.heatmap?.sampled) {
    parts.push(`heat map from ${group(d.heatmap.sampled.rows_read)} of ${group(d.heatmap.sampled.of)} rows`);
  }
  return parts.length ? `Sampled: ${parts.join("; ")}.` : null;
}

function renderTensor(d: TensorReport): HTMLElement[] {
  const bytes = d.byte_range[1] - d.byte_range[0];
  const st = d.stats;
  const stats = el("table", { className: "stats" });
  const rows: [string, string][] = [
    ["dtype", d.dtype],
    ["shape", shapeText(d.shape)],
    ["elements", group(d.shape.reduce((a, b) => a * b, 1))],
    ["bytes", `${group(bytes)} (${humanBytes(bytes)})`],
    ["byte range", `[${group(d.byte_range[0])}, ${group(d.byte_range[1])})`],
    ...(d.file === null ? [] : ([["shard", d.file]] as [string, string][])),
    ["min", st.exact_min ?? float(st.min)],
    ["max", st.exact_max ?? float(st.max)],
    ["mean", float(st.mean)],
    ["std", float(st.std)],
    ["zeros", group(st.zeros)],
    ["NaN", group(st.nan)],
    ["±inf", group(st.inf)],
  ];
  for (const [label, value] of rows) {
    const tr = el("tr", {}, el("th", { scope: "row" }, label), el("td", {}, value));
    tr.dataset.stat = label;
    stats.append(tr);
  }
  const parts: HTMLElement[] = [el("h2", { className: "name" }, d.name), stats];
  const sampled = sampledText(d);
  if (sampled) parts.push(el("p", { className: "sampled" }, sampled));
  if (d.values === "complex parts")
    parts.push(el("p", { className: "hint" }, "Real and imaginary parts counted as values."));
  const histogram = el("canvas", { id: "histogram" });
  histogram.setAttribute("role", "img");
  histogram.setAttribute("aria-label", `histogram of ${d.name} over ${d.histogram.counts.length} bins`);
  parts.push(el("h3", {}, "Histogram (finite values)"), el("div", { className: "chart-box histogram" }, histogram));
  if (d.heatmap) {
    const m = d.heatmap;
    const heat = el("canvas", { id: "heatmap", className: "heatmap" });
    heat.setAttribute("role", "img");
    const cells =
      m.row_step > 1 || m.col_step > 1 ? `, each the mean |x| of ${m.row_step} × ${m.col_step} values` : ", |x|";
    heat.setAttribute("aria-label", `heat map of ${m.rows} by ${m.cols} cells${cells}`);
    parts.push(el("h3", {}, "Heat map"), el("p", { className: "hint" }, `${m.rows} × ${m.cols} cells${cells}`), heat);
  }
  return parts;
}

async function showTensor(name: string): Promise<void> {
  if (!current) return;
  const serial = ++pickSerial;
  tree.select(name);
  const detail = $("detail");
  detail.replaceChildren(el("h2", { className: "name" }, name), el("p", { className: "hint" }, "Reading…"));
  try {
    const d = await current.tensor(name, { bins: BINS, heatmap: HEATMAP });
    if (serial !== pickSerial) return;
    detail.replaceChildren(...renderTensor(d));
    histogramChart($<HTMLCanvasElement>("histogram"), d.histogram.edges, d.histogram.counts);
    if (d.heatmap) {
      const heat = $<HTMLCanvasElement>("heatmap");
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

async function load(source: Inspectable, s?: ViewSummary): Promise<void> {
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
  $("welcome").hidden = true;
  $("view").hidden = false;
  byName = new Map(summary.tensor_index.map((t) => [t.name, t]));
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
  $("filter").addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = window.setTimeout(applyFilter, 120);
  });
  $("dtype-filter").addEventListener("change", applyFilter);
  const served = await servedSummary();
  if (served && "error" in served) {
    showError(served.error);
  } else if (served) {
    await load(new ApiSource(served.source || location.host, served), served);
  } else {
    $("welcome").hidden = false;
  }
  document.body.dataset.ready = "true";
}

void start();
