import { PACKAGE_NAME } from "../spec.js";
import { defineFigure } from "./types.js";

/**
 * Import time of the core entry (`safetensors-ts/core`: what a browser bundle or a Node program that reads bytes and
 * URLs loads), in a fresh process, like `import`.
 */
export default defineFigure<void>({
  name: "import_core",
  section: "import",
  method: {
    ours: `\`await import("${PACKAGE_NAME}/core")\` (the built package's core entry), first thing in a fresh process`,
    reference: "`import safetensors; from safetensors import safe_open`, first thing in a fresh process",
  },
  backends: ["auto"],
  libraryInWindow: true,
  ours: { kind: "in-process", run: () => import(`${PACKAGE_NAME}/core`) },
  reference: {
    kind: "python",
    label: "import safetensors; from safetensors import safe_open",
    code: `
def run(ctx, state):
    import safetensors
    from safetensors import safe_open
`,
  },
});
