/** Shape checks shared by the readers of patch plans and manifests (JSON that may come from anyone). */
export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);
export const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
/** A SHA-256 as everything here writes it: 64 lowercase hex digits. */
export const HEX64 = /^[0-9a-f]{64}$/;
