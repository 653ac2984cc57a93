/* One sleep or wake of a process's device memory: its parts (each core heap, the registry of the
 * program's own VMM mappings), what is selected, and the limits, in one call that owns the order
 * and the rollback: run each part; when one fails, undo the done parts in reverse; where an undo
 * fails, leave the partial state (transfer.h) and say so. The caller (the shim) holds device
 * work at its submission gate around it and decides what to hold afterwards; it asks nothing of
 * the parts before or after. */
#ifndef VMM_OFFLOAD_TRANSITION_H
#define VMM_OFFLOAD_TRANSITION_H

#include <stdbool.h>

#include "../heap.h"
#include "app_vmm.h"
#include "transfer.h"

#define VMM_OFFLOAD_MAX_HEAPS 2

/* What sleeps and wakes. Sleep walks the heaps in order, then the app mappings; wake walks back. */
typedef struct vmm_offload_parts {
	struct {
		const char *name;       /* "cuda heap": for messages */
		vmm_core *core;
	} heaps[VMM_OFFLOAD_MAX_HEAPS];
	int nheaps;
	vmm_app_registry *app;      /* the program's own VMM mappings; NULL: none tracked */
} vmm_offload_parts;

/* What an operation covers. */
typedef struct vmm_selection {
	const char *tag;     /* NULL: every tag */
	int device;          /* -1: every device */
	bool app;            /* the program's own VMM mappings too (they belong to no tag) */
	bool discard;        /* sleep: contents are not kept */
} vmm_selection;

/* Sleep what sel selects, within lim (NULL: unbounded). VMM_E_INVALID, with nothing touched,
 * when it selects nothing: "device N has no memory managed by vmmshim" or "no tag X" (a part
 * lacking the device or tag is skipped as long as another has it). VMM_E_ALREADY when all of it
 * is asleep. On failure what was done is undone; res->partial_bytes > 0 when that failed too
 * (the error message then says what stays asleep, and a wake completes it). */
vmm_status vmm_offload_sleep(const vmm_offload_parts *parts, const vmm_selection *sel,
			     const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err);
/* Wake what sel selects: the same contract; VMM_E_ALREADY when nothing of it is asleep. */
vmm_status vmm_offload_wake(const vmm_offload_parts *parts, const vmm_selection *sel,
			    const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err);

/* Is anything of sel asleep? */
bool vmm_offload_is_asleep(const vmm_offload_parts *parts, const vmm_selection *sel);

#endif
