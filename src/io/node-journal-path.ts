/**
 * Where an in-place edit's undo journal lives (`.NAME-journal` next to the file), and whether one is there. Here, below
 * the readers and the editor both: `openFile` refuses (or rolls back, or ignores) a file with a pending journal, and
 * the editor (src/edit/journal.ts) writes it.
 */
import * as fs from "node:fs";
import * as path from "node:path";

/** Where the undo journal of `file` lives: `.NAME-journal` in the same directory. */
export function journalPathFor(file: string): string {
  // A POSIX path with nothing for path.join to normalize (no empty, "." or ".." segment, no trailing slash) is split
  // at its last slash: the same string, without running node:path's functions for the first time in a process's
  // first edit (~0.1 ms).
  if (
    SIMPLE_PATH &&
    file !== "" &&
    !file.startsWith(".") &&
    !file.endsWith("/") &&
    !file.includes("//") &&
    !file.includes("/.")
  ) {
    const slash = file.lastIndexOf("/");
    return `${file.slice(0, slash + 1)}.${file.slice(slash + 1)}-journal`;
  }
  return path.join(path.dirname(file), `.${path.basename(file)}-journal`);
}

const SIMPLE_PATH = path.sep === "/";

/**
 * Whether `file` has an undo journal next to it (an edit in progress, or one interrupted by a crash). A file whose
 * name is too long to take the journal's prefix and suffix (a name of 247+ bytes) can have none.
 */
export function hasJournal(file: string): boolean {
  try {
    return fs.statSync(journalPathFor(file), { throwIfNoEntry: false }) !== undefined;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENAMETOOLONG") return false;
    throw error;
  }
}
