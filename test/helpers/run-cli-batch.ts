/**
 * Runs several `safetensors` invocations from the sources in one process (one tsx start instead of one per run):
 * argv[2] is a JSON list of argument lists. Prints one `EXIT <code>` line after each run's own output.
 */
import { main } from "../../src/cli/main.js";

const runs = JSON.parse(process.argv[2] ?? "[]") as string[][];
for (const args of runs) {
  let code: number;
  try {
    code = await main(args);
  } catch (error) {
    process.stdout.write(`CRASH ${(error as Error).stack}\n`);
    code = 99;
  }
  process.stdout.write(`EXIT ${code}\n`);
}
