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
/**
 * WebGPU on SwiftShader. No GPU watchdog: it ends a GPU process whose main thread seems hung, and on a loaded 2-core
 * machine (three suites at once, load 9-11) SwiftShader's work is starved long enough to look hung; a lost GPU
 * process leaves the page's pending GPU calls unanswered.
 */
export const WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader", "--disable-gpu-watchdog"];

/**
 * The browser process (a process group leader: playwright starts it detached) whose profile is `profile`, or null.
 */
export function browserPid(profile: string): number | null {
  let pids: string[];
  try {
    pids = fs.readdirSync("/proc");
  } catch {
    return null; // no /proc (macOS): playwright's own exit handler is what remains
  }
  for (const entry of pids) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (cmd.includes(`--user-data-dir=${profile}`) && !cmd.some((a) => a.startsWith("--type="))) return Number(entry);
    } catch {}
  }
  return null;
}

/** SIGKILL the browser of `profile` and every process of its group (renderers, GPU process, utilities). */
export function killBrowser(profile: string): void {
  const pid = browserPid(profile);
  if (pid === null) return;
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    try {
      process.kill(pid, "SIGKILL");
    } catch {}
  }
}

/** How long a test's browser may live (default 10 min): a hung page must not keep a browser running for an hour. */
export const CHROMIUM_MAX_LIFETIME_MS = Number(process.env.SAFETENSORS_CHROMIUM_MAX_MS ?? 600_000);

/**
 * A headless Chromium with a fresh profile (or `profile`, kept afterwards). `dispose()` closes it, killing its whole
 * process group when it does not close within 10 s, and removes a fresh profile. Whatever happens, the browser is
 * killed after `maxLifetimeMs` (default CHROMIUM_MAX_LIFETIME_MS) and when this process exits.
 */
export async function launchChromium(
  options: {
    viewport?: { width: number; height: number };
    args?: readonly string[];
    profile?: string;
    maxLifetimeMs?: number;
  } = {},
): Promise<BrowserContext & { dispose(): Promise<void>; readonly profile: string }> {
  const { chromium } = await import("playwright-core");
  const profile = options.profile ?? fs.mkdtempSync(path.join(os.tmpdir(), "st-chromium-"));
  const kill = () => killBrowser(profile);
  process.once("exit", kill);
  const watchdog = setTimeout(() => {
    console.error(
      `# Chromium (${profile}) still running after ${options.maxLifetimeMs ?? CHROMIUM_MAX_LIFETIME_MS} ms: killed`,
    );
    kill();
  }, options.maxLifetimeMs ?? CHROMIUM_MAX_LIFETIME_MS);
  watchdog.unref();
  const cleanup = () => {
    clearTimeout(watchdog);
    process.removeListener("exit", kill);
    if (options.profile === undefined) fs.rmSync(profile, { recursive: true, force: true });
  };
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [...CHROMIUM_ARGS, ...(options.args ?? [])],
      timeout: 60_000,
      ...(options.viewport ? { viewport: options.viewport } : {}),
    });
  } catch (error) {
    kill();
    cleanup();
    throw error;
  }
  return Object.assign(context, {
    profile,
    async dispose() {
      const closed = context.close().then(
        () => true,
        () => false,
      );
      const inTime = await Promise.race([closed, new Promise<false>((r) => setTimeout(() => r(false), 10_000))]);
      if (!inTime) kill();
      cleanup();
    },
  });
}
