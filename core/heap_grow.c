/* Growth of an arena (heap_grow.h): new mapped memory for a request that no free block holds.
 *
 * Where: after the arena's largest free block that the unclaimed address space behind it lets
 * grow to the request (it then needs only the missing bytes), else at a fresh address.
 * What, in this order:
 *  1. wholly free handles from anywhere on the device, taken from the smallest free blocks first
 *     (holes that no request fits) and from each block's end, moved and mapped side by side;
 *  2. the memory of a larger idle handle, released rather than moved (a handle cannot be cut,
 *     and only part of it would be used);
 *  3. new memory: for a request of whole_handle_min (32 MiB) or more, one handle for the rest
 *     (or handles of max_handle_bytes, when a limit is set), because copy engines lose bandwidth
 *     on memory made of many handles (H200, device-to-device copy of 512 MiB: 0.86x cudaMalloc in
 *     2 MiB handles, 1.00x in one; of 2 GiB: 0.80x in 2 MiB, 0.91x in 1 GiB handles), and each
 *     handle costs driver time (~40 ms per GiB in 2 MiB handles, ~0.1 ms in one); for a smaller
 *     request, pieces of one granule (2 MiB), so that whatever part of it is free later can move
 *     on its own to where it is needed. New memory adds nothing to the peak whatever its
 *     layout: free memory has been taken first, and a large handle freed later is cut into
 *     pieces (below) or given back whole before any new memory is made.
 * A request of whole_handle_min or more that would have GIVE_BACK_MIN or more free 2 MiB pieces
 * moved to it gives them back to the driver instead and makes their bytes again, with the rest,
 * as new handles (plan_give_back): a move costs ~50 us a piece on the H200, a give-back ~25, and
 * the allocation is one handle, which a later request moves in one call. When such a request must
 * first wait for a device sync, the pieces that are idle already go back before it
 * (arena_give_back_early), while the GPU still runs the program's queue; the growth after the
 * sync counts them as taken.
 * A handle larger than a granule that a smaller allocation would share with free memory is
 * re-created first (handle_shatter; one larger than 64 MiB as 64 MiB handles, of which only the
 * one shared is cut further, into 2 MiB pieces, at the allocation's edges or in aligned
 * power-of-two handles), so that a large handle is always either wholly free or inside one
 * allocation: no free memory is ever stuck behind a live allocation in a handle that cannot be
 * cut, and every allocation can be given a handle of its own. The exceptions: a sleep's joint
 * handle across allocations (heap_coalesce.h), and with VMMSHIM_ALIGNED_CUT_MAX a handle of at
 * most that size which an allocation leaves less than a granule free in (handle_cut_needless). */
#include "heap_grow.h"

#include <stdlib.h>
#include <string.h>

#include "heap_blocks.h"
#include "heap_phys.h"
#include "heap_refill.h"
#include "heap_va.h"

