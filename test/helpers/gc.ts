/** The garbage collector for tests that check what collection releases. */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** `globalThis.gc`, or one obtained through V8 flags; null if neither works (GC assertions are then skipped). */
export function getGc(): (() => void) | null {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === "function") return g;
  try {
    setFlagsFromString("--expose-gc");
    const fromVm = runInNewContext("gc") as unknown;
    return typeof fromVm === "function" ? (fromVm as () => void) : null;
  } catch {
    return null;
  }
}
