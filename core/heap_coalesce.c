/* Runs of asleep handles become one handle (heap_coalesce.h). */
#include "heap_coalesce.h"

#include <stdlib.h>

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
