/** `safetensors inspect`: the header as a table with totals, or as stable JSON. */
import type { Header } from "../format/header.js";
import { formatInspect, inspectJson } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { inputHeader } from "./input.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { inspectSharded, isShardedTarget } from "./sharded.js";

export const command = defineCommand({
  usage: "inspect FILE|URL [--json] [--verbose]",
  description: `Print a file's metadata, one line per tensor (name, dtype, shape, bytes) in file order, and totals by
dtype with the parameter count. Only the header is read (for a URL — http(s)://, hf://ORG/REPO[@REV]/PATH,
s3://BUCKET/KEY — usually with one request). "-" reads standard input.

--json prints {"file_bytes","header_bytes","metadata","parameters","tensors":[{"name","dtype","shape",
"data_offsets"}]} with tensors in file order; header_bytes is N, the JSON header's size.`,
  options: {
    json: { type: "boolean", help: "print the stable JSON form" },
    verbose: { type: "boolean", help: "also name the read backend in use" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("inspect takes exactly one FILE");
    const path = positionals[0]!;
    const print = (file: { header: Header; backend: string }) => {
      if (values.json) io.stdout(`${inspectJson(file.header)}\n`);
      else io.stdout(formatInspect(path, file.header, values.verbose ? file.backend : undefined));
      return 0;
    };
    if (isRemoteLocation(path)) return withRemote(path, async (file) => print(file));
    if (isShardedTarget(path)) return inspectSharded(path, values.json === true, values.verbose === true, backend, io);
    return print(inputHeader(path, backend ?? "auto"));
  },
});
