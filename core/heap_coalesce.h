/* Fewer, larger handles after a sleep (heap_coalesce.c). An allocation that grew from free
 * pieces is backed by many small handles; each costs the driver ~25 us to release and ~40 us to
 * re-create, map and grant, per cycle, whatever its size (H200: 96 GiB in 46805 handles took
 * 2.4 s to release and 2.6 s to bring back without any copy). Once released, the run of handles
 * that lies inside one allocation is one asleep handle: the wake re-creates it whole, and every
 * later cycle pays for one. A handle still inside one allocation keeps the heap's rule (a large
 * handle is wholly free or inside one allocation), so nothing else changes. */
#ifndef VMM_HEAP_COALESCE_H
#define VMM_HEAP_COALESCE_H

#include "heap_types.h"

/* hs[first..first+n): address-adjacent handles inside one allocation, `bytes` in all. */
struct handle_run {
	size_t first, n;
	size_t bytes;
};

/* The runs of two or more handles among hs[0..n) (sorted by address) that may become one: same
 * arena, inside one live allocation, none shared or retained, at most max_handle_bytes in all.
 * Returns how many, in *runs (malloc'd, NULL when none or out of host memory: no run then). */
size_t coalesce_runs(struct devheap *dh, struct phandle *const *hs, size_t n,
		     struct handle_run **runs);
/* Do the run's backups lie in one piece, in address order? (Then the run may become one.) */
bool run_backup_contiguous(struct phandle *const *hs, const struct handle_run *run);
/* The run's handles are released (asleep): hs[run->first] becomes the one asleep handle of the
 * run's size, its backup the run's piece; the others are unlisted and freed. Pieces that do not
 * form one (a discarded sleep keeps no copy) go back to the pool. */
void coalesce_asleep(struct devheap *dh, struct phandle **hs, const struct handle_run *run);

#endif
