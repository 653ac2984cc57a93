/* Giving a device's wholly free handles back to the driver: where a trim, the cache limit and a
 * process's own give-back (heap_own.c) end. Above the handles (heap_phys.c) and the refill
 * ahead (heap_refill.c), which must settle first: a range being made is not free yet. */
#ifndef VMM_HEAP_RELEASE_H
#define VMM_HEAP_RELEASE_H

#include <stddef.h>

#include "heap_types.h"

/* Release wholly free handles until at most keep_bytes of them remain. */
void heap_release_free_handles(struct devheap *dh, size_t keep_bytes);

#endif
