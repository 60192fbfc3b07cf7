/** What "touching" means on our side; bench/ref_worker.py has the Python twins (`touch_pages`, `first_and_last`). */
import { TOUCH_STRIDE } from "../spec.js";
import { type OursContext, Unavailable } from "./types.js";

/** Read one byte per 4 KiB page: bytes 0, 4096, 8192, ... of `data`. */
export function touchPages(data: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < data.length; i += TOUCH_STRIDE) sum += data[i]!;
  return sum;
}

/**
 * The raw bits of the first and last element (every tensor of the checkpoint is F16), read as little-endian bytes.
 * Not through a DataView: in touch_all's phase probe (fresh processes) the DataView code, run for the first time,
 * took ~0.14 ms of the figure's ~0.7 ms, and reading the bytes ~0.055 ms less; either is the figure's own code, no
 * part of the library (the reference's side reads its elements with `.item()`, bench/ref_worker.py).
 */
export function firstAndLast(data: Uint8Array): number {
  const n = data.length;
  return (data[0]! | (data[1]! << 8)) + (data[n - 2]! | (data[n - 1]! << 8));
}

type OurFile = ReturnType<OursContext["lib"]["openFile"]>;

/** Record which backend served the file; on an explicit row it must be the one asked for. */
export function checkBackend(ctx: OursContext, file: OurFile): void {
  ctx.extra.backend = file.backend;
  if (ctx.open.backend !== undefined && file.backend !== ctx.open.backend) {
    throw new Unavailable(`openFile(path, {backend: "${ctx.open.backend}"}) gave backend "${file.backend}"`);
  }
}

/** Open the checkpoint outside the window with the row's options (a missing backend is "unavailable"). */
export function openChecked(ctx: OursContext): OurFile {
  let file: OurFile;
  try {
    file = ctx.lib.openFile(ctx.path, ctx.open);
  } catch (error) {
    if ((error as { code?: string }).code === "BackendUnavailable") throw new Unavailable((error as Error).message);
    throw error;
  }
  try {
    checkBackend(ctx, file);
  } catch (error) {
    file.close();
    throw error;
  }
  return file;
}
