/**
 * A 2-D tensor's heat map on a canvas: one cell per (downsampled) value, a diverging blue-white-red scale centred on
 * zero and clipped at the largest magnitude, so sign and scale read at a glance. Non-finite cells are drawn black.
 */
import type { Heatmap } from "./model.js";

function color(t: number): [number, number, number] {
  // t in [-1, 1]: blue (negative) through white to red (positive).
  const a = Math.min(1, Math.abs(t));
  return t < 0
    ? [Math.round(255 - 208 * a), Math.round(255 - 144 * a), Math.round(255 - 33 * a)]
    : [Math.round(255 - 33 * a), Math.round(255 - 208 * a), Math.round(255 - 208 * a)];
}

export function drawHeatmap(canvas: HTMLCanvasElement, map: Heatmap): number {
  canvas.width = map.cols;
  canvas.height = map.rows;
  const ctx = canvas.getContext("2d");
  if (!ctx) return 0;
  let scale = 0;
  for (const v of map.values) if (Number.isFinite(v)) scale = Math.max(scale, Math.abs(v));
  const image = ctx.createImageData(map.cols, map.rows);
  for (let i = 0; i < map.values.length; i++) {
    const v = map.values[i]!;
    const [r, g, b] = Number.isFinite(v) ? color(scale ? v / scale : 0) : [0, 0, 0];
    image.data[4 * i] = r;
    image.data[4 * i + 1] = g;
    image.data[4 * i + 2] = b;
    image.data[4 * i + 3] = 255;
  }
  ctx.putImageData(image, 0, 0);
  return scale;
}
