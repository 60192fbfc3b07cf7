/** True for what `openAsync` reads over the network: http(s)://, hf://, s3:// locations (pure: no IO). */
export function isRemoteLocation(input: string): boolean {
  return /^(https?|hf|s3):\/\//i.test(input);
}