/* The largest handles one is re-created as when a smaller allocation would share it; only the
 * one shared is cut in turn. 64 MiB, not the 1 GiB it was: on the H200 the PyTorch benchmark's
 * activations (300-400 MB) were cut out of the freed multi-GiB logits of the step before, and
 * each cut re-created a 1 GiB handle as 512 pieces (~20 ms, `VMMSHIM_LOG=debug`, five such cuts
 * in its largest step); at 64 MiB a cut makes ~50 handles, and those left whole move in one call
 * each (~0.2 ms against ~1.6 ms for their 32 pieces) when a large request needs them.
 * The one shared becomes 32 pieces of 2 MiB by default. With edge_cut_min
 * (VMMSHIM_EDGE_CUT_MIN) at or below the allocation's size it is cut at the allocation's edges
 * instead (edge_parts): the allocation's part, a granule of its own where an edge falls inside
 * one, and the free rest, each one handle: ~0.15 ms of driver calls against ~1.3 ms, and the
 * logits of the next step gather ~900 handles (~28 ms) rather than ~1800 pieces (~43 ms). The
 * replay of the H200's large-model trace (bench_core --replay ... --one-stream) spends 860-890 ms
 * in the driver cutting at edges against 1470-1580 in pieces, 274-284 against 302 in its timed
 * second pass; but a program whose requests each cut the free rest again pays more cuts than it
 * saves (bench_core --train: 4.6 against 3.0 ms per step; the H200's small-model replay 1.8-2.1
 * against 1.6). On the H200 (A/B in one call, 3 runs each, 3 Dec) cutting at the edges took the
 * largest step from 380-436 to 323-344 ms, as the model says, but cost the small steps 30-50 ms
 * each (16x200: 70-106 against 40-55 ms), which the model does not see: mean step 149 against
 * 140 ms. Edges for requests of 16 or 64 MiB and more only (A/B with pieces, 3 rounds, same
 * day) lost too: mean 149 and 141 against 137 ms, the small steps 20-35 ms slower. The slow
 * requests of 1 ms or more took less time, which read as a loss on the GPU; at a 50 us log
 * threshold (4 Dec) the loss is the heap's: ~100 cuts of 0.15-0.8 ms in each small step, where
 * the host is the bottleneck, each request cutting the rest the last cut left. Aligned cuts
 * (aligned_parts, VMMSHIM_ALIGNED_CUTS: ~6 handles a cut, 965 against 1580 ms of driver time on
 * the large-model replay) lost the same way: mean step 147 against 134 ms in 5 pairs (3 Dec
 * evening), small steps up to twice as long; capped at 4 MiB (VMMSHIM_ALIGNED_CUT_MAX, whose
 * free handles a large request then gives back like pieces) it made the largest steps 5-18%
 * faster and most others 10-33% slower, the mean unchanged (H100, 6 Dec night, 5 pairs).
 * Re-creating the shared handle as 8 MiB handles,
 * of which only the shared one is cut into pieces, lost too (4 Dec evening, 5 pairs, not kept):
 * mean step 146 against 137 ms, although the replay put its driver time 15% lower. One handle
 * for the allocation's part with pieces for the free rest ("inner cuts", 4 Dec night, 5 pairs,
 * not kept) lost as well: mean 163 against 158 ms, the small steps cutting the inner handles the
 * large steps left. Giving the handle back whole and making again only the granules the
 * allocation lies on ("hollow cuts", H100, 5 Dec evening, 5 pairs, not kept) lost most: mean
 * 208 against 155 ms, the largest step 362 against 440, the small steps twice as long, each
 * request making its memory anew. So pieces stay the default; what did gain is cutting less
 * often, by placing a request where it cuts nothing (heap_fit.c, uncut_block), and re-making
 * the pieces a large request is placed on as one handle lost most of all (docs/design.md).
 * Cutting 1 GiB handles at the edges was
 * measured before and lost (+3-14% driver time): each cut then re-created up to 1 GiB, ~0.3 ms
 * to release alone. */
#define SHATTER_STEP ((size_t)64 << 20)

/* A large request gives the free pieces it would move back when there are at least this many
 * (32 MiB): below it the moves cost less than the calls to make new memory. */
#define GIVE_BACK_MIN 16

/* The plan of one growth: the handles that will back [va, va+total), in order. */
struct grow_plan {
	struct phandle **hs;
	bool *fresh;
	size_t n, cap;
	size_t total;
	struct phandle *tail;   /* taken for the last granule already (plan_fill_request) */
};

/* Wholly free handles too large for what was still wanted when they were met. */
struct larger {
	struct phandle **h;
	size_t n, cap;
};

static bool plan_add(struct grow_plan *p, struct phandle *h, bool fresh)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 8;
		struct phandle **hs = realloc(p->hs, cap * sizeof(*hs));
		bool *fr;

		if (!hs)
			return false;
		p->hs = hs;
		fr = realloc(p->fresh, cap * sizeof(*fr));
		if (!fr)
			return false;
		p->fresh = fr;
		p->cap = cap;
	}
	p->hs[p->n] = h;
	p->fresh[p->n++] = fresh;
	p->total += h->size;
	return true;
}

static void plan_abandon(struct devheap *dh, struct grow_plan *p, struct arena *a)
{
	for (size_t i = 0; i < p->n; i++) {
		if (p->fresh[i])
			handle_destroy(dh, p->hs[i], a);
	}
	free(p->hs);
	free(p->fresh);
	memset(p, 0, sizeof(*p));
}

static void plan_done(struct grow_plan *p)
{
	free(p->hs);
	free(p->fresh);
}

static bool larger_add(struct larger *l, struct phandle *h)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct phandle **n = realloc(l->h, cap * sizeof(*n));

		if (!n)
			return false;
		l->h = n;
		l->cap = cap;
	}
	l->h[l->n++] = h;
	return true;
}

