/* The merges file to file of the safetensors_copy addon (merge_file.c), registered by copy.c. */
#ifndef SAFETENSORS_MERGE_FILE_H
#define SAFETENSORS_MERGE_FILE_H

#include <node_api.h>

/* mergeLinear16FileAsync(fds, positions, weights, divisor, bf16, count, outPath, outPosition, threads): a Promise. */
napi_value merge_linear16_file_async(napi_env env, napi_callback_info info);

#endif
