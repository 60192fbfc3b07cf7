/**
 * The inspector's HTTP server (Node): the static page from `dist/inspector/` and a JSON API over exactly the files
 * it was started with (one file, a checkpoint, or a URL of either).
 *
 * - Binds 127.0.0.1 unless told otherwise; another address needs `allowNonLoopback` (the CLI's explicit `--host`).
 * - Only GET (and HEAD for the page); the API names tensors, never paths. Static paths are decoded once and must
 *   stay inside the page's folder after resolving symlinks; `..`, encoded separators, NUL and backslashes are
 *   refused. Unknown paths are 404.
 * - DNS rebinding: a `Host` header naming anything but an IP literal or `localhost` is refused (421), so a page on
 *   another site cannot reach the API through a name that resolves to 127.0.0.1.
 * - `/api/tensor` reads that tensor's bytes only: all of them up to `maxSamples` elements, else evenly spaced
 *   blocks (`stats.ts`); local files through mmap/pread, URLs with ranged requests (`src/remote`).
 */
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { isSafetensorError, SafetensorError } from "../format/errors.js";
import type { Header } from "../format/header.js";
import type { AsyncSafetensorsFile } from "../read/async-file.js";
import { openAsync, withEnvironment } from "../read/node-async.js";
import type { Backend } from "../read/node-files.js";
import { openLocal } from "../read/node-input.js";
import { isRemoteLocation } from "../remote/location.js";
import { openShardedAsync } from "../shards/async.js";
import { isShardedTarget, openSharded } from "../shards/node.js";
import { type QuantizationConfig, quantizationFromConfig } from "./params.js";
import { tensorReport, type ViewTarget } from "./report.js";
import { summarizeFile, summarizeSharded } from "./summary.js";

/** A target the server owns: closed with the server. */
export interface ServedTarget extends ViewTarget {
  close(): Promise<void>;
}

/** config.json beside the weights, when there is a small readable one: its quantization_config (else inferred). */
function localQuantization(dir: string): QuantizationConfig | undefined {
  const file = path.join(dir, "config.json");
  try {
    if (fs.statSync(file).size > 10_000_000) return undefined;
    return quantizationFromConfig(JSON.parse(fs.readFileSync(file, "utf8"))) ?? undefined;
  } catch {
    return undefined;
  }
}

/** A URL without its query (signed URLs keep secrets there). */
function shownLocation(location: string): string {
  return location.replace(/[?#].*$/, "");
}

/**
 * Open what `safetensors view` was given: a file, a checkpoint directory or index, or an http(s)://, hf://, s3://
 * location of a file or (ending in `.json`) an index.
 */
export async function openViewTarget(input: string, backend: Backend = "auto"): Promise<ServedTarget> {
  if (isRemoteLocation(input)) {
    const source = shownLocation(input);
    if (/\.json$/i.test(source)) {
      const sharded = await openShardedAsync(input, withEnvironment({}));
      try {
        const headers = new Map<string, Header>(sharded.shards.map((f) => [f, sharded.shard(f).header]));
        const summary = summarizeSharded({ indexPath: source, index: sharded.index, headers }, { source });
        const files = sharded.shards.map((f) => sharded.shard(f));
        return {
          summary,
          readRanges: (file, ranges) => files[file]!.readRanges(ranges),
          close: () => sharded.close(),
        };
      } catch (error) {
        await sharded.close();
        throw error;
      }
    }
    const file: AsyncSafetensorsFile = await openAsync(input);
    return {
      summary: summarizeFile(file.header, { source }),
      readRanges: (_, ranges) => file.readRanges(ranges),
      close: () => file.close(),
    };
  }
  if (isShardedTarget(input)) {
    const sharded = openSharded(input, { backend });
    try {
      const headers = new Map<string, Header>(sharded.shards.map((f) => [f, sharded.shard(f).header]));
      const summary = summarizeSharded(
        { indexPath: sharded.indexPath, index: sharded.index, headers },
        { source: path.basename(path.resolve(input)), quantization: localQuantization(sharded.directory) },
      );
      const files = sharded.shards.map((f) => sharded.shard(f));
      return {
        summary,
        readRanges: async (file, ranges) => ranges.map((r) => files[file]!.readRange(r.start, r.end - r.start)),
        close: async () => sharded.close(),
      };
    } catch (error) {
      sharded.close();
      throw error;
    }
  }
  const file = openLocal(input, backend);
  try {
    const summary = summarizeFile(file.header, {
      source: path.basename(input),
      quantization: localQuantization(path.dirname(path.resolve(input))),
    });
    return {
      summary,
      readRanges: async (_, ranges) => ranges.map((r) => file.readRange(r.start, r.end - r.start)),
      close: async () => file.close(),
    };
  } catch (error) {
    file.close();
    throw error;
  }
}

export interface ViewServerOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: a free port chosen by the system. */
  readonly port?: number;
  /** Required to bind anything but a loopback address (127.0.0.0/8, ::1, localhost). */
  readonly allowNonLoopback?: boolean;
  /** The built page (default: dist/inspector of this package). */
  readonly staticDir?: string;
  /** Tensors above this many elements are sampled (default 4 Mi). */
  readonly maxSamples?: number;
}

export interface ViewServer {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  return bare === "localhost" || bare === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}

/**
 * The built page of this installation: `dist/inspector` under the package root, the first folder above this module
 * with a package.json (this module may run from src/view, dist/view or a bundled CLI file).
 */
export function defaultStaticDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, "package.json")) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return path.join(dir, "dist", "inspector");
}