static int by_size_asc(const void *a, const void *b)
{
	const struct blk *x = *(struct blk *const *)a, *y = *(struct blk *const *)b;

	return x->size < y->size ? -1 : x->size > y->size;
}

/* The free blocks of every awake arena of the device, smallest first. */
static bool free_blocks(struct devheap *dh, struct blk ***bs, size_t *n)
{
	size_t cap = 0;

	*bs = NULL;
	*n = 0;
	for (int i = 0; i < dh->narenas; i++) {
		if (!dh->arenas[i]->asleep && !free_index_collect(dh->arenas[i], bs, n, &cap))
			return false;
	}
	if (*n)
		qsort(*bs, *n, sizeof(**bs), by_size_asc);
	return true;
}

/* The wholly free handles inside free block b, from its end down, join the plan while they fit
 * in what is still wanted; larger ones are remembered. */
static bool take_from_block(struct devheap *dh, struct grow_plan *p, struct blk *b, size_t want,
			    struct larger *l)
{
	vmm_devptr lo = b->addr, hi = b->addr + b->size;
	vmm_devptr pg = hi & ~(vmm_devptr)(dh->gran - 1);

	while (pg > lo && pg - dh->gran >= lo && p->total < want) {
		struct phandle *h = page_handle_get(dh, pg - dh->gran);

		if (!h || h->asleep)
			break;
		if (h != p->tail && h->va >= lo && h->va + h->size <= hi) {
			if (h->size <= want - p->total ? !plan_add(p, h, false) : !larger_add(l, h))
				return false;
		}
		pg = h->va;
	}
	return true;
}

/* Fill step 1: wholly free handles of every awake arena but those in `avoid` (the block being
 * extended). */
static vmm_status plan_take_free(struct devheap *dh, struct grow_plan *p, size_t want,
				 struct blk *avoid, struct larger *l, vmm_error *err)
{
	struct blk **bs;
	size_t n;
	bool ok = free_blocks(dh, &bs, &n);

	for (size_t i = 0; ok && i < n && p->total < want; i++)
		if (bs[i] != avoid)
			ok = take_from_block(dh, p, bs[i], want, l);
	free(bs);
	return ok ? VMM_OK : vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
}

/* Fill step 2: give the smallest remembered larger handle back to the driver, so that new
 * memory can be made of it. Returns false when there is none left. */
static bool plan_recycle(struct devheap *dh, struct larger *l)
{
	while (l->n) {
		size_t best = 0;
		struct phandle *h;

		for (size_t i = 1; i < l->n; i++)
			if (l->h[i]->size < l->h[best]->size)
				best = i;
		h = l->h[best];
		l->h[best] = l->h[--l->n];
		if (handle_drop(dh, h, NULL) == VMM_OK) {
			dh->tally.recycled++;
			return true;
		}
	}
	return false;
}

/* One new handle of sz bytes (counted as created by a). */
static vmm_status create_handle(struct arena *a, size_t sz, struct phandle **out, vmm_error *err)
{
	vmm_backend *be = a->dh->core->be;
	struct phandle *h = calloc(1, sizeof(*h));
	vmm_status st;

	if (!h)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a handle record");
	st = be->create(be, a->dh->dev, sz, &h->h, err);
	if (st) {
		free(h);
		return st;
	}
	h->size = sz;
	a->st.handles_created++;
	*out = h;
	return VMM_OK;
}

/* Fill step 3: new handles of at most `piece` bytes for the rest. When the driver is out of
 * memory, the handles it refused to take back earlier are tried again, then another larger idle
 * handle is given back first, while there is one. */
static vmm_status plan_create(struct arena *a, struct grow_plan *p, struct larger *l, size_t want,
			      size_t piece, vmm_error *err)
{
	while (p->total < want) {
		size_t sz = want - p->total < piece ? want - p->total : piece;
		struct phandle *h = NULL;
		vmm_status st = create_handle(a, sz, &h, err);

		if (st == VMM_E_OOM && (phys_retry_parked(a->dh) || plan_recycle(a->dh, l)))
			continue;
		if (st)
			return st;
		if (!plan_add(p, h, true)) {
			phys_release(a->dh, h->h, h->size);
			a->st.handles_released++;
			free(h);
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
		}
	}
	return VMM_OK;
}

