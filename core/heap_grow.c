/* Growth of an arena (heap_grow.h): a plan of the handles that will back a new range (wholly free
 * handles from anywhere on the device first, re-mapped contiguously at the new address, then new
 * ones), mapped at the end of the arena's last growth when the address space there is free, else
 * at a fresh address. */
#include "heap_grow.h"

#include <stdlib.h>
#include <string.h>

#include "heap_phys.h"

/* The plan of one growth: the handles that will back [va, va+total), in order. */
struct grow_plan {
	struct phandle **hs;
	bool *fresh;
	size_t n, cap;
	size_t total;
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

/* The wholly free handles that may move, largest first. Those in `avoid` (the block being
 * extended) and those of sleeping arenas stay where they are. */
struct cands {
	struct phandle **h;
	bool *used;
	size_t n;
};

static int by_size_desc(const void *a, const void *b)
{
	const struct phandle *x = *(struct phandle *const *)a, *y = *(struct phandle *const *)b;

	return x->size > y->size ? -1 : x->size < y->size;
}

static bool cands_collect(struct devheap *dh, struct blk *avoid, struct cands *c)
{
	size_t n = 0;

	memset(c, 0, sizeof(*c));
	for (struct phandle *h = dh->handles; h; h = h->next)
		n++;
	if (!n)
		return true;
	c->h = malloc(n * sizeof(*c->h));
	c->used = calloc(n, sizeof(*c->used));
	if (!c->h || !c->used) {
		free(c->h);
		free(c->used);
		memset(c, 0, sizeof(*c));
		return false;
	}
	for (struct phandle *h = dh->handles; h; h = h->next) {
		if (h->arena->asleep || !handle_wholly_free(dh, h))
			continue;
		if (avoid && h->va >= avoid->addr && h->va < avoid->addr + avoid->size)
			continue;
		c->h[c->n++] = h;
	}
	qsort(c->h, c->n, sizeof(*c->h), by_size_desc);
	return true;
}

static void cands_free(struct cands *c)
{
	free(c->h);
	free(c->used);
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

/* New memory for a request below max_handle_bytes comes in pieces of at most PIECE_MAX: when
 * such a request is freed and its range is later split by smaller ones, the pieces that stay
 * wholly free can still move to where the next large request needs them. Large handles would
 * stay pinned by any small allocation inside them, and the heap would grow instead (the NO_CACHING
 * training replay of bench_core: peak mapped/live 1.23 -> 1.10). Requests of max_handle_bytes or
 * more keep whole handles, so that sleeping and waking them stays a few calls per GiB. */
#define PIECE_MAX (64ull << 20)

/* Fill step 1: the wholly free handles that fit in what is still wanted, largest first (room
 * only shrinks: one pass). */
static vmm_status plan_take_fitting(struct grow_plan *p, struct cands *c, size_t want,
				    vmm_error *err)
{
	for (size_t i = 0; i < c->n && p->total < want; i++) {
		if (c->h[i]->size > want - p->total)
			continue;
		if (!plan_add(p, c->h[i], false))
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
		c->used[i] = true;
	}
	return VMM_OK;
}

/* The smallest unused candidate that covers the rest of what is wanted joins the plan (its tail
 * stays free in the arena). VMM_E_OOM (err untouched) when there is none. */
static vmm_status plan_take_cover(struct grow_plan *p, struct cands *c, size_t want,
				  vmm_error *err)
{
	size_t room = want - p->total, k = c->n;

	while (k-- > 0)
		if (!c->used[k] && c->h[k]->size >= room)
			break;
	if (k >= c->n)
		return VMM_E_OOM;
	if (!plan_add(p, c->h[k], false))
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory");
	c->used[k] = true;
	return VMM_OK;
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

/* Fill step 3: new handles for the rest (see PIECE_MAX). When the driver is out of memory and an
 * inexact fill is allowed, the smallest larger cached handle covers the rest. */
static vmm_status plan_create(struct arena *a, struct grow_plan *p, struct cands *c, size_t want,
			      bool exact, vmm_error *err)
{
	size_t maxh = a->dh->core->cfg.max_handle_bytes;

	while (p->total < want) {
		size_t sz = want - p->total;
		struct phandle *h = NULL;
		vmm_status st;

		if (sz > maxh)
			sz = maxh;
		if (want < maxh && sz > PIECE_MAX)
			sz = PIECE_MAX;
		st = create_handle(a, sz, &h, err);
		if (st == VMM_E_OOM && !exact) {
			vmm_status cover = plan_take_cover(p, c, want, err);

			if (cover == VMM_E_OOM)
				return st;
			if (cover)
				return cover;
			continue;
		}
		if (st)
			return st;
		if (!plan_add(p, h, true)) {
			phys_release(a->dh->core->be, h->h);
			a->st.handles_released++;
			free(h);
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
		}
	}
	return VMM_OK;
}

/* Collect handles summing to `want` bytes exactly, or at least `want` when `exact` is false:
 * wholly free handles first (largest that fit), then a larger wholly free one rather than new
 * memory, then new ones. */
static vmm_status plan_fill(struct arena *a, struct grow_plan *p, size_t want, bool exact,
			    struct blk *avoid, vmm_error *err)
{
	struct cands c;
	vmm_status st;

	if (!cands_collect(a->dh, avoid, &c))
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
	st = plan_take_fitting(p, &c, want, err);
	/* Rather than create memory while a larger wholly free handle sits idle, map that one:
	 * the device's mapped memory does not grow. */
	if (!st && !exact && p->total < want) {
		st = plan_take_cover(p, &c, want, err);
		if (st == VMM_E_OOM)
			st = VMM_OK;
	}
	if (!st)
		st = plan_create(a, p, &c, want, exact, err);
	cands_free(&c);
	return st;
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
	a->grow_end = va + p->total;
}

/* Map the plan at va and grant access once over the whole range. On failure everything the plan
 * touched is unmapped (its handles are left to plan_abandon: moved cached ones included, they
 * were free) and the VA is given back. */
static vmm_status plan_map(struct arena *a, struct grow_plan *p, vmm_devptr va, vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_status st;
	size_t mapped = plan_map_handles(dh, p, va, &st, err);

	if (!st)
		st = heap_grant_access(dh, va, p->total, err);
	if (st) {
		for (size_t k = 0; k < mapped; k++) {
			struct phandle *h = p->hs[k];

			if (h->va) {
				phys_unmap(dh->core->be, h->va, h->size);
				h->va = 0;
			}
		}
		va_free(dh, va, p->total);
		return st;
	}
	plan_commit(a, p, va);
	return VMM_OK;
}

static void plan_done(struct grow_plan *p)
{
	free(p->hs);
	free(p->fresh);
}

/* The arena's free tail block when the next growth can extend its last growth in place (the
 * tail then coalesces with the new memory and the request needs fewer new bytes); else NULL. */
static struct blk *extendable_tail(struct arena *a, size_t need)
{
	struct blk *tail;

	if (!a->grow_end)
		return NULL;
	tail = blk_containing(a->dh, a->grow_end - 1);
	if (tail && (tail->state != BLK_FREE || tail->arena != a ||
		     tail->addr + tail->size != a->grow_end || tail->size >= need))
		tail = NULL;
	return tail;
}

/* Grow in place after tail. VMM_E_OOM (err untouched when the address space after it is
 * taken) means: try a fresh range, which may use a larger cached handle. */
static vmm_status grow_in_place(struct arena *a, struct blk *tail, size_t need, vmm_error *err)
{
	struct devheap *dh = a->dh;
	size_t want = align_up(need - tail->size, dh->gran);
	struct grow_plan p = { 0 };
	vmm_status st;

	if (!va_claim_at(dh, a->grow_end, want))
		return VMM_E_OOM;
	st = plan_fill(a, &p, want, true, tail, err);
	if (!st) {
		st = plan_map(a, &p, a->grow_end, err);
		if (!st) {
			plan_done(&p);
			return VMM_OK;
		}
	} else {
		va_free(dh, a->grow_end, want);
	}
	plan_abandon(dh, &p, a);
	return st;
}

static vmm_status grow_fresh(struct arena *a, size_t need, vmm_error *err)
{
	struct devheap *dh = a->dh;
	struct grow_plan p = { 0 };
	vmm_devptr va;
	vmm_status st;

	st = plan_fill(a, &p, align_up(need, dh->gran), false, NULL, err);
	if (!st)
		st = va_alloc(dh, p.total, &va, err);
	if (!st)
		st = plan_map(a, &p, va, err);
	if (st) {
		plan_abandon(dh, &p, a);
		return st;
	}
	plan_done(&p);
	return VMM_OK;
}

vmm_status arena_grow(struct arena *a, size_t need, vmm_error *err)
{
	struct blk *tail = extendable_tail(a, need);

	if (tail) {
		vmm_status st = grow_in_place(a, tail, need, err);

		if (st != VMM_E_OOM)
			return st;
	}
	return grow_fresh(a, need, err);
}