const IP_LITERAL = /^(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-f:.]+\])$/i;

/** Host header check against DNS rebinding: IP literals and localhost only. */
function hostAllowed(header: string | undefined): boolean {
  if (!header) return false;
  const name = header.replace(/:\d+$/, "");
  return IP_LITERAL.test(name) || name.toLowerCase() === "localhost";
}

const TYPES: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".map": "application/json; charset=utf-8",
  ".wasm": "application/wasm",
};

const SECURITY_HEADERS = {
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "Cross-Origin-Resource-Policy": "same-origin",
  "X-Frame-Options": "DENY",
};

const NOT_BUILT = `<!doctype html><html lang="en"><meta charset="utf-8"><title>safetensors view</title>
<body><h1>The inspector page is not built</h1><p>Run <code>npm run build</code> in the safetensors-ts folder, then
reload. The API works meanwhile: <a href="/api/summary">/api/summary</a>,
<code>/api/tensor?name=NAME&amp;bins=64</code>.</p></body></html>
`;

/**
 * The file under `root` that a request path names, or null (404). Decoded once; any `..` segment, backslash, NUL
 * or encoded slash is refused before resolving, and the resolved real path must stay inside root's real path.
 */
export function staticFile(root: string, pathname: string): string | null {
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathname);
  } catch {
    return null;
  }
  if (/%2f|%5c/i.test(pathname) || decoded.includes("\0") || decoded.includes("\\")) return null;
  const segments = decoded.split("/").filter((s) => s !== "");
  if (segments.some((s) => s === ".." || s === "." || s.startsWith("%"))) return null;
  const relative = segments.length === 0 ? "index.html" : segments.join("/");
  let realRoot: string;
  let real: string;
  try {
    realRoot = fs.realpathSync(root);
    real = fs.realpathSync(path.join(realRoot, relative));
  } catch {
    return null;
  }
  const inside = path.relative(realRoot, real);
  if (inside === "" || inside.startsWith("..") || path.isAbsolute(inside)) return null;
  return fs.statSync(real).isFile() ? real : null;
}

function errorBody(error: unknown): { code: string; message: string; tensor?: string; suggestions?: string[] } {
  if (isSafetensorError(error)) {
    return {
      code: error.code,
      message: error.message,
      ...(error.tensor ? { tensor: error.tensor } : {}),
      ...(error.suggestions ? { suggestions: [...error.suggestions] } : {}),
    };
  }
  return { code: "InternalError", message: error instanceof Error ? error.message : String(error) };
}

function intParam(value: string | null, name: string): number | undefined {
  if (value === null) return undefined;
  if (!/^\d{1,7}$/.test(value)) throw new SafetensorError("InvalidOption", `${name} must be a positive integer`);
  return Number(value);
}

/**
 * Serve `target` (or, when it could not be opened, its error: `/api/summary` then answers `{error}`) on
 * `host:port`. Resolves once listening.
 */