/* The largest handle an aligned cut makes when VMMSHIM_ALIGNED_CUT_MAX holds that below 64 MiB;
 * 0 when cuts are not capped. */
static size_t capped_cut_max(const struct devheap *dh)
{
	const vmm_config *cfg = &dh->core->cfg;

	return cfg->aligned_cuts && cfg->aligned_cut_max < SHATTER_STEP ? cfg->aligned_cut_max : 0;
}

/* The largest free handle a large request gives back rather than moves: a 2 MiB piece, or what
 * a capped aligned cut makes at most (a move costs per handle what a give-back does, and the
 * request is then one handle). */
static size_t give_back_max(const struct devheap *dh)
{
	size_t cap = capped_cut_max(dh);

	return cap ? cap : dh->gran;
}

static bool moved_piece(const struct devheap *dh, const struct grow_plan *p, size_t i)
{
	return !p->fresh[i] && p->hs[i] != p->tail && p->hs[i]->size <= give_back_max(dh);
}

/* A large request's plan holds GIVE_BACK_MIN or more free 2 MiB pieces to be moved: they go back
 * to the driver, and plan_create makes their bytes again as large handles (see the top of the
 * file). The device's memory does not grow: the pieces are released before anything is made.
 * The pieces are gathered at the plan's end, the other handles keeping their order, and dropped
 * from there. A piece that will not unmap stays free where it is, and the new memory is made of
 * what the driver has. */
static void plan_give_back(struct devheap *dh, struct grow_plan *p)
{
	size_t k = 0, j = 0;

	for (size_t i = 0; i < p->n; i++)
		k += moved_piece(dh, p, i);
	if (k < GIVE_BACK_MIN)
		return;
	for (size_t i = 0; i < p->n; i++) {
		struct phandle *h = p->hs[i];
		bool fresh = p->fresh[i];

		if (moved_piece(dh, p, i)) {
			p->total -= h->size;
			continue;
		}
		p->hs[i] = p->hs[j];
		p->fresh[i] = p->fresh[j];
		p->hs[j] = h;
		p->fresh[j++] = fresh;
	}
	dh->tally.given_back += heap_drop_handles(dh, p->hs + j, p->n - j) / dh->gran;
	p->n = j;
}

/* Collect handles summing to exactly `want` bytes (see the top of the file). Without may_create,
 * VMM_E_OOM when the wholly free handles do not add up to it (nothing changed). */
static vmm_status plan_fill(struct arena *a, struct grow_plan *p, size_t want, size_t piece,
			    bool may_create, struct blk *avoid, vmm_error *err)
{
	struct devheap *dh = a->dh;
	struct larger l = { 0 };
	/* Pieces given back before the request's sync stand for as much free memory taken. */
	size_t ahead = dh->given_back_ahead < want - p->total ? dh->given_back_ahead :
								 want - p->total;
	vmm_status st = plan_take_free(dh, p, want - ahead, avoid, &l, err);

	if (!st && p->total + ahead < want && !may_create)
		st = VMM_E_OOM;
	if (!st && piece > dh->gran)
		plan_give_back(dh, p);
	/* Rather than add memory while a larger wholly free handle sits idle, give that one back:
	 * the device's memory does not grow. */
	if (!st && p->total + ahead < want)
		plan_recycle(dh, &l);
	if (!st) {
		dh->given_back_ahead -= ahead; /* what the new memory is made of */
		st = plan_create(a, p, &l, want, piece, err);
	}
	free(l.h);
	return st;
}

/* The last granule of a plan for a request that ends inside it: a piece of its own, so that the
 * allocations that will share that granule never share a large handle with it (a large handle
 * holds one allocation, see the top of the file). A wholly free piece from anywhere, else a new
 * one when may_create allows (else VMM_E_OOM, nothing changed: the caller syncs and asks again
 * with may_create). When the driver will not make one, *taken stays false and the plan goes on
 * without it: an allocation is worth more than the layout. */
static vmm_status plan_take_tail(struct arena *a, struct grow_plan *p, bool may_create,
				 struct blk *avoid, bool *taken)
{
	struct devheap *dh = a->dh;
	struct larger l = { 0 };
	struct phandle *h = NULL;
	vmm_status st = plan_take_free(dh, p, dh->gran, avoid, &l, NULL);

