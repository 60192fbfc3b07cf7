/** The public part of the pickle reader (pure): scanning and planning conversions over any SyncByteSource. */
export type { Container, ContainerFormat, ContainerOptions } from "./container.js";
export { openContainer, openContainerAsync } from "./container.js";
export type { Verdict } from "./globals.js";
export type { GlobalUse, PickleLimits } from "./machine.js";
export { DEFAULT_PICKLE_LIMITS } from "./machine.js";
export type { ConversionPlan, ConvertOptions, PlannedTensor } from "./plan.js";
export { planConversion } from "./plan.js";
export type { GlobalFinding, ScanReport } from "./scan.js";
export { scanSource, scanSourceAsync } from "./scan.js";
