/**
 * A private nginx for tests: its own prefix, config and logs in a temporary folder, listening on a free port of
 * 127.0.0.1, serving the given folders and its own `files` folder at /fx/. Every request is logged as request, Range header, status and bytes sent, so
 * tests can count requests and bytes exactly. `startNginx` returns null (with `nginxMissingReason`) when nginx is not
 * installed.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

const CANDIDATES = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"];

export const nginxBinary: string | null =
  process.env.NGINX ??
  CANDIDATES.find((p) => fs.existsSync(p)) ??
  (spawnSync("nginx", ["-v"]).status === 0 ? "nginx" : null);

export const nginxMissingReason =
  "nginx not installed (apt-get install -y nginx, or set NGINX to its binary): HTTP tests against nginx skipped";

export interface LogEntry {
  readonly method: string;
  readonly path: string;
  readonly range: string | null;
  readonly status: number;
  /** Body bytes sent ($body_bytes_sent). */
  readonly bytes: number;
}

export interface Nginx {
  readonly url: string;
  /** A folder served at `${url}/fx/`, removed by `stop()`. */
  readonly files: string;
  /**
   * Requests logged so far. nginx writes a request's line when it frees the request, which can be after the client
   * has read the whole response and gone on (under load a test read the log before the line was there: 0 requests
   * logged for 1 made), so this first waits until nginx has no request in progress.
   */
  log(): Promise<LogEntry[]>;
  /** Forget the requests logged so far (after the ones in progress are logged). */
  clearLog(): Promise<void>;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Serve `locations` (URL prefix such as "/corpus/" → folder) on 127.0.0.1. */
export async function startNginx(locations: Record<string, string>): Promise<Nginx | null> {
  if (nginxBinary === null) return null;
  const prefix = fs.mkdtempSync(path.join(os.tmpdir(), "st-nginx-"));
  const logFile = path.join(prefix, "access.log");
  for (const dir of ["logs", "tmp", "files"]) fs.mkdirSync(path.join(prefix, dir));
  // nginx's workers drop root privileges: what they serve must be reachable by everyone.
  fs.chmodSync(prefix, 0o755);
  const files = path.join(prefix, "files");
  fs.chmodSync(files, 0o755);
  locations = { ...locations, "/fx/": files };
  for (const dir of Object.values(locations)) {
    const mode = fs.statSync(dir).mode;
    if ((mode & 0o005) !== 0o005) fs.chmodSync(dir, mode | 0o555);
  }
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const temp = (name: string) => `${name}_temp_path ${path.join(prefix, "tmp", name)};`;
    const config = `
daemon off;
master_process on;
worker_processes 1;
pid ${path.join(prefix, "nginx.pid")};
error_log ${path.join(prefix, "logs", "error.log")} warn;
events { worker_connections 256; }
http {
  ${["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map(temp).join("\n  ")}
  default_type application/octet-stream;
  types { text/html html; text/javascript js; application/json json; }
  log_format counted '$request\\t$http_range\\t$status\\t$bytes_sent\\t$body_bytes_sent';
  access_log ${logFile} counted;
  sendfile on;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:${port};
    server_name localhost;
    location = ${STATUS} { stub_status; access_log off; }
${Object.entries(locations)
  .map(([location, dir]) => `    location ${location} { alias ${dir.endsWith("/") ? dir : `${dir}/`}; }`)
  .join("\n")}
  }
}
`;
    const configFile = path.join(prefix, "nginx.conf");
    fs.writeFileSync(configFile, config);
    const child: ChildProcess = spawn(
      nginxBinary,
      ["-p", prefix, "-c", configFile, "-e", path.join(prefix, "logs", "error.log")],
      {
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    let stderr = "";
    child.stderr!.on("data", (chunk) => {
      stderr += chunk;
    });
    const up = await waitForPort(port, child);
    if (!up) {
      child.kill("SIGKILL");
      if (attempt < 3) continue;
      throw new Error(`nginx did not start: ${stderr}`);
    }
    const url = `http://127.0.0.1:${port}`;
    return {
      url,
      files,
      log: async () => {
        await settle(port);
        return parseLog(fs.existsSync(logFile) ? fs.readFileSync(logFile, "utf8") : "");
      },
      clearLog: async () => {
        await settle(port);
        fs.writeFileSync(logFile, "");
      },
      stop: async () => {
        if (child.exitCode === null) {
          const exited = new Promise((resolve) => child.once("exit", resolve));
          child.kill("SIGQUIT");
          await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
          if (child.exitCode === null) child.kill("SIGKILL");
        }
        fs.rmSync(prefix, { recursive: true, force: true });
      },
    };
  }
}

/** nginx's stub_status, not logged: how many requests it is reading or writing. */
const STATUS = "/__nginx_status";

/**
 * Wait until the only request nginx is working on is the status request asking (stub_status's "Writing" counts a
 * request until nginx frees it, and nginx logs a request as it frees it, in the same step of its one worker). Gives
 * up after 10 s (the log is then read as it is; the test's own assertion reports what is missing).
 */
async function settle(port: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const text = await new Promise<string>((resolve) => {
      const request = http.get({ host: "127.0.0.1", port, path: STATUS, agent: false }, (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          body += chunk;
        });
        response.on("end", () => resolve(body));
        response.on("error", () => resolve(""));
      });
      request.on("error", () => resolve(""));
    });
    const match = /Reading: (\d+) Writing: (\d+)/.exec(text);
    if (match !== null && Number(match[1]) + Number(match[2]) <= 1) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function waitForPort(port: number, child: ChildProcess): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) return false;
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, "127.0.0.1");
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (ok) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

function parseLog(text: string): LogEntry[] {
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [request, range, status, , body] = line.split("\t");
      const [method, target] = request!.split(" ");
      return {
        method: method!,
        path: decodeURIComponent(target!),
        range: range === "-" ? null : range!,
        status: Number(status),
        bytes: Number(body),
      };
    });
}
