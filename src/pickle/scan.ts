/**
 * The scanner: every global a checkpoint's pickles name, where, and a verdict. `safe` means every global is on the
 * allowlist and every pickle parsed; a pickle that does not parse is never safe (its unread part could hold
 * anything), and a dangerous global anywhere makes the whole file dangerous.
 */
import { SafetensorError } from "../format/errors.js";
import type { SyncByteSource } from "../io/source.js";
import {
  type Container,
  ContainerFailure,
  type ContainerFormat,
  type ContainerOptions,
  openContainer,
  openContainerAsync,
} from "./container.js";
import { type Verdict, worse } from "./globals.js";
import type { GlobalUse } from "./machine.js";

/** One global a checkpoint's pickles name, with its verdict and where it is used. */
export interface GlobalFinding {
  /** `module.name` as written in the pickle. */
  readonly global: string;
  /** What Python 3 would import, when it differs (Python 2 names). */
  readonly resolved: string;
  readonly verdict: Verdict;
  /** The pickle that names it ("data.pkl", "archive/extra.pkl", "legacy pickle 4", …). */
  readonly pickle: string;
  /** How the pickle uses it: "call" (REDUCE), "instantiate" (NEWOBJ/OBJ/INST), "build" (BUILD on its result), … */
  readonly uses: readonly GlobalUse[];
  /** Byte offsets in that pickle of the opcodes naming it (at most 16). */
  readonly offsets: readonly number[];
}

/**
 * What a scan found: the verdict (`safe` only when every global is allowlisted and everything could be read) and
 * every global.
 */
export interface ScanReport {
  readonly verdict: Verdict;
  readonly format: ContainerFormat | null;
  readonly globals: readonly GlobalFinding[];
  /** Pickles or containers that could not be read: `{where, code, message}`. Any error makes the file not safe. */
  readonly errors: readonly { where: string; code: string; message: string }[];
}

/** Scan an opened container (or the error its opening raised). */
export function scanContainer(container: {
  readonly format: ContainerFormat | null;
  readonly pickles: readonly Container["pickles"][number][];
}): ScanReport {
  const globals: GlobalFinding[] = [];
  const errors: { where: string; code: string; message: string }[] = [];
  let verdict: Verdict = "safe";
  for (const pickle of container.pickles) {
    if (pickle.error) {
      errors.push({ where: pickle.name, code: pickle.error.code, message: pickle.error.message });
      verdict = worse(verdict, "unknown");
    }
    for (const record of pickle.globals.values()) {
      const global = `${record.module}.${record.name}`;
      globals.push({
        global,
        resolved: record.resolved,
        verdict: record.verdict,
        pickle: pickle.name,
        uses: [...record.uses].filter((u) => u !== "reference" || record.uses.size === 1),
        offsets: record.offsets,
      });
      verdict = worse(verdict, record.verdict);
    }
  }
  return { verdict, format: container.format, globals, errors };
}

/** Open and scan a checkpoint. Never throws for a bad file: the error is in the report and the verdict is not safe. */
export function scanSource(source: SyncByteSource, options: ContainerOptions = {}): ScanReport {
  try {
    return scanContainer(openContainer(source, options));
  } catch (error) {
    return scanFailure(error);
  }
}

/** `scanSource` where deflated zip records must be inflated with DecompressionStream (browsers). */
export async function scanSourceAsync(source: SyncByteSource, options: ContainerOptions = {}): Promise<ScanReport> {
  try {
    return scanContainer(await openContainerAsync(source, options));
  } catch (error) {
    return scanFailure(error);
  }
}

function scanFailure(error: unknown): ScanReport {
  if (!(error instanceof SafetensorError)) throw error;
  // Report what the pickles read before the failure named; the failure itself makes the file not safe.
  const pickles = error instanceof ContainerFailure ? error.pickles : [];
  const partial = scanContainer({ format: null, pickles });
  const errors = partial.errors.some((e) => e.message === error.message)
    ? partial.errors
    : [...partial.errors, { where: "file", code: error.code, message: error.message }];
  return { verdict: worse(partial.verdict, "unknown"), format: null, globals: partial.globals, errors };
}
