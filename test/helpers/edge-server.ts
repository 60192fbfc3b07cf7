/**
 * A small HTTP server for the behaviours nginx does not show: ignoring Range (200 with the whole file), no
 * Content-Length, a file replaced after N requests, transient 5xx, redirects. Bodies are written in 64 KiB chunks
 * with backpressure, so `bytesSent` tells how much a client really pulled before cancelling.
 */
import * as http from "node:http";
import type { AddressInfo } from "node:net";

export interface Served {
  bytes: Uint8Array;
  etag?: string | null;
  lastModified?: string | null;
  /** "range": 206 for Range requests; "ignore-range": always 200 with the whole file; "no-length": 200, chunked. */
  mode?: "range" | "ignore-range" | "no-length";
  /** Answer this many requests with 503 first. */
  failFirst?: number;
  /** Answer with a redirect to this path. */
  redirect?: string;
  /** After this many requests for the path, serve `served` instead (the file changed). */
  next?: { after: number; served: Served };
  /** Require this Authorization header (401 otherwise). */
  authorization?: string;
}

export interface Request {
  readonly path: string;
  readonly range: string | null;
  readonly status: number;
  bytesSent: number;
  readonly headers: http.IncomingHttpHeaders;
}

export interface EdgeServer {
  readonly url: string;
  readonly requests: Request[];
  readonly files: Map<string, Served>;
  close(): Promise<void>;
}

const RANGE = /^bytes=(\d+)-(\d*)$/;

export async function startEdgeServer(files: Map<string, Served> = new Map()): Promise<EdgeServer> {
  const requests: Request[] = [];
  const counts = new Map<string, number>();
  const server = http.createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    const count = (counts.get(path) ?? 0) + 1;
    counts.set(path, count);
    let served = files.get(path);
    while (served?.next && count > served.next.after) served = served.next.served;
    const range = req.headers.range ?? null;
    const record = (status: number): Request => {
      const entry = { path, range, status, bytesSent: 0, headers: req.headers };
      requests.push(entry);
      return entry;
    };
    if (!served) {
      record(404);
      res.writeHead(404).end("not found");
      return;
    }
    if (served.authorization !== undefined && req.headers.authorization !== served.authorization) {
      record(401);
      res.writeHead(401).end("unauthorized");
      return;
    }
    if (served.redirect) {
      record(302);
      res.writeHead(302, { Location: served.redirect }).end();
      return;
    }
    if ((served.failFirst ?? 0) >= count) {
      record(503);
      res.writeHead(503).end("try again");
      return;
    }
    const size = served.bytes.length;
    const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
    if (served.etag !== null) headers.ETag = served.etag ?? `"v-${size}"`;
    if (served.lastModified) headers["Last-Modified"] = served.lastModified;
    const mode = served.mode ?? "range";
    const match = range === null ? null : RANGE.exec(range);
    let body = served.bytes;
    let status = 200;
    if (mode === "range" && match) {
      const first = Number(match[1]);
      const last = Math.min(match[2] === "" ? size - 1 : Number(match[2]), size - 1);
      if (first >= size) {
        record(416);
        res.writeHead(416, { ...headers, "Content-Range": `bytes */${size}` }).end();
        return;
      }
      status = 206;
      body = served.bytes.subarray(first, last + 1);
      headers["Content-Range"] = `bytes ${first}-${last}/${size}`;
    }
    if (mode !== "no-length") headers["Content-Length"] = String(body.length);
    const entry = record(status);
    res.writeHead(status, headers);
    let closed = false;
    res.on("close", () => {
      closed = true;
    });
    for (let at = 0; at < body.length && !closed; at += 65536) {
      const chunk = body.subarray(at, at + 65536);
      entry.bytesSent += chunk.length;
      if (!res.write(chunk)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off("drain", done);
            res.off("close", done);
            resolve();
          };
          res.on("drain", done);
          res.on("close", done);
        });
      }
    }
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    files,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
