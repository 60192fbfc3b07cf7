/* Arguments and errors shared by the safetensors_copy addon's files (copy_args.c says why they are a module). */
#ifndef SAFETENSORS_COPY_ARGS_H
#define SAFETENSORS_COPY_ARGS_H

#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

/* Throws a JS Error whose `code` is the errno name; returns NULL. */
napi_value throw_errno(napi_env env, int err, const char *what);
/* A non-negative integer argument that a JS number holds exactly, or -1 (after throwing). */
double integer_arg(napi_env env, napi_value value, const char *name);
/* The arguments (fdIn, positionIn, fdOut, positionOut, length) of a copy into `args`; -1 after throwing. */
int copy_args(napi_env env, napi_callback_info info, const char *usage, double args[5]);

/* The data of a typed array of type `want` (and its element count in `length`), or NULL with a TypeError thrown. */
void *typed_array_arg(napi_env env, napi_value value, napi_typedarray_type want, size_t *length, const char *usage);
/* `n` float32 weights (1 to `max`) from a Float32Array of exactly n values into `weights`; -1 after throwing `message`. */
int weights_arg(napi_env env, napi_value value, uint32_t n, uint32_t max, float *weights, const char *message);

#endif
