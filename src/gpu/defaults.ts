/**
 * `loadToGPU`'s defaults, alone in a module: the package's Node bundle loads the rest of src/gpu on first use
 * (scripts/esbuild-lazy.mjs), and a public constant must be there from the start. Pure.
 */

/**
 * Largest read, and each worker's staging buffer (default 4 MiB). Headless Chromium, the 2.37 GiB bench checkpoint
 * from nginx, 4 reads in flight (`GPU_BENCH_OPTIONS='{"chunkBytes":N}' npm run bench:gpu -- --rows "ours cold"`,
 * one run each, load 14-16): 16 MiB took 33.8 s with the renderer peaking at 605 MiB, 4 MiB 24.9 s and 416 MiB,
 * 2 MiB 29.7 s and 407 MiB (an idle page: 131 MiB). Below 4 MiB the memory is no longer the chunks'.
 */
export const DEFAULT_GPU_CHUNK_BYTES = 4 << 20;
/** Reads in flight: 4 for URLs, 2 for local sources. Staging memory is concurrency × chunkBytes. */
export const DEFAULT_GPU_REMOTE_CONCURRENCY = 4;
export const DEFAULT_GPU_LOCAL_CONCURRENCY = 2;
/** Tensors closer than this in a file share a read (within chunkBytes). */
export const DEFAULT_GPU_MAX_GAP = 64 << 10;