	free(l.h);
	*taken = false;
	if (st && !p->n)
		return VMM_OK;
	if (!p->n && !may_create)
		return VMM_E_OOM;
	if (!p->n && create_handle(a, dh->gran, &h, NULL) == VMM_OK && !plan_add(p, h, true)) {
		phys_release(dh, h->h, h->size);
		a->st.handles_released++;
		free(h);
	}
	if (p->n == 1) {
		p->tail = p->hs[0];
		*taken = true;
	}
	return VMM_OK;
}

/* The handles for a growth of want bytes whose request ends at end_off bytes into it: as
 * plan_fill, with the last granule a piece of its own when the request ends inside it and the
 * rest would come in larger handles. */
static vmm_status plan_fill_request(struct arena *a, struct grow_plan *p, size_t want,
				    size_t end_off, size_t piece, bool may_create,
				    struct blk *avoid, vmm_error *err)
{
	size_t gran = a->dh->gran;
	bool taken = false, fresh;
	vmm_status st;

	if (piece > gran && want > gran && (end_off & (gran - 1))) {
		st = plan_take_tail(a, p, may_create, avoid, &taken);
		if (st)
			return st;
	}
	st = plan_fill(a, p, want, piece, may_create, avoid, err);
	if (st || !taken)
		return st;
	/* The piece was taken first (so nothing else could take it twice): it goes last. */
	fresh = p->fresh[0];
	memmove(p->hs, p->hs + 1, (p->n - 1) * sizeof(*p->hs));
	memmove(p->fresh, p->fresh + 1, (p->n - 1) * sizeof(*p->fresh));
	p->hs[p->n - 1] = p->tail;
	p->fresh[p->n - 1] = fresh;
	return VMM_OK;
}

/* Map the plan's handles one after another at va (moved ones are detached from where they were
 * first). Returns how many were mapped; *st says why it stopped short. */
static size_t plan_map_handles(struct devheap *dh, struct grow_plan *p, vmm_devptr va,
			       vmm_status *st, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	size_t i, off = 0;

	*st = VMM_OK;
	for (i = 0; i < p->n; i++) {
		struct phandle *h = p->hs[i];

		if (!p->fresh[i]) {
			*st = handle_detach(dh, h, err);
			if (*st)
				break;
			handle_unlink(dh, h);
			p->fresh[i] = true; /* from here on it is ours to map or release */
			dh->tally.moved++;
		}
		*st = be->map(be, va + off, h->size, h->h, err);
		if (*st)
			break;
		h->va = va + off;
		off += h->size;
	}
	return i;
}

/* The plan's range is mapped and accessible: it becomes the arena's free memory. */
static void plan_commit(struct arena *a, struct grow_plan *p, vmm_devptr va)
{
	struct devheap *dh = a->dh;

	for (size_t i = 0; i < p->n; i++) {
		struct phandle *h = p->hs[i];

		h->arena = a;
		h->asleep = false;
		handle_link(dh, h);
		page_handle_set(dh, h->va, h->size, h);
	}
	stats_mapped(a, (int64_t)p->total);
	arena_add_free_range(a, va, p->total);
}

/* A failed plan_map: unmap what the plan mapped at va and give the VA back. A handle that will
 * not unmap is parked mapped (its piece of the VA with it) and leaves the plan; the others are
 * left to plan_abandon (moved cached ones included, they were free). */
static void plan_unmap(struct arena *a, struct grow_plan *p, vmm_devptr va, size_t mapped)
{
	struct devheap *dh = a->dh;
	size_t off = 0;

	for (size_t k = 0; k < p->n; k++) {
		struct phandle *h = p->hs[k];
		size_t size = h->size;

		if (k < mapped && h->va && !phys_unmap(dh->core->be, h->va, size)) {
			phys_park_mapped(dh, h->h, h->va, size, true, "a failed growth");
			p->fresh[k] = false; /* not plan_abandon's to release */
			handle_forget(dh, h, a);
		} else {
			if (k < mapped)
				h->va = 0;
			va_free(dh, va + off, size);
		}
		off += size;
	}
}

/* Map the plan at va (claimed for p->total bytes) and grant access once over the whole range.
 * On failure everything the plan touched is unmapped and the VA is given back (plan_unmap). */
