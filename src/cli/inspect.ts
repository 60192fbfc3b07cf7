/** `safetensors inspect`: the header as a table with totals, or as stable JSON. */
import { openFile } from "../node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { formatInspect, inspectJson } from "./inspect-format.js";

export const command = defineCommand({
  usage: "inspect FILE [--json] [--verbose]",
  description: `Print a file's metadata, one line per tensor (name, dtype, shape, bytes) in file order, and totals by
dtype with the parameter count. Only the header is read.

--json prints {"file_bytes","header_bytes","metadata","parameters","tensors":[{"name","dtype","shape",
"data_offsets"}]} with tensors in file order; header_bytes is N, the JSON header's size.`,
  options: {
    json: { type: "boolean", help: "print the stable JSON form" },
    verbose: { type: "boolean", help: "also name the read backend in use" },
  },
  run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("inspect takes exactly one FILE");
    const path = positionals[0]!;
    using file = openFile(path, { backend: backend ?? "auto" });
    if (values.json) io.stdout(`${inspectJson(file.header)}\n`);
    else io.stdout(formatInspect(path, file.header, values.verbose ? file.backend : undefined));
    return 0;
  },
});
