/** `safetensors inspect`: the header as a table with totals, or as stable JSON. */
import type { Header } from "../format/header.js";
import { DEFAULT_TENSOR_ROWS, formatInspect, type InspectTextOptions, inspectJson } from "../view/inspect-format.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { inspectGguf, isGgufInput } from "./gguf-input.js";
import { inputHeader } from "./input.js";
import { isRemoteLocation, withRemote } from "./location.js";
import { inspectSharded, isShardedTarget } from "./sharded.js";

/** What `inspect` prints as text: a screen's worth by default, the metadata or the tensors in full when asked. */
export function textOptions(values: { metadata?: boolean; tensors?: boolean }): InspectTextOptions {
  if (!values.metadata && !values.tensors)
    return { metadata: "keys", tensors: "first", command: "safetensors inspect" };
  return { metadata: values.metadata ? "full" : "none", tensors: values.tensors ? "all" : "none" };
}

export const command = defineCommand({
  usage: "inspect FILE|DIR|URL [--metadata] [--tensors] [--json] [--verbose]",
  description: `Print what a file holds, reading only its header (for a URL — http(s)://, hf://ORG/REPO[@REV]/PATH,
s3://BUCKET/KEY — usually with one request). "-" reads standard input.

By default, a screen's worth: a line about the file; the facts found in its metadata (kohya's and ModelSpec's
training details: network, rank and alpha, base model, trigger words, top tags, epochs...); its metadata keys (or
their count, when there are many); the first ${DEFAULT_TENSOR_ROWS} tensors (name, dtype, shape, bytes) in file
order; and totals by dtype with the parameter count. It ends by saying how to see what it left out:
--metadata prints every metadata value whole, JSON inside a string pretty-printed (kohya's ss_tag_frequency...);
--tensors lists every tensor, with the totals. Both together print both.

A sharded checkpoint (its directory or *.index.json) prints a line about it, its shards, the first shard's metadata
and the first tensors across shards; --tensors prints each shard's table.

--json prints {"file_bytes","header_bytes","metadata","parameters","tensors":[{"name","dtype","shape",
"data_offsets"}]} with tensors in file order; header_bytes is N, the JSON header's size.`,
  options: {
    metadata: { type: "boolean", help: "every metadata value in full, JSON pretty-printed (no tensors)" },
    tensors: { type: "boolean", help: "every tensor, and the totals (no metadata)" },
    json: { type: "boolean", help: "print the stable JSON form (everything)" },
    verbose: { type: "boolean", help: "also name the read backend in use" },
  },
  async run({ values, positionals }, { io, backend }) {
    if (positionals.length !== 1) throw new UsageError("inspect takes exactly one FILE");
    if (values.json && (values.metadata || values.tensors)) {
      throw new UsageError("--json prints everything: --metadata and --tensors choose parts of the text form");
    }
    const path = positionals[0]!;
    const options = textOptions(values);
    const print = (file: { header: Header; backend: string }) => {
      if (values.json) io.stdout(`${inspectJson(file.header)}\n`);
      else
        io.stdout(formatInspect(path, file.header, { ...options, backend: values.verbose ? file.backend : undefined }));
      return 0;
    };
    if (isGgufInput(path)) return inspectGguf(path, values.json === true, io);
    if (isRemoteLocation(path)) return withRemote(path, async (file) => print(file));
    if (isShardedTarget(path)) {
      const text = values.json ? undefined : { ...options, verbose: values.verbose === true };
      return inspectSharded(path, text, backend, io);
    }
    return print(inputHeader(path, backend ?? "auto"));
  },
});