static vmm_status plan_map(struct arena *a, struct grow_plan *p, vmm_devptr va, vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_status st;
	size_t mapped = plan_map_handles(dh, p, va, &st, err);

	if (!st)
		st = heap_grant_access(dh, va, p->total, err);
	if (st) {
		plan_unmap(a, p, va, mapped);
		return st;
	}
	plan_commit(a, p, va);
	return VMM_OK;
}

bool heap_wants_whole(const struct devheap *dh, size_t size)
{
	const vmm_config *c = &dh->core->cfg;

	return size >= c->whole_handle_min || size >= c->max_handle_bytes;
}

/* The size of new handles for a request of `need` bytes (see the top of the file). */
static size_t piece_for(struct devheap *dh, size_t need)
{
	return heap_wants_whole(dh, need) ? dh->core->cfg.max_handle_bytes : dh->gran;
}

/* Bytes a request of size at align takes in block b (its alignment padding included). */
static size_t need_in(const struct blk *b, size_t size, size_t align)
{
	return blk_aligned_start(b, align) - b->addr + size;
}

/* The arena's largest free block too small for the request that the unclaimed address space
 * right after it lets grow enough, or NULL. */
static struct blk *extendable_block(struct arena *a, size_t size, size_t align)
{
	struct devheap *dh = a->dh;
	struct blk **bs = NULL, *best = NULL;
	size_t n = 0, cap = 0;

	if (!free_index_collect(a, &bs, &n, &cap))
		n = 0; /* without host memory for the list: grow at a fresh address */
	for (size_t i = 0; i < n; i++) {
		struct blk *b = bs[i];
		vmm_devptr end = b->addr + b->size;
		size_t need = need_in(b, size, align);

		if (b->size >= need || (end & (dh->gran - 1)) || (best && best->size >= b->size))
			continue;
		if (va_room_at(dh, end) >= align_up(need - b->size, dh->gran))
			best = b;
	}
	free(bs);
	return best;
}

/* Grow block b in place for the request. VMM_E_OOM may mean only that the memory was not there:
 * the caller tries a fresh range. */
static vmm_status grow_in_place(struct arena *a, struct blk *b, size_t size, size_t align,
				bool may_create, struct blk **out, vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_devptr start = b->addr, end = b->addr + b->size;
	size_t want = align_up(need_in(b, size, align) - b->size, dh->gran);
	struct grow_plan p = { 0 };
	vmm_status st;

	if (!va_claim_at(dh, end, want))
		return VMM_E_OOM;
	st = plan_fill_request(a, &p, want, need_in(b, size, align) - b->size, piece_for(dh, size),
			       may_create, b, err);
	if (!st) {
		st = plan_map(a, &p, end, err);
		if (!st) {
			plan_done(&p);
			*out = blk_containing(dh, start);
			return VMM_OK;
		}
	} else {
		va_free(dh, end, want);
	}
	plan_abandon(dh, &p, a);
	return st;
}

void arena_give_back_early(struct arena *a, size_t size, size_t align)
{
	struct devheap *dh = a->dh;
	struct grow_plan p = { 0 };
	struct larger l = { 0 };
	uint64_t before = dh->tally.given_back, went;
	struct blk *b;
	size_t want;

	if (dh->core->cfg.give_back_late || piece_for(dh, size) <= dh->gran)
		return;
	refill_settle(dh);
	/* The growth's own first choice: in place after this block, else at a fresh range. */
	b = extendable_block(a, size, align);
	want = align_up(b ? need_in(b, size, align) - b->size : size, dh->gran);
	/* A second call for the same request (after a wait that was not enough) gives back only
	 * what the first did not. */
	if (want <= dh->given_back_ahead)
		return;
	want -= dh->given_back_ahead;
	if (plan_take_free(dh, &p, want, b, &l, NULL) == VMM_OK)
		plan_give_back(dh, &p);
	free(l.h);
	plan_done(&p); /* what is left in it was only looked at: still mapped, still free */
	went = dh->tally.given_back - before;
	dh->tally.given_back_early += went;
	dh->given_back_ahead += (size_t)went * dh->gran;
}

