/**
 * INTERIM until src/view/stats.ts lands: stats, histogram and heat map of a decoded tensor, in the API's shapes.
 */
import { canDecode } from "../src/codecs/index.js";
import { SafetensorError } from "../src/format/errors.js";
import type { Tensor } from "../src/tensor.js";
import type { Heatmap, TensorStats } from "./model.js";

function values(tensor: Tensor): ArrayLike<number> {
  if (!canDecode(tensor.dtype)) throw new SafetensorError("UnsupportedDtype", `no stats for ${tensor.dtype}`);
  return tensor.toFloat32();
}

export function tensorStats(
  tensor: Tensor,
  options: { bins: number },
): { stats: TensorStats; histogram: { edges: number[]; counts: number[] }; sampled: false } {
  const v = values(tensor);
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  let finite = 0;
  let nan = 0;
  let inf = 0;
  let zeros = 0;
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    if (Number.isNaN(x)) nan++;
    else if (!Number.isFinite(x)) inf++;
    else {
      if (x < min) min = x;
      if (x > max) max = x;
      sum += x;
      finite++;
      if (x === 0) zeros++;
    }
  }
  const mean = finite ? sum / finite : null;
  let sq = 0;
  if (mean !== null) for (let i = 0; i < v.length; i++) if (Number.isFinite(v[i]!)) sq += (v[i]! - mean) ** 2;
  const bins = finite ? options.bins : 0;
  const lo = finite ? min : 0;
  const hi = finite ? (max > min ? max : min + 1) : 0;
  const edges = Array.from({ length: bins + 1 }, (_, i) => lo + ((hi - lo) * i) / bins);
  const counts = new Array<number>(bins).fill(0);
  for (let i = 0; i < v.length && bins; i++) {
    const x = v[i]!;
    if (!Number.isFinite(x)) continue;
    counts[Math.min(bins - 1, Math.floor(((x - lo) / (hi - lo)) * bins))]!++;
  }
  return {
    stats: {
      min: finite ? min : null,
      max: finite ? max : null,
      mean,
      std: finite ? Math.sqrt(sq / finite) : null,
      nan,
      inf,
      zeros,
    },
    histogram: { edges, counts },
    sampled: false,
  };
}

export function heatmap(tensor: Tensor, options: { size: number }): Heatmap | null {
  if (tensor.shape.length !== 2 || !canDecode(tensor.dtype)) return null;
  const [r, c] = tensor.shape as [number, number];
  if (!r || !c) return null;
  const v = tensor.toFloat32();
  const rowStep = Math.ceil(r / options.size);
  const colStep = Math.ceil(c / options.size);
  const rows = Math.ceil(r / rowStep);
  const cols = Math.ceil(c / colStep);
  const out: number[] = [];
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) out.push(v[i * rowStep * c + j * colStep]!);
  return { rows, cols, row_step: rowStep, col_step: colStep, values: out };
}
