/**
 * The figure registry: every figure `npm run bench` measures, in report order. To add one, write
 * bench/figures/<name>.ts exporting a `Figure` (see ./types.ts: our side, the reference's side, the goal) and add
 * it to this list; the orchestrator, both workers, the tables, the JSON and the acceptance checks pick it up.
 */
import cliHash from "./cli-hash.js";
import cliInspect from "./cli-inspect.js";
import { cliMerge, cliShard } from "./cli-shard.js";
import convertPickle from "./convert-pickle.js";
import edit128Rows from "./edit-128-rows.js";
import { ggufF16, ggufQ8 } from "./gguf.js";
import importTime from "./import.js";
import importCore from "./import-core.js";
import loadAll from "./load-all.js";
import loadViews from "./load-views.js";
import { loraBake, mergeLinear, mergeTies } from "./merge-models.js";
import open from "./open.js";
import openWarm from "./open-warm.js";
import saveAll from "./save-all.js";
import saveViews from "./save-views.js";
import { slice8Rows, slice8RowsInProcess } from "./slice-8-rows.js";
import tensorOwned32Mib from "./tensor-owned-32mib.js";
import tensorView32Mib from "./tensor-view-32mib.js";
import touchAll from "./touch-all.js";
import type { Figure } from "./types.js";

/**
 * In run order: the figures that read the checkpoint first, those that write gigabytes last. Writing and deleting
 * 2.4 GiB (save_all, save_views, convert_pickle, cli_shard, cli_merge) frees that much page cache, which this VM's
 * balloon hands back to the host; for over a minute afterwards every fresh 2 MiB block is faulted in again by the host
 * (4-6.5 ms of CPU a huge page instead of 0.2 ms), and a figure that takes fresh memory measures that state instead of
 * its own operation: tensor_owned_32mib went from 2.2x to 1.0-1.2x right after such a write (both sides interleaved,
 * figures in bench/figures/tensor-owned-32mib.ts).
 */
export const FIGURES: readonly Figure[] = [
  importTime,
  importCore,
  open,
  openWarm,
  loadViews,
  touchAll,
  loadAll,
  tensorView32Mib,
  tensorOwned32Mib,
  slice8Rows,
  slice8RowsInProcess,
  cliInspect,
  cliHash,
  edit128Rows,
  saveAll,
  saveViews,
  convertPickle,
  cliShard,
  cliMerge,
  // Minutes each: mergekit's TIES takes 445 s and 10.8 GB on this machine (issue 21); run them with --only.
  mergeLinear,
  mergeTies,
  loraBake,
  ggufF16,
  ggufQ8,
];

export function figureNamed(name: string): Figure | undefined {
  return FIGURES.find((f) => f.name === name);
}
