/* Small allocations packed by size class into slabs of 64 KiB to a granule (heap_slab.c). A slab's block
 * comes from the caller (heap_fit.c), so this layer calls only the block layer (heap_blocks.h). */
#ifndef VMM_HEAP_SLAB_H
#define VMM_HEAP_SLAB_H

#include "heap_blocks.h"
#include "heap_types.h"

/* The class of a request, or -1 when it is above small_max (a large allocation). */
int size_class(size_t size, size_t small_max);
size_t class_size(int cls);
/* A slab of class cls for arena a, not yet backed by a block (host memory only). */
struct slab *slab_new(struct arena *a, int cls, vmm_error *err);
/* Back s with b (one granule of a's memory) and list it as having free slots. */
void slab_attach(struct slab *s, struct blk *b);
/* Free a slab's host structures (unattached slabs, and teardown). */
void slab_free_struct(struct slab *s);
/* Give rec a slot of s (s has one). */
void slab_take_slot(struct slab *s, struct alloc *rec);
/* rec's slot is free again; a second empty slab of its class goes back to the arena. */
void slab_free_slot(struct devheap *dh, struct alloc *rec);
/* s lies partly in a shared handle (heap_share.c): it hands out no slot from now on and goes back
 * to the arena once empty (at once when it is). */
void slab_freeze(struct devheap *dh, struct slab *s);
/* Every empty slab of a goes back to the arena as a free block. */
void slab_release_empty(struct devheap *dh, struct arena *a);

#endif
