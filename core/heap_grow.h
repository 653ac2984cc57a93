/* Growth of an arena (heap_grow.c): new mapped memory for a request that no free block holds,
 * from wholly free handles anywhere on the device first, then from the driver; and large handles
 * re-created as pieces. Calls the handle, block and address-space layers. */
#ifndef VMM_HEAP_GROW_H
#define VMM_HEAP_GROW_H

#include "heap_types.h"

/* Map new memory into arena a so that a free block holds size bytes at align (<= a granule):
 * one of its free blocks grown in place, or a fresh range; *out is that block. VMM_E_OOM when
 * the driver has no memory for it, or, without may_create, when the device's wholly free
 * handles are not enough (then nothing changed and no memory was made). Free pieces given back
 * for a large request are made again even without may_create (the device's memory does not
 * grow); when the driver then refuses, they are gone and the request fails with VMM_E_OOM. */
vmm_status arena_grow(struct arena *a, size_t size, size_t align, bool may_create,
		      struct blk **out, vmm_error *err);

/* Before a large request that found no free block waits for a device sync (heap_fit.c): give
 * back now the wholly free 2 MiB pieces its growth would give back after the sync (at least
 * GIVE_BACK_MIN of them, as arena_grow chooses them). They are idle already, so their unmap and
 * release, ~35-50 us a piece on the H200, run while the GPU still works through the program's
 * queue; after the sync it would have nothing to run. The device's memory only shrinks, and
 * the request's growth after the sync takes that much less from free memory
 * (devheap.given_back_ahead, cleared when the request ends; the tally counts them). None go
 * with give_back_late or for a request that gets new memory in pieces. The caller skips it
 * when the sync may make a block that fits (the pieces would then be made again for nothing).
 * On the H200 PyTorch benchmark (3 Dec night, 5 pairs) it was neutral: median step 105 against
 * 109 ms, mean 142 against 141, as its costliest request needs no sync at all. */
void arena_give_back_early(struct arena *a, size_t size, size_t align);

/* Whether a request of size bytes gets new memory in handles of up to max_handle_bytes (else in
 * 2 MiB pieces): at least whole_handle_min, or max_handle_bytes when that is smaller. */
bool heap_wants_whole(const struct devheap *dh, size_t size);

/* true: a free handle h that [lo, hi) would share is better left uncut. Only with aligned cuts
 * capped below 64 MiB (VMMSHIM_ALIGNED_CUT_MAX), for a handle of at most the cap in which the
 * allocation leaves less than a granule free: that free part strands no more memory than the
 * 2 MiB piece a cut would make there. */
bool handle_cut_needless(const struct devheap *dh, const struct phandle *h, vmm_devptr lo,
			 vmm_devptr hi);

/* Re-create a wholly free, mapped handle larger than a granule at the same address (it is
 * released first: the new handles are made of its memory) so that an allocation of [lo, hi)
 * shares none larger than a granule with other memory: one larger than 64 MiB as 64 MiB handles
 * (the caller then cuts the one it shares), a smaller one as 2 MiB pieces, or, when hi - lo is
 * at least edge_cut_min, cut at the edges of [lo, hi), with a granule of its own where an edge
 * falls inside one. On failure the range may be left partly mapped (as free memory) and partly
 * unclaimed. */
vmm_status handle_shatter(struct devheap *dh, struct phandle *h, vmm_devptr lo, vmm_devptr hi,
			  vmm_error *err);

#endif
