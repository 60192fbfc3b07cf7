/** `safetensors drop`: see extract.ts. */
import { selectionCommand } from "./extract.js";

export const command = selectionCommand("drop");
