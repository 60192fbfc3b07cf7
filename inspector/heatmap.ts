/**
 * A 2-D tensor's heat map on a canvas: one pixel per cell (the cell's mean |x|, from src/view/stats.ts), on a
 * sequential dark-to-bright scale from 0 to the largest cell, so where the weight mass sits reads at a glance.
 * Cells without a finite value are drawn in a neutral grey.
 */
import type { Heatmap } from "../src/view/stats.js";

/** A perceptually ordered ramp (viridis stops), interpolated. */
const STOPS: [number, number, number][] = [
  [68, 1, 84],
  [59, 82, 139],
  [33, 145, 140],
  [94, 201, 98],
  [253, 231, 37],
];

function color(t: number): [number, number, number] {
  const x = Math.max(0, Math.min(1, t)) * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(x));
  const f = x - i;
  const a = STOPS[i]!;
  const b = STOPS[i + 1]!;
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

/** Draws the map; returns the value of the brightest colour (the largest cell). */
export function drawHeatmap(canvas: HTMLCanvasElement, map: Heatmap): number {
  canvas.width = map.cols;
  canvas.height = map.rows;
  const ctx = canvas.getContext("2d");
  if (!ctx) return 0;
  let top = 0;
  for (const v of map.values) if (v !== null && v > top) top = v;
  const image = ctx.createImageData(map.cols, map.rows);
  map.values.forEach((v, i) => {
    const [r, g, b] = v === null ? [160, 160, 160] : color(top ? v / top : 0);
    image.data.set([r, g, b, 255], 4 * i);
  });
  ctx.putImageData(image, 0, 0);
  return top;
}
