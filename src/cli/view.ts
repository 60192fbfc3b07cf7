/** `safetensors view`: the web inspector for a file, a checkpoint or a URL, on 127.0.0.1. */
import { spawn } from "node:child_process";
import { isSafetensorError } from "../format/errors.js";
import { isLoopback, openViewTarget, type ServedTarget, startViewServer } from "../view/node-server.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { ggufViewTarget, isGgufInput } from "./gguf-input.js";

/** The platform's "open this URL" program; failures are reported, never fatal. */
function openBrowser(url: string, warn: (text: string) => void): void {
  const [program, ...args] =
    process.platform === "darwin"
      ? ["open", url]
      : process.platform === "win32"
        ? ["cmd", "/c", "start", "", url]
        : ["xdg-open", url];
  try {
    const child = spawn(program!, args, { stdio: "ignore", detached: true });
    child.on("error", (error) => warn(`cannot open a browser (${program}: ${error.message}); open ${url} yourself\n`));
    child.unref();
  } catch (error) {
    warn(`cannot open a browser: ${String(error)}; open ${url} yourself\n`);
  }
}

export const command = defineCommand({
  usage: "view FILE|DIR|INDEX|URL [--port N] [--host H] [--open] [--json]",
  description: `Serve a web page for a file, a sharded checkpoint (its directory or *.index.json) or a URL
(http(s)://, hf://ORG/REPO[@REV]/PATH, s3://; a URL ending in .json is an index): summary, parameters (counted as
the Hub counts packed quantized layouts), dtypes, metadata with kohya/ModelSpec facts, the tensor tree, and per
tensor statistics, a histogram and a heat map read from that tensor's bytes only. Runs until interrupted.

The server binds 127.0.0.1 (another address only when given with --host), serves only the page and the files it
was started with, and answers GET only. The page is dist/inspector (npm run build); without it the API still works.

API: GET /api/summary (inspect --json of the input plus placement, dtypes, parameters, metadata; or {"error":
{"code","message"}} for an invalid file), GET /api/tensor?name=NAME[&bins=N][&heatmap=N] ({"name","dtype",
"shape","byte_range","sampled","stats","histogram","heatmap"}), GET /api/error.

--json prints {"url","host","port","source"} on one line once listening.`,
  options: {
    port: { type: "string", value: "N", help: "port to listen on (default 0: any free port)" },
    host: { type: "string", value: "H", help: "address to bind (default 127.0.0.1; others only when given)" },
    open: { type: "boolean", help: "open the page in the default browser" },
    json: { type: "boolean", help: "print the server's address as JSON" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("view takes exactly one FILE, DIR, INDEX or URL");
    const input = positionals[0]!;
    if (input === "-") throw new UsageError("view cannot read standard input: give a file, a directory or a URL");
    let port = 0;
    if (values.port !== undefined) {
      if (!/^\d{1,5}$/.test(values.port) || Number(values.port) > 65535) {
        throw new UsageError(`--port must be an integer from 0 to 65535 (got ${JSON.stringify(values.port)})`);
      }
      port = Number(values.port);
    }
    if (values.host !== undefined && values.host.trim() === "") throw new UsageError("--host needs an address");
    let target: ServedTarget | { error: unknown };
    try {
      target = isGgufInput(input) ? await ggufViewTarget(input) : await openViewTarget(input, backend ?? "auto");
    } catch (error) {
      // A missing file is a plain error; a file that is there but invalid gets a page that shows why.
      if (!isSafetensorError(error) || error.code === "IoError" || error.code === "HttpError") throw error;
      io.stderr(`error[${error.code}]: ${error.message}\n`);
      target = { error };
    }
    const server = await startViewServer(target, {
      host: values.host,
      port,
      allowNonLoopback: values.host !== undefined,
    });
    const source = "summary" in target ? target.summary.source : input;
    if (values.json) {
      io.stdout(`${JSON.stringify({ url: server.url, host: server.host, port: server.port, source })}\n`);
    } else {
      io.stdout(`safetensors view: ${source} at ${server.url} (Ctrl-C to stop)\n`);
    }
    if (values.host !== undefined && !isLoopback(values.host)) {
      io.stderr(`warning: listening on ${values.host}: anyone who can reach this address can read these files\n`);
    }
    if (values.open) openBrowser(server.url, io.stderr);
    await new Promise<void>((resolve) => {
      const stop = () => {
        process.off("SIGINT", stop);
        process.off("SIGTERM", stop);
        resolve();
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
    });
    await server.close();
    return 0;
  },
});
