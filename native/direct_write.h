/* The direct writes of the safetensors_copy addon (direct_write.c), registered by copy.c. */
#ifndef SAFETENSORS_DIRECT_WRITE_H
#define SAFETENSORS_DIRECT_WRITE_H

#include <node_api.h>

/* writeDirect(fd, buffers, position). */
napi_value direct_write(napi_env env, napi_callback_info info);
/* copyDirect(fdIn, positionIn, fdOut, positionOut, length). */
napi_value copy_direct(napi_env env, napi_callback_info info);

#endif
