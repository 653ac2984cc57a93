/* The shim's life in the process, above the runtime and everything that runs beside it: the
 * hooks' way to the runtime. A side's first use creates it (runtime.h) and starts, once per
 * process, the exit and fork handlers, the control server and GPU sharing; at exit they stop
 * before the heaps are destroyed; a forked child drops the parent's state. */
#ifndef VMMSHIM_LIFECYCLE_H
#define VMMSHIM_LIFECYCLE_H

#include "runtime.h"

/* Create the CUDA side on first use and return the runtime; NULL when the shim is disabled or no
 * driver is there (the hooks then pass everything through). */
shim_runtime *shim_runtime_cuda(void);
/* The same for Ascend. */
shim_runtime *shim_runtime_acl(void);

#endif
