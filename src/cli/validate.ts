/** `safetensors validate`: every check the reader makes, on each file given. */
import { isSafetensorError } from "../format/errors.js";
import { openFile } from "../node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { isRemoteLocation, withRemote } from "./location.js";

export const command = defineCommand({
  usage: "validate FILE|URL...",
  description: `Check each file's header and layout as the reader does. Prints "ok" per valid file on standard output
and "error[CODE]: message" per invalid one on standard error (each prefixed with the file name when several are
given). Exit status 1 when any file is invalid.`,
  options: {},
  async run({ positionals }, { io, backend }) {
    if (positionals.length === 0) throw new UsageError("validate takes one or more FILEs");
    const prefix = (path: string) => (positionals.length > 1 ? `${path}: ` : "");
    let status = 0;
    for (const path of positionals) {
      try {
        if (isRemoteLocation(path)) await withRemote(path, async () => {});
        else openFile(path, { backend: backend ?? "auto" }).close();
        io.stdout(`${prefix(path)}ok\n`);
      } catch (error) {
        if (!isSafetensorError(error)) throw error;
        io.stderr(`${prefix(path)}error[${error.code}]: ${error.message}\n`);
        status = 1;
      }
    }
    return status;
  },
});