/* A fresh range: granule-aligned, so no padding is needed for any alignment up to a granule. */
static vmm_status grow_fresh(struct arena *a, size_t size, bool may_create, struct blk **out,
			     vmm_error *err)
{
	struct devheap *dh = a->dh;
	size_t want = align_up(size, dh->gran);
	struct grow_plan p = { 0 };
	vmm_devptr va;
	vmm_status st;

	st = plan_fill_request(a, &p, want, size, piece_for(dh, size), may_create, NULL, err);
	if (!st)
		st = va_alloc(dh, p.total, &va, err);
	if (!st)
		st = plan_map(a, &p, va, err);
	if (st) {
		plan_abandon(dh, &p, a);
		return st;
	}
	plan_done(&p);
	*out = blk_containing(dh, va);
	return VMM_OK;
}

vmm_status arena_grow(struct arena *a, size_t size, size_t align, bool may_create,
		      struct blk **out, vmm_error *err)
{
	struct blk *b;

	/* What the refill thread holds in its queue is made here instead, as the growth needs. */
	refill_settle(a->dh);
	b = extendable_block(a, size, align);
	if (b) {
		vmm_status st = grow_in_place(a, b, size, align, may_create, out, err);

		if (st != VMM_E_OOM)
			return st;
	}
	return grow_fresh(a, size, may_create, out, err);
}

/* Where a handle of at most SHATTER_STEP is cut so that none of its parts larger than a granule
 * holds both memory of [lo, hi) and memory outside it: at each edge of [lo, hi) that falls inside
 * it, and, for an edge inside a granule, on both sides of that granule (a piece of its own, which
 * the allocation and its neighbour may share). The sizes of the parts in address order; at most
 * five. */
static size_t edge_parts(const struct devheap *dh, const struct phandle *h, vmm_devptr lo,
			 vmm_devptr hi, size_t parts[5])
{
	vmm_devptr edges[2] = { lo, hi }, at = h->va, end = h->va + h->size;
	vmm_devptr cuts[5];
	size_t ncuts = 0, n = 0;

	for (int i = 0; i < 2; i++) {
		vmm_devptr down = edges[i] & ~(vmm_devptr)(dh->gran - 1);
		vmm_devptr up = align_up(edges[i], dh->gran);

		if (down > at && down < end)
			cuts[ncuts++] = down;
		if (up != down && up > at && up < end)
			cuts[ncuts++] = up;
	}
	cuts[ncuts++] = end;
	for (size_t i = 0; i < ncuts; i++) {
		if (cuts[i] > at) {
			parts[n++] = cuts[i] - at;
			at = cuts[i];
		}
	}
	return n;
}

/* The most parts aligned_parts makes: a handle of SHATTER_STEP in 2 MiB granules. */
#define ALIGNED_PARTS_MAX 32

/* Where a handle of at most SHATTER_STEP is cut with aligned_cuts: the granules an edge of
 * [lo, hi) falls inside become pieces, and the runs between them handles of power-of-two
 * granules, each aligned to its size within the handle (as a buddy allocator would split it).
 * A later request that shares one of those cuts only that one, so a run is re-created at most
 * once per halving, unlike an edge cut, which re-creates all the free rest at every cut. Sizes
 * in address order; 0 when the handle has more granules than ALIGNED_PARTS_MAX. */
static size_t aligned_parts(const struct devheap *dh, const struct phandle *h, vmm_devptr lo,
			    vmm_devptr hi, size_t parts[ALIGNED_PARTS_MAX])
{
	size_t edges[5], nedges, n = 0, at = 0, total = h->size / dh->gran;
	size_t most = dh->core->cfg.aligned_cut_max / dh->gran; /* granules, VMMSHIM_ALIGNED_CUT_MAX */

	if (total > ALIGNED_PARTS_MAX)
		return 0;
	/* edge_parts' cuts, in granules from the handle's start. */
	nedges = edge_parts(dh, h, lo, hi, edges);
	for (size_t i = 0; i < nedges; i++) {
		size_t end = at + edges[i] / dh->gran;

		while (at < end) {
			size_t blk = 1;

			/* The largest power of two that at is a multiple of and that fits. */
			while (at % (blk * 2) == 0 && at + blk * 2 <= end && blk * 2 <= most)
				blk *= 2;
			parts[n++] = blk * dh->gran;
			at += blk;
		}
	}
	return n;
}