export async function startViewServer(
  target: ServedTarget | { readonly error: unknown },
  options: ViewServerOptions = {},
): Promise<ViewServer> {
  const host = options.host ?? "127.0.0.1";
  if (!isLoopback(host) && !options.allowNonLoopback) {
    throw new SafetensorError(
      "InvalidOption",
      `refusing to serve on ${host}, which is not a loopback address: pass it explicitly (--host ${host}) to allow it`,
    );
  }
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new SafetensorError("InvalidOption", `port must be an integer from 0 to 65535, got ${port}`);
  }
  const staticDir = options.staticDir ?? defaultStaticDir();
  const loadError = "error" in target ? errorBody(target.error) : null;
  const viewTarget = "error" in target ? null : target;
  const summaryJson = viewTarget ? JSON.stringify(viewTarget.summary) : JSON.stringify({ error: loadError });

  const send = (
    res: http.ServerResponse,
    status: number,
    type: string,
    body: string | Uint8Array,
    head: boolean,
    extra: Record<string, string> = {},
  ) => {
    res.writeHead(status, {
      ...SECURITY_HEADERS,
      "Content-Type": type,
      "Content-Length": String(typeof body === "string" ? Buffer.byteLength(body) : body.byteLength),
      ...extra,
    });
    res.end(head ? undefined : body);
  };
  const json = (res: http.ServerResponse, status: number, body: string, head: boolean) =>
    send(res, status, "application/json; charset=utf-8", body, head, { "Cache-Control": "no-store" });
  const fail = (res: http.ServerResponse, status: number, code: string, message: string, head: boolean) =>
    json(res, status, JSON.stringify({ error: { code, message } }), head);

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const head = req.method === "HEAD";
    if (req.method !== "GET" && !head) {
      res.setHeader("Allow", "GET, HEAD");
      return fail(res, 405, "MethodNotAllowed", `${req.method} is not allowed; the inspector only reads`, false);
    }
    if (!hostAllowed(req.headers.host)) {
      return fail(res, 421, "HostNotAllowed", "requests must name the server by IP address or localhost", head);
    }
    const raw = req.url ?? "/";
    if (!raw.startsWith("/")) return fail(res, 400, "BadRequest", "request target must be a path", head);
    const url = new URL(raw, "http://localhost");
    // `new URL` normalizes `..` away: judge the path as sent.
    const sentPath = raw.split(/[?#]/, 1)[0]!;
    if (sentPath === "/api/summary") return json(res, 200, summaryJson, head);
    if (sentPath === "/api/error") return json(res, 200, JSON.stringify(loadError), head);
    if (sentPath === "/api/tensor") {
      if (!viewTarget) return json(res, 422, JSON.stringify({ error: loadError }), head);
      const name = url.searchParams.get("name");
      if (name === null) return fail(res, 400, "InvalidOption", "name is required: /api/tensor?name=NAME", head);
      try {
        const report = await tensorReport(viewTarget, name, {
          bins: intParam(url.searchParams.get("bins"), "bins"),
          heatmap: intParam(url.searchParams.get("heatmap"), "heatmap"),
          maxSamples: options.maxSamples,
        });
        return json(res, 200, JSON.stringify(report), head);
      } catch (error) {
        const body = errorBody(error);
        const status = body.code === "TensorNotFound" ? 404 : body.code === "InvalidOption" ? 400 : 500;
        return json(res, status, JSON.stringify({ error: body }), head);
      }
    }
    if (sentPath.startsWith("/api/"))
      return fail(res, 404, "NotFound", "no such API (there are /api/summary, /api/tensor, /api/error)", head);
    const file = staticFile(staticDir, sentPath);
    if (file) {
      const type = TYPES[path.extname(file).toLowerCase()] ?? "application/octet-stream";
      return send(res, 200, type, fs.readFileSync(file), head, {
        "Cache-Control": "no-cache",
        "Content-Security-Policy":
          "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
      });
    }
    if (sentPath === "/" || sentPath === "/index.html") {
      return send(res, 200, "text/html; charset=utf-8", NOT_BUILT, head, { "Cache-Control": "no-store" });
    }
    return fail(res, 404, "NotFound", "not found", head);
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error) => {
      if (!res.headersSent) fail(res, 500, "InternalError", String(error), false);
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        new SafetensorError("IoError", `cannot listen on ${host}:${port}: ${error.code ?? error.message}`, {
          cause: error,
        }),
      ),
    );
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}/`,
    host: address.address,
    port: address.port,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await viewTarget?.close();
    },
  };
}
