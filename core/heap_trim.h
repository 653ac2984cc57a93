/* Trimming (heap.h: vmm_trim), and what the core's destroy waits for of it. */
#ifndef VMM_HEAP_TRIM_H
#define VMM_HEAP_TRIM_H

#include <stdbool.h>

#include "heap_types.h"

/* At the core's destroy: no trim starts after this, and those between their device
 * synchronization and their heap's lock are waited for, at most wait_ms. false: one is still
 * in the driver; the heaps must then be left to the end of the process. */
bool trims_stop(struct vmm_core *core, int wait_ms);

/* In a forked child: the trims of the parent's other threads are not there. */
void trims_after_fork(struct vmm_core *core);

#endif
