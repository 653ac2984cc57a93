/* Runs of asleep handles become one handle (heap_coalesce.h). */
#include "heap_coalesce.h"

#include <stdlib.h>
#include <string.h>

#include "heap_blocks.h"
#include "heap_phys.h"
#include "heap_va.h"

/* The live allocation's block that holds all of h, or NULL. */
static struct blk *allocation_of(struct devheap *dh, const struct phandle *h)
{
	struct blk *b = blk_containing(dh, h->va);

	if (!b || b->state != BLK_USED || b->addr > h->va || b->addr + b->size < h->va + h->size)
		return NULL;
	return b;
}

static bool may_join(const struct phandle *h)
{
	return !h->shared && !h->retained && !h->release_ok;
}

/* May h join the run of hs[first..] that ends with prev, the run already `bytes` long and
 * inside allocation b so far (NULL: across allocations)? */
static bool joins(struct devheap *dh, const struct phandle *first, const struct phandle *prev,
		  const struct phandle *h, const struct blk *b, size_t bytes, size_t cap_bytes)
{
	if (h->va != prev->va + prev->size || h->arena != prev->arena || !may_join(h) ||
	    res_of(dh, h->va) != res_of(dh, first->va) || bytes + h->size > cap_bytes)
		return false;
	/* Inside one allocation a run is as large as the handles may be; across allocations,
	 * at most JOIN_MAX_BYTES. */
	return (b && allocation_of(dh, h) == b) || bytes + h->size <= JOIN_MAX_BYTES;
}

size_t coalesce_runs(struct devheap *dh, struct phandle *const *hs, size_t n,
		     struct handle_run **runs)
{
	size_t cap_bytes = dh->core->cfg.max_handle_bytes ? dh->core->cfg.max_handle_bytes :
							    SIZE_MAX;
	size_t count = 0, cap = 0;

	*runs = NULL;
	for (size_t i = 0; i < n;) {
		bool ok = may_join(hs[i]);
		const struct blk *b = ok ? allocation_of(dh, hs[i]) : NULL;
		struct handle_run r = { .first = i, .n = 1, .bytes = hs[i]->size };

		for (size_t j = i + 1; ok && j < n; j++) {
			const struct phandle *h = hs[j];

			if (!joins(dh, hs[i], hs[j - 1], h, b, r.bytes, cap_bytes))
				break;
			if (b && allocation_of(dh, h) != b)
				b = NULL;
			r.n++;
			r.bytes += h->size;
		}
		i += r.n;
		if (r.n < 2)
			continue;
		if (count == cap) {
			size_t c = cap ? cap * 2 : 16;
			struct handle_run *nr = realloc(*runs, c * sizeof(*nr));

			if (!nr)
				return count;   /* the runs found so far are still right */
			*runs = nr;
			cap = c;
		}
		(*runs)[count++] = r;
	}
	return count;
}

static int by_va(const void *a, const void *b)
{
	const struct phandle *x = *(struct phandle *const *)a, *y = *(struct phandle *const *)b;

	return x->va < y->va ? -1 : x->va > y->va;
}

