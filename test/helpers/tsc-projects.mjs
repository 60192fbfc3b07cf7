/**
 * `tsc -p` for several projects in one process: `node test/helpers/tsc-projects.mjs CONFIG...` type-checks each
 * project and emits what its options say, printing its diagnostics as tsc does, and exits 2 when any project has an
 * error (tsc's status). The projects share the parsed TypeScript lib files (lib.es2022*.d.ts, lib.dom.d.ts: the same
 * files, read the same way), as tsc's language service shares them between programs; each project gets its own
 * program and checker.
 *
 * Why: test/package.test.ts ran tsc five times over the installed package, 31 s of CPU of the file's 96, each start
 * loading the compiler and parsing lib.dom.d.ts again (2026-12-03, load 2-3 on 2 cores). Its three type checks of the
 * published types: 21.9 s of CPU as three tsc runs, 16.6 s in one process (the same diagnostics and status; load 5).
 * Most of what is left is checking lib.dom.d.ts, which skipLibCheck: false asks of each project.
 *
 * Plain JavaScript, run by the Node that runs tsc (SAFETENSORS_TSC_NODE in that test).
 */
import { createRequire } from "node:module";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const ts = createRequire(path.join(repoRoot, "package.json"))("typescript");

const libDir = path.dirname(ts.getDefaultLibFilePath({}));
/** Lib files parsed by an earlier project, by name and parse options. */
const libs = new Map();

const formatHost = {
  getCanonicalFileName: (name) => name,
  getCurrentDirectory: () => process.cwd(),
  getNewLine: () => "\n",
};

let failed = false;
for (const config of process.argv.slice(2)) {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    path.resolve(config),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.formatDiagnostics([diagnostic], formatHost));
      },
    },
  );
  const host = ts.createCompilerHost(parsed.options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, options, onError, shouldCreate) => {
    if (path.dirname(fileName) !== libDir) return getSourceFile(fileName, options, onError, shouldCreate);
    const key = `${fileName}\0${JSON.stringify(options)}`;
    let file = libs.get(key);
    if (file === undefined) {
      file = getSourceFile(fileName, options, onError, shouldCreate);
      if (file !== undefined) libs.set(key, file);
    }
    return file;
  };
  const program = ts.createProgram({
    rootNames: parsed.fileNames,
    options: parsed.options,
    projectReferences: parsed.projectReferences,
    host,
    configFileParsingDiagnostics: ts.getConfigFileParsingDiagnostics(parsed),
  });
  const emitted = program.emit();
  const diagnostics = ts.sortAndDeduplicateDiagnostics([...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics]);
  if (diagnostics.length > 0) process.stdout.write(`${config}:\n${ts.formatDiagnostics(diagnostics, formatHost)}`);
  if (diagnostics.some((d) => d.category === ts.DiagnosticCategory.Error)) failed = true;
}
process.exitCode = failed ? 2 : 0;
