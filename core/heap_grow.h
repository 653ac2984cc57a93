/* Growth of an arena (heap_grow.c): new mapped memory for a request that no free block holds,
 * from wholly free handles anywhere on the device first, then from the driver. Calls the handle,
 * block and address-space layers. */
#ifndef VMM_HEAP_GROW_H
#define VMM_HEAP_GROW_H

#include "heap_types.h"

/* Map at least `need` more bytes into arena a as free memory (coalesced with its free tail when
 * it extends the last growth). VMM_E_OOM when the driver has no memory for it. */
vmm_status arena_grow(struct arena *a, size_t need, vmm_error *err);

#endif
