/**
 * Debian's Chromium driven by playwright-core (which never downloads a browser of its own). Tests skip, saying why,
 * when it is absent. The flags keep it off the network: without the background-networking ones it keeps trying
 * hosts this machine cannot reach.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { BrowserContext } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const chromiumMissing: string | false = fs.existsSync(CHROMIUM)
  ? false
  : `Chromium not found at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM): browser test skipped`;

export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** WebGPU on the software adapter (SwiftShader), which headless Chromium has without a GPU. */
export const WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader"];

/** A headless Chromium with a fresh profile; `close()` also removes the profile. */
export async function launchChromium(
  options: { viewport?: { width: number; height: number }; args?: readonly string[] } = {},
): Promise<BrowserContext & { dispose(): Promise<void> }> {
  const { chromium } = await import("playwright-core");
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "st-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_ARGS, ...(options.args ?? [])],
    ...(options.viewport ? { viewport: options.viewport } : {}),
  });
  return Object.assign(context, {
    async dispose() {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  });
}
