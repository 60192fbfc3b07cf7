/** Charts by Chart.js (only the bar chart parts are bundled): bytes by dtype, and a tensor's histogram. */
import { BarController, BarElement, CategoryScale, Chart, LinearScale, LogarithmicScale, Tooltip } from "chart.js";
import type { DtypeTotal } from "../src/view/summary.js";
import { float, group, humanBytes } from "./format.js";

Chart.register(BarController, BarElement, CategoryScale, LinearScale, LogarithmicScale, Tooltip);

const ACCENT = "#2f6fde";
const charts = new WeakMap<HTMLCanvasElement, Chart>();

function replace(canvas: HTMLCanvasElement, make: () => Chart): Chart {
  charts.get(canvas)?.destroy();
  const chart = make();
  charts.set(canvas, chart);
  return chart;
}

export function dtypeChart(canvas: HTMLCanvasElement, rows: readonly DtypeTotal[]): void {
  replace(
    canvas,
    () =>
      new Chart(canvas, {
        type: "bar",
        data: {
          labels: rows.map((r) => r.dtype),
          datasets: [{ label: "bytes", data: rows.map((r) => r.bytes), backgroundColor: ACCENT }],
        },
        options: {
          indexAxis: "y",
          animation: false,
          maintainAspectRatio: false,
          plugins: {
            tooltip: {
              callbacks: {
                label: (item) => {
                  const r = rows[item.dataIndex]!;
                  return `${humanBytes(r.bytes)} · ${group(r.tensors)} tensors · ${group(r.parameters)} parameters`;
                },
              },
            },
          },
          scales: { x: { ticks: { callback: (v) => humanBytes(Number(v)) } } },
        },
      }),
  );
}

export function histogramChart(canvas: HTMLCanvasElement, edges: readonly number[], counts: readonly number[]): void {
  const centres = counts.map((_, i) => ((edges[i] ?? 0) + (edges[i + 1] ?? 0)) / 2);
  const labels = centres.map(float);
  replace(
    canvas,
    () =>
      new Chart(canvas, {
        type: "bar",
        data: {
          labels,
          datasets: [
            { label: "count", data: [...counts], backgroundColor: ACCENT, barPercentage: 1, categoryPercentage: 1 },
          ],
        },
        options: {
          animation: false,
          maintainAspectRatio: false,
          plugins: {
            tooltip: {
              callbacks: {
                title: (items) => {
                  const i = items[0]?.dataIndex ?? 0;
                  return `[${float(edges[i] ?? 0)}, ${float(edges[i + 1] ?? 0)}${i === counts.length - 1 ? "]" : ")"}`;
                },
                label: (item) => `${group(counts[item.dataIndex] ?? 0)} values`,
              },
            },
          },
          scales: {
            // Bin centres to 3 significant digits on the axis; the tooltip gives each bin's exact edges.
            x: { ticks: { maxTicksLimit: 8, maxRotation: 0, callback: (_, i) => Number(centres[i]!.toPrecision(3)) } },
            y: { beginAtZero: true },
          },
        },
      }),
  );
}