/* The index of the first of hs[0..n) (sorted by address) at or above va; n when none. */
static size_t first_at_or_above(struct phandle *const *hs, size_t n, vmm_devptr va)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (hs[mid]->va < va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A hole: free[first..first+n) (address-adjacent), `bytes` in all. */
struct hole {
	size_t first, n;
	size_t bytes;
};

static int by_bytes(const void *a, const void *b)
{
	const struct hole *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* Is free[i..j) (address-adjacent, one arena) a hole between two of live[0..n) that it may
 * join? */
static bool is_hole(struct devheap *dh, struct phandle *const *live, size_t n,
		    struct phandle *const *free_hs, size_t i, size_t j)
{
	const struct phandle *h = free_hs[i], *last = free_hs[j - 1];
	size_t k = first_at_or_above(live, n, h->va);
	const struct phandle *prev = k ? live[k - 1] : NULL, *next = k < n ? live[k] : NULL;

	return prev && next && prev->va + prev->size == h->va &&
	       last->va + last->size == next->va && prev->arena == h->arena &&
	       next->arena == h->arena && may_join(prev) && may_join(next) &&
	       res_of(dh, prev->va) == res_of(dh, next->va);
}

/* The holes among free[0..n) (sorted by address): runs of adjacent joinable free handles of one
 * arena, at most HOLE_MAX_BYTES, between two live handles. Returns how many, in holes. */
static size_t find_holes(struct devheap *dh, struct phandle *const *live, size_t nlive,
			 struct phandle *const *free_hs, size_t n, struct hole *holes)
{
	size_t nh = 0;

	for (size_t i = 0; i < n;) {
		size_t j = i + 1, bytes = free_hs[i]->size;
		bool ok = may_join(free_hs[i]);

		for (; j < n && free_hs[j]->va == free_hs[j - 1]->va + free_hs[j - 1]->size &&
		       free_hs[j]->arena == free_hs[i]->arena; j++) {
			ok = ok && may_join(free_hs[j]);
			bytes += free_hs[j]->size;
		}
		if (ok && bytes <= HOLE_MAX_BYTES && is_hole(dh, live, nlive, free_hs, i, j))
			holes[nh++] = (struct hole){ .first = i, .n = j - i, .bytes = bytes };
		i = j;
	}
	return nh;
}

uint64_t coalesce_take_holes(struct devheap *dh, struct phandle **live, size_t *nlive,
			     struct phandle **idle, size_t *nidle)
{
	uint64_t live_bytes = 0, taken = 0;
	struct phandle **free_hs, **take;
	struct hole *holes;
	size_t nh, k = 0, ntake = 0, w = 0;

	if (!*nidle || !*nlive)
		return 0;
	free_hs = malloc(*nidle * sizeof(*free_hs));
	take = malloc(*nidle * sizeof(*take));
	holes = malloc(*nidle * sizeof(*holes));
	if (!free_hs || !take || !holes) {
		free(free_hs);
		free(take);
		free(holes);
		return 0;
	}
	for (size_t i = 0; i < *nlive; i++)
		live_bytes += live[i]->size;
	memcpy(free_hs, idle, *nidle * sizeof(*free_hs));
	qsort(free_hs, *nidle, sizeof(*free_hs), by_va);
	nh = find_holes(dh, live, *nlive, free_hs, *nidle, holes);
	/* Smallest first: each hole taken is one handle fewer at every wake, whatever its size. */
	qsort(holes, nh, sizeof(*holes), by_bytes);
	for (; k < nh && taken + holes[k].bytes <= live_bytes >> HOLE_BUDGET_SHIFT; k++) {
		taken += holes[k].bytes;
		for (size_t i = 0; i < holes[k].n; i++)
			take[ntake++] = free_hs[holes[k].first + i];
	}
	qsort(take, ntake, sizeof(*take), by_va);
	for (size_t i = 0; i < *nidle; i++)
		if (!ntake || !bsearch(&idle[i], take, ntake, sizeof(*take), by_va))
			idle[w++] = idle[i];
	*nidle = w;
	/* Merge from the back: live has the room. */
	for (size_t i = *nlive, j = ntake, out = *nlive + ntake; j;) {
		if (i && live[i - 1]->va > take[j - 1]->va)
			live[--out] = live[--i];
		else
			live[--out] = take[--j];
	}
	*nlive += ntake;
	free(free_hs);
	free(take);
	free(holes);
	return taken;
}

bool run_backup_contiguous(struct phandle *const *hs, const struct handle_run *run)
{
	const struct phandle *h0 = hs[run->first];

	for (size_t k = run->first; k < run->first + run->n; k++)
		if (!hs[k]->backup.ptr ||
		    (char *)hs[k]->backup.ptr != (char *)h0->backup.ptr + (hs[k]->va - h0->va))
			return false;
	return true;
}

void coalesce_asleep(struct devheap *dh, struct phandle **hs, const struct handle_run *run)
{
	struct phandle *h0 = hs[run->first];
	bool keep = run_backup_contiguous(hs, run);

	/* Contents held in pieces that do not form one cannot become one handle's backup. */
	for (size_t k = run->first; k < run->first + run->n && !keep; k++)
		if (hs[k]->has_backup)
			return;
	for (size_t k = run->first; k < run->first + run->n; k++) {
		struct phandle *h = hs[k];

		if (!keep)
			heap_backup_put(dh, &h->backup);
		if (h == h0)
			continue;
		handle_unlink(dh, h);
		free(h);
		hs[k] = h0;   /* the caller's array must not keep a freed record */
	}
	h0->size = run->bytes;
	if (keep)
		h0->backup.size = run->bytes;
	page_handle_set(dh, h0->va, h0->size, h0);
}
