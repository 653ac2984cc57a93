/* How many calls that submit device work the program has made through the CUDA hooks: the heap
 * reuses freed memory without a device synchronization while this has not moved since its last
 * one began (core/heap_records.c). Process-wide: a submission on any device or context counts. */
#ifndef VMMSHIM_SUBMIT_COUNT_H
#define VMMSHIM_SUBMIT_COUNT_H

#include <stdatomic.h>
#include <stdint.h>

#include "../core/backend/backend.h"

extern _Atomic uint64_t submit_count;

/* After the driver's call returned (whatever it returned: a failed batch may have queued part of
 * its work), never before: work counted before it reaches the driver could miss a
 * synchronization that began in between and yet be taken as drained by it. Release: the heap's
 * acquire read that sees the count then also sees the work queued. */
static inline void submit_count_note(void)
{
	atomic_fetch_add_explicit(&submit_count, 1, memory_order_release);
}

/* The backend's submitted(), for the CUDA side (core/backend/backend.h). */
uint64_t submit_count_read(vmm_backend *be);

#endif
