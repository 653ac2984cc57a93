/* Fewer, larger handles after a sleep (heap_coalesce.c). An allocation that grew from free
 * pieces is backed by many small handles, and small allocations by a piece or two each; each
 * handle costs the driver ~25 us to release and ~40 us to re-create, map and grant, per cycle,
 * whatever its size (H200: 96 GiB in 46805 handles took 2.4 s to release and 2.6 s to bring
 * back without any copy). Once released, a run of address-adjacent handles is one asleep
 * handle: the wake re-creates it whole, and every later cycle pays for one. A run inside one
 * allocation is as large as handles may be; a run across allocations (a joint handle) is at
 * most JOIN_MAX_BYTES. A joint handle breaks the rule that a large handle is wholly free or
 * inside one allocation (heap_grow.c) in one way only: memory freed inside it is reused in
 * place, by its arena, until all of it is free; then it moves or goes back like any other. */
#ifndef VMM_HEAP_COALESCE_H
#define VMM_HEAP_COALESCE_H

#include "heap_types.h"

/* The largest joint handle. It bounds the memory a partly freed one holds for its arena alone
 * (and what an export of one of its allocations pins), while handles of 1 GiB cost the driver
 * the least per byte (tests/bench/driver_model.c). Adjacent small allocations sleep and wake in
 * handles of up to 1 GiB; free memory between them (holes, below) splits the runs. */
#define JOIN_MAX_BYTES ((size_t)1 << 30)

/* Holes: wholly free handles between two that a sleep releases are given back at the sleep like
 * any free ones, and their addresses then split the run they sit in: the wake re-creates two handles
 * where one would do (hold.cu's small pattern: ~20 per GiB, one per hole; each costs the H200's
 * driver ~80 us at a wake, whatever its size). A small hole (one or more adjacent free handles
 * of the neighbours' arena and reservation, none shared) is released with its neighbours
 * instead, as part of their run: the wake brings it back, free in its arena, at the cost of its
 * bytes. Holes of at most HOLE_MAX_BYTES are taken, smallest first, up to 1/2^HOLE_BUDGET_SHIFT
 * of the bytes the sleep releases with them: the device holds at most that much more after a
 * wake, never more than it held before the sleep. */
#define HOLE_MAX_BYTES ((size_t)8 << 20)
#define HOLE_BUDGET_SHIFT 5

/* hs[first..first+n): address-adjacent handles that become one, `bytes` in all. */
struct handle_run {
	size_t first, n;
	size_t bytes;
};

/* The runs of two or more handles among hs[0..n) (sorted by address) that may become one:
 * address-adjacent in one reservation, same arena, none shared, retained or released by a group,
 * at most max_handle_bytes in all, and at most JOIN_MAX_BYTES unless inside one live allocation.
 * Returns how many, in *runs (malloc'd, NULL when none or out of host memory: no run then). */
size_t coalesce_runs(struct devheap *dh, struct phandle *const *hs, size_t n,
		     struct handle_run **runs);
/* Move the handles of the holes worth taking (above) from idle[0..*nidle) (wholly free handles
 * the sleep gives back) into live[0..*nlive) (the handles it releases, sorted by address; room
 * for *nlive + *nidle entries): live stays sorted, idle keeps its order. Returns the bytes taken
 * (0 also when out of host memory: nothing moves then). */
uint64_t coalesce_take_holes(struct devheap *dh, struct phandle **live, size_t *nlive,
			     struct phandle **idle, size_t *nidle);
/* Do the run's backups lie in one piece, in address order? (Then the run may become one.) */
bool run_backup_contiguous(struct phandle *const *hs, const struct handle_run *run);
/* The run's handles are released (asleep): hs[run->first] becomes the one asleep handle of the
 * run's size, its backup the run's piece; the others are unlisted and freed. Pieces that do not
 * form one (a discarded sleep keeps no copy) go back to the pool. */
void coalesce_asleep(struct devheap *dh, struct phandle **hs, const struct handle_run *run);

#endif
