/* Shared between the files of the safetensors_copy addon. */
#ifndef SAFETENSORS_COPY_H
#define SAFETENSORS_COPY_H

#include <node_api.h>

/* Throws a JS Error whose `code` is the errno name; returns NULL. */
napi_value throw_errno(napi_env env, int err, const char *what);
/* A non-negative integer argument that a JS number holds exactly, or -1 (after throwing). */
double integer_arg(napi_env env, napi_value value, const char *name);
/* The arguments (fdIn, positionIn, fdOut, positionOut, length) of a copy into `args`; -1 after throwing. */
int copy_args(napi_env env, napi_callback_info info, const char *usage, double args[5]);
/* writeDirect(fd, buffers, position) (direct_write.c). */
napi_value direct_write(napi_env env, napi_callback_info info);
/* copyDirect(fdIn, positionIn, fdOut, positionOut, length) (direct_write.c). */
napi_value copy_direct(napi_env env, napi_callback_info info);

#endif
