import { PACKAGE_NAME } from "../spec.js";
import { defineFigure } from "./types.js";

/**
 * Import time in a fresh process: everything the library does at import (loading its bundle and the addon) is in
 * this window, never moved out of it. Every user pays it, once per process: it is a goal, not a guard.
 */
export default defineFigure<void>({
  name: "import",
  section: "import",
  method: {
    ours: `\`await import("${PACKAGE_NAME}")\` (the built package's Node entry), first thing in a fresh process`,
    reference:
      "`import torch, safetensors; from safetensors import safe_open; from safetensors.torch import load_file`, first thing in a fresh process (extra line: `import safetensors` alone)",
  },
  backends: ["auto", "pread-no-addon"],
  libraryInWindow: true,
  ours: { kind: "in-process", run: () => import(PACKAGE_NAME) },
  reference: {
    kind: "python",
    label: "import torch, safetensors, safetensors.torch",
    code: `
def run(ctx, state):
    import torch
    import safetensors
    from safetensors import safe_open
    from safetensors.torch import load_file
`,
  },
  referenceExtras: [
    {
      key: "safetensors_only",
      kind: "python",
      label: "import safetensors; from safetensors import safe_open",
      code: `
def run(ctx, state):
    import safetensors
    from safetensors import safe_open
`,
    },
  ],
});
