/**
 * The merge methods and their parameters, alone in a module: the package's Node bundle loads the rest of src/merge
 * on first use (scripts/esbuild-lazy.mjs), and a public constant must be there from the start. Pure.
 */

/** The methods we run, with the global and per-model parameters each reads (as mergekit's method classes do). */
export const MERGE_METHODS = {
  linear: { global: ["normalize"], tensor: ["weight"] },
  task_arithmetic: { global: ["int8_mask", "normalize", "rescale", "lambda"], tensor: ["weight", "density"] },
  ties: { global: ["int8_mask", "normalize", "rescale", "lambda"], tensor: ["weight", "density"] },
  dare_linear: { global: ["int8_mask", "normalize", "rescale", "lambda"], tensor: ["weight", "density"] },
  dare_ties: { global: ["int8_mask", "normalize", "rescale", "lambda"], tensor: ["weight", "density"] },
  breadcrumbs: {
    global: ["int8_mask", "normalize", "rescale", "lambda"],
    tensor: ["weight", "density", "gamma"],
  },
  breadcrumbs_ties: {
    global: ["int8_mask", "normalize", "rescale", "lambda"],
    tensor: ["weight", "density", "gamma"],
  },
  della: { global: ["int8_mask", "normalize", "rescale", "lambda"], tensor: ["weight", "density", "epsilon"] },
  della_linear: {
    global: ["int8_mask", "normalize", "rescale", "lambda"],
    tensor: ["weight", "density", "epsilon"],
  },
  slerp: { global: ["t"], tensor: [] },
  nuslerp: { global: ["nuslerp_row_wise", "nuslerp_flatten"], tensor: ["weight"] },
  model_stock: { global: ["filter_wise"], tensor: [] },
  passthrough: { global: [], tensor: ["scale"] },
} as const satisfies Record<string, { global: readonly string[]; tensor: readonly string[] }>;

export type MergeMethod = keyof typeof MERGE_METHODS;
