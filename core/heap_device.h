/* Device heaps and their arenas (heap_device.c): a device's heap made at its first use, found by
 * ordinal or by an address inside it, torn down with the core; an arena per tag. */
#ifndef VMM_HEAP_DEVICE_H
#define VMM_HEAP_DEVICE_H

#include "heap_types.h"

/* The heap of dev (made when `create` and there is none yet); NULL with err set otherwise. */
struct devheap *heap_for(struct vmm_core *core, int dev, bool create, vmm_error *err);
/* The heap whose address space holds ptr (no lock needed), or NULL. */
struct devheap *heap_of_ptr(struct vmm_core *core, vmm_devptr ptr);
/* The arena of tag (NULL: the default tag), made when `create`. */
struct arena *arena_find(struct devheap *dh, const char *tag, bool create, vmm_error *err);
/* Unmap and release everything the heap holds and free it. */
void devheap_destroy(struct devheap *dh);

#endif