/* A handle [va, va+size) cut into pieces for the request [lo, hi), its range claimed and its
 * memory released: the pieces the request lies on are made now, the rest of the range on the
 * refill thread (heap_refill.h) when it takes it. true: *mva, *msize are what to make now. */
static bool defer_rest(struct arena *a, vmm_devptr va, size_t size, vmm_devptr lo, vmm_devptr hi,
		       vmm_devptr *mva, size_t *msize)
{
	size_t gran = a->dh->gran;
	vmm_devptr end = va + size;
	vmm_devptr need_lo = lo > va ? lo & ~(vmm_devptr)(gran - 1) : va;
	vmm_devptr need_hi = hi < end ? align_up(hi, gran) : end;
	bool left, right;

	if (!a->dh->core->cfg.refill_ahead || need_lo >= need_hi ||
	    (need_lo == va && need_hi == end))
		return false;
	left = need_lo > va && refill_defer(a, va, need_lo - va);
	right = need_hi < end && refill_defer(a, need_hi, end - need_hi);
	if (!left && !right)
		return false;
	/* A side not queued is made here with the request's pieces. */
	*mva = left ? need_lo : va;
	*msize = (right ? need_hi : end) - *mva;
	return true;
}

/* Each such cut re-made a 4 MiB handle as two pieces (a release, then two creates, maps and
 * grants), most of them in the small steps of the PyTorch benchmark, whose host is the
 * bottleneck; on the replay of its large trace three fifths of the capped cuts' extra cuts
 * (1035 of 1726) were of this kind. The handle may then hold two allocations, as a 2 MiB piece
 * may. */
bool handle_cut_needless(const struct devheap *dh, const struct phandle *h, vmm_devptr lo,
			 vmm_devptr hi)
{
	size_t cap = capped_cut_max(dh), before, after;

	if (!cap || h->size > cap)
		return false;
	before = lo > h->va ? lo - h->va : 0;
	after = h->va + h->size > hi ? h->va + h->size - hi : 0;
	return before + after < dh->gran;
}

vmm_status handle_shatter(struct devheap *dh, struct phandle *h, vmm_devptr lo, vmm_devptr hi,
			  vmm_error *err)
{
	struct arena *a = h->arena;
	vmm_devptr va = h->va;
	size_t size = h->size;
	size_t parts[ALIGNED_PARTS_MAX], nparts = 0;
	size_t piece = size > SHATTER_STEP ? SHATTER_STEP : dh->gran;
	struct grow_plan p = { 0 };
	struct larger none = { 0 };
	vmm_status st;

	/* A handle larger than SHATTER_STEP becomes handles of that size first, and only the one
	 * that is shared is cut in turn (the caller asks again): cutting a whole 16 GiB handle
	 * would cost ~0.3 s of driver calls on the H200 for the sake of a few MiB. A smaller one
	 * becomes pieces of `piece`, or the parts cut at the edges. */
	if (size <= SHATTER_STEP && hi - lo >= dh->core->cfg.edge_cut_min)
		nparts = edge_parts(dh, h, lo, hi, parts);
	else if (size <= SHATTER_STEP && dh->core->cfg.aligned_cuts)
		nparts = aligned_parts(dh, h, lo, hi, parts);
	/* Give it back first: the new handles are made of its memory. */
	st = handle_drop(dh, h, err);
	if (st)
		return st;
	if (!va_claim_at(dh, va, size))
		return vmm_fail(err, VMM_E_INVALID, 0, "device %d: 0x%llx cannot be claimed again",
				dh->dev, (unsigned long long)va);
	dh->tally.shattered++;
	/* Only what the request lies on, when the refill thread takes the rest. */
	if (!nparts && piece == dh->gran)
		defer_rest(a, va, size, lo, hi, &va, &size);
	if (!nparts)
		st = plan_create(a, &p, &none, size, piece, err);
	for (size_t i = 0; i < nparts && !st; i++)
		st = plan_create(a, &p, &none, p.total + parts[i], parts[i], err);
	/* What could not be re-created (the driver gave the memory to someone else meanwhile)
	 * stays unclaimed address space. */
	if (p.total < size)
		va_free(dh, va + p.total, size - p.total);
	if (p.total) {
		vmm_status ms = plan_map(a, &p, va, st ? NULL : err);

		if (ms) {
			plan_abandon(dh, &p, a);
			return st ? st : ms;
		}
	}
	plan_done(&p);
	return st;
}
