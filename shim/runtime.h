/* The shim's process-wide state, created on the first intercepted device allocation and never
 * before (the shim is inert until then): the configuration, the backends, the core heaps and the
 * registry of the program's own VMM mappings. The hooks reach it through lifecycle.h, which also
 * starts what runs beside it (the control server, GPU sharing) and ends it all at exit. */
#ifndef VMMSHIM_RUNTIME_H
#define VMMSHIM_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/offload/app_vmm.h"
#include "../core/backend/backend.h"
#include "../core/heap.h"
#include "config.h"

/* The sides, one per kind of driver. Code that handles every side loops over rt->side; what
 * differs between them is data (the fields below, the backend's abilities), never a name test. */
enum shim_side_id { SHIM_CUDA, SHIM_ACL, SHIM_NSIDES };

typedef struct shim_side {
	const char *name;           /* "cuda", "acl": in the status reply and the log */
	const char *device_prefix;  /* before a device number in the status reply ("", "acl:") */
	vmm_backend *be;            /* NULL until the program uses the side, or when its driver
				     * could not be loaded */
	vmm_core *core;             /* the heap; NULL exactly when be is */
	vmm_app_registry *app;      /* the program's own VMM mappings; NULL where not tracked */
	bool legacy_ipc;            /* its driver's IPC handles (cuIpc*, hooks_ipc.c) go through
				     * the shim: the status reply carries their figures */
} shim_side;

typedef struct shim_runtime {
	shim_config cfg;
	shim_side side[SHIM_NSIDES];
} shim_runtime;

/* Does any side serve memory? */
static inline bool shim_runtime_serves(const shim_runtime *rt)
{
	for (int i = 0; i < SHIM_NSIDES; i++)
		if (rt->side[i].core)
			return true;
	return false;
}

/* Run once a side is created, under the creation lock and before any other thread sees the
 * side: what starts with it (lifecycle.c). It must not allocate device memory. */
typedef void (*shim_side_ready_fn)(shim_runtime *rt, enum shim_side_id id);

/* Create side id on first use (then on_ready) and return the runtime; NULL when the shim is
 * disabled, in a forked child, or no driver is there (the hooks then pass everything through).
 * The hooks call lifecycle.h's shim_runtime_cuda()/shim_runtime_acl(), not this. */
shim_runtime *shim_runtime_side(enum shim_side_id id, shim_side_ready_fn on_ready);
/* The runtime if it exists, without creating anything. */
shim_runtime *shim_runtime_peek(void);

/* At exit, after what runs beside the runtime has stopped: every side is marked unavailable
 * (later hooks pass through), its figures logged and, when quiet (nothing may still use them),
 * its heap and backend destroyed. */
void shim_runtime_teardown(bool quiet);
/* In a forked child, first: the runtime is the parent's from now on (shim_runtime_peek and the
 * hooks see none). Returns it, for the fork handler's resets. */
shim_runtime *shim_runtime_mark_forked(void);
/* In a forked child, last: each side's heap and mapping registry drop the parent's state. */
void shim_runtime_sides_after_fork(void);

/* Allocations the shim saw but left to the driver (not managed): device memory it passed through
 * (disabled, no context, stream capture, a failure of the core), managed and host memory, arrays.
 * Cumulative since the start, for `vmmctl status`. A counter is one line of this list:
 * X(field, status) where status says which figure of the status reply's info record it adds to
 * (ALLOCS: passthrough_allocs, BYTES: passthrough_bytes, NONE). */
#define SHIM_PASSTHROUGH_STATS(X)                                                              \
	X(device_allocs, ALLOCS)                                                               \
	X(device_bytes, BYTES)                                                                 \
	X(device_frees, NONE)                                                                  \
	X(managed_allocs, NONE)                                                                \
	X(managed_bytes, NONE)                                                                 \
	X(host_allocs, NONE)                                                                   \
	X(host_bytes, NONE)                                                                    \
	X(array_allocs, NONE)                                                                  \
	X(acl_allocs, ALLOCS)                                                                  \
	X(acl_bytes, BYTES)                                                                    \
	X(acl_frees, NONE)

typedef struct shim_passthrough_stats {
	SHIM_PASSTHROUGH_STATS(VMM_STAT_U64_MEMBER)
} shim_passthrough_stats;
void shim_passthrough_stats_get(shim_passthrough_stats *out);

/* The tag this thread's allocations get (NULL: the default tag). The string must outlive its use
 * as the thread's tag (the core copies it at each allocation). */
void shim_set_thread_tag(const char *tag);
const char *shim_thread_tag(void);

#endif
