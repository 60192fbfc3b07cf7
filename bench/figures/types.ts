/**
 * What a figure is. A figure is one file in bench/figures/ exporting a `Figure` (made with `defineFigure`) and listed
 * in bench/figures/index.ts; it holds both sides of the comparison and its goal:
 *
 * - `ours`: either an in-process side (`setup` untimed, `run` timed, `finish` untimed checks and extras), run by
 *   bench/worker.ts in a fresh Node process against the BUILT package (imported by its name, so dist/), once per
 *   backend row; or a whole-process side (`argv`), timed by the orchestrator from spawn to exit.
 * - `reference`: the same operation in the reference implementation: Python source run by bench/ref_worker.py in a
 *   fresh process (defines `run(ctx, state)` and optionally `setup(ctx)` / `finish(ctx, state, value)`), or a whole
 *   process (`argv`). `referenceExtras`: more reference lines shown beside it (not used for the ratio).
 * - `goal`: the ratio reference/ours the default backend ("auto") must reach, optionally with an RSS bound; with
 *   `guard: true` a regression guard for a micro-figure (reported apart; see `Goal.guard`).
 *
 * Python helpers available to the code: `torch`, `safe_open`, `load_file`, `save_file` (imported before the timed window unless
 * `libraryInWindow`), `touch_pages(t)`, `first_and_last(t)`, and `ctx` = the JSON `context` below plus `path`, `pt`.
 */
import type * as Library from "../../src/node.js";

/** The library's Node entry point as users import it (types only: the runtime is dist/, loaded by the worker). */
export type Lib = typeof Library;

/** Rows of our side. "auto" is what users get without options (the default backend); goals apply to it. */
export const BACKENDS = ["auto", "mmap", "pread", "pread-no-addon"] as const;
export type BenchBackend = (typeof BACKENDS)[number];

export interface OursContext {
  lib: Lib;
  /** The 2.37 GiB checkpoint. */
  path: string;
  /** Its torch.save twin, or null when it could not be made. */
  pt: string | null;
  /** A scratch directory for figures that write files (under the checkpoint's directory, emptied by the harness). */
  scratch: string;
  backend: BenchBackend;
  /** The options that select this row's backend: `{}` on the "auto" row (what users write), else `{backend}`. */
  open: { backend?: "mmap" | "pread" };
  /** Figure-specific numbers or labels to report (the resolved backend, bytes, ...). */
  extra: Record<string, number | string>;
}

export interface InProcessSide<S> {
  kind: "in-process";
  /** Untimed preparation after the library is imported (open a file, ...). */
  setup?: (ctx: OursContext) => S;
  /** The timed operation. A returned promise is awaited inside the window (only the import figure does this). */
  run: (ctx: OursContext, state: S) => unknown;
  /** Untimed, after the window: checks (throw to fail the run) and `ctx.extra`. */
  finish?: (ctx: OursContext, state: S, value: unknown) => void;
}

/** Everything a whole-process command may need. */
export interface ProcessContext {
  repo: string;
  bench: string;
  node: string;
  python: string;
  path: string;
  pt: string | null;
  /** The figure's scratch directory (emptied before the figure), for commands that write files. */
  scratch: string;
}

export interface ProcessSide {
  kind: "process";
  /** Command and arguments, timed from spawn to exit; exit status 0 required. */
  argv: (ctx: ProcessContext) => string[];
}

export interface PythonSide {
  kind: "python";
  /** Short label of what the reference does, for tables. */
  label: string;
  code: string;
  /** Needs the torch.save twin (skipped without it). */
  needsPt?: boolean;
}

export interface Goal {
  /** Minimum reference median / ours median on the "auto" row. */
  ratio: number;
  /**
   * A regression guard, not a goal: a sub-millisecond micro-figure whose ratio must not fall below `ratio`, set below
   * what the code reaches without anything kept only to move it (no warm-up at import, no objects kept for V8's hidden
   * classes). Code that exists only to move a guard is a defect. Users feel whole jobs: those are the goals.
   */
  guard?: true;
  /** Compare with this `referenceExtras` line instead of the reference (e.g. `cp` of the same bytes). */
  against?: string;
  /** Maximum RSS growth of our side, MiB. */
  rssMaxMib?: number;
}

export interface Figure {
  name: string;
  /** What is timed on each side, for the method table (markdown allowed). */
  method: { ours: string; reference: string };
  /** Our rows; default every backend. */
  backends?: readonly BenchBackend[];
  /** In-process only: median of `calls` timed calls after `warmup` untimed ones, in one process. */
  repeat?: { warmup: number; calls: number };
  /** The library is imported inside the window (import time), not before it. */
  libraryInWindow?: boolean;
  /** Whole-process figures: both sides must print byte-identical stdout (checked once per run). */
  sameStdout?: boolean;
  /**
   * Whole-process figures that write large outputs: before every run of every side (warm-up included) the scratch
   * directory is emptied and `sync` run, untimed (hyperfine's `--prepare`), so that no run pays for deleting an earlier
   * run's output or for writing back another side's. Both cost seconds for gigabytes on the bench VM: its file system
   * discards freed blocks synchronously (`rm` of a 2.37 GiB file 1.4-1.8 s), and another side's dirty pages share the
   * disk with the run that follows.
   */
  freshOutputs?: boolean;
  /**
   * Whole-process figures: files read through, untimed, before every run of every side (warm-up included), so that each
   * side starts with its inputs in the page cache whatever ran before it. The warm-up runs alone do not ensure that on
   * the bench VM: a side that takes 11 GB (mergekit) evicts part of the inputs (DAMON reclaim runs there too), and the
   * side timed after it reads them from the disk again.
   */
  warmFiles?: (ctx: ProcessContext) => string[];
  /** Reported in its own table (import time) rather than in the main one. */
  section?: "main" | "import";
  // biome-ignore lint/suspicious/noExplicitAny: the state type is private to each figure (see defineFigure)
  ours: InProcessSide<any> | ProcessSide;
  reference: PythonSide | ProcessSide;
  referenceExtras?: readonly (PythonSide & { key: string })[];
  /** JSON-serialisable values handed to the Python side as `ctx`. */
  context?: Record<string, string | number>;
  goal?: Goal;
}

/** Type-checks a figure's in-process state once, then erases it for the registry. */
export function defineFigure<S>(figure: Omit<Figure, "ours"> & { ours: InProcessSide<S> | ProcessSide }): Figure {
  return figure as Figure;
}

/** Thrown by a side that cannot run here (missing backend or API): reported as unavailable, not as a failure. */
export class Unavailable extends Error {}
