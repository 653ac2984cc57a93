/* Blocks over mapped memory (heap_blocks.h): the address-ordered neighbour links, the per-page
 * index that answers "which block holds this address", and each arena's segregated free index
 * (TLSF: two-level bitmaps, so that search, insert and remove are O(1)). */
#include "heap_blocks.h"

#include <stdlib.h>
#include <string.h>

struct blk *blk_new(struct devheap *dh)
{
	struct blk *b = dh->blk_pool;

	if (b)
		dh->blk_pool = b->next;
	else
		b = malloc(sizeof(*b));
	if (b)
		memset(b, 0, sizeof(*b));
	return b;
}

void blk_put(struct devheap *dh, struct blk *b)
{
	b->next = dh->blk_pool;
	dh->blk_pool = b;
}

static size_t page_of(struct devheap *dh, struct reservation *r, vmm_devptr va)
{
	return (size_t)((va - r->base) / dh->gran);
}

void page_handle_set(struct devheap *dh, vmm_devptr va, size_t size, struct phandle *h)
{
	struct reservation *r = res_of(dh, va);
	size_t p0 = page_of(dh, r, va), n = size / dh->gran;

	for (size_t i = 0; i < n; i++)
		r->page_handle[p0 + i] = h;
}

struct phandle *page_handle_get(struct devheap *dh, vmm_devptr va)
{
	struct reservation *r = res_of(dh, va);

	return r ? r->page_handle[page_of(dh, r, va)] : NULL;
}

/* A block now starts at b->addr: it is its page's first block unless one starts earlier there. */
static void page_first_add(struct devheap *dh, struct blk *b)
{
	struct reservation *r = res_of(dh, b->addr);
	size_t p = page_of(dh, r, b->addr);

	if (!r->page_first[p] || r->page_first[p]->addr > b->addr)
		r->page_first[p] = b;
}

/* b goes away (merged or unmapped); its successor may take over as the page's first block. */
static void page_first_remove(struct devheap *dh, struct blk *b)
{
	struct reservation *r = res_of(dh, b->addr);
	size_t p = page_of(dh, r, b->addr);

	if (r->page_first[p] != b)
		return;
	if (b->next && page_of(dh, r, b->next->addr) == p && res_of(dh, b->next->addr) == r)
		r->page_first[p] = b->next;
	else
		r->page_first[p] = NULL;
}

struct blk *blk_containing(struct devheap *dh, vmm_devptr addr)
{
	struct reservation *r = res_of(dh, addr);
	struct blk *b = NULL;
	size_t p;

	if (!r)
		return NULL;
	p = page_of(dh, r, addr);
	/* Walk back to the nearest page where a block starts at or below addr; every page a
	 * block spans has a handle, so a page without one ends the search. */
	for (size_t q = p;; q--) {
		if (!r->page_handle[q])
			break;
		if (r->page_first[q] && r->page_first[q]->addr <= addr) {
			b = r->page_first[q];
			break;
		}
		if (q == 0)
			break;
	}
	while (b && b->addr + b->size <= addr)
		b = b->next;
	return b && b->addr <= addr ? b : NULL;
}

static void mapping(size_t size, unsigned *fl, unsigned *sl)
{
	if (size < TLSF_LINEAR_LIMIT) {
		*fl = 0;
		*sl = (unsigned)(size / HEAP_ALIGN);
	} else {
		unsigned f = 63u - (unsigned)__builtin_clzll(size);

		*sl = (unsigned)(size >> (f - TLSF_SL_LOG2)) ^ TLSF_SL_COUNT;
		*fl = f - (TLSF_SL_LOG2 + 8) + 1;
		if (*fl >= TLSF_FL_COUNT) {
			*fl = TLSF_FL_COUNT - 1;
			*sl = TLSF_SL_COUNT - 1;
		}
	}
}

void free_index_insert(struct arena *a, struct blk *b)
{
	unsigned fl, sl;

	mapping(b->size, &fl, &sl);
	b->state = BLK_FREE;
	b->fl = (uint8_t)fl;
	b->sl = (uint8_t)sl;
	b->fprev = NULL;
	b->fnext = a->lists[fl][sl];
	if (b->fnext)
		b->fnext->fprev = b;
	a->lists[fl][sl] = b;
	a->fl_map |= 1ull << fl;
	a->sl_map[fl] |= 1u << sl;
}

void free_index_remove(struct arena *a, struct blk *b)
{
	unsigned fl = b->fl, sl = b->sl;

	if (b->fprev)
		b->fprev->fnext = b->fnext;
	else
		a->lists[fl][sl] = b->fnext;
	if (b->fnext)
		b->fnext->fprev = b->fprev;
	b->fprev = b->fnext = NULL;
	if (!a->lists[fl][sl]) {
		a->sl_map[fl] &= ~(1u << sl);
		if (!a->sl_map[fl])
			a->fl_map &= ~(1ull << fl);
	}
}

static struct blk *find_rounded(struct arena *a, size_t size)
{
	unsigned fl, sl;
	uint32_t sl_bits;
	uint64_t fl_bits;

	/* Round up to the next list boundary so that every block of the list found fits. */
	if (size >= TLSF_LINEAR_LIMIT) {
		unsigned f = 63u - (unsigned)__builtin_clzll(size);

		size += (1ull << (f - TLSF_SL_LOG2)) - 1;
	}
	mapping(size, &fl, &sl);
	sl_bits = sl < 32 ? a->sl_map[fl] & (~0u << sl) : 0;
	if (!sl_bits) {
		fl_bits = fl + 1 < 64 ? a->fl_map & (~0ull << (fl + 1)) : 0;
		if (!fl_bits)
			return NULL;
		fl = (unsigned)__builtin_ctzll(fl_bits);
		sl_bits = a->sl_map[fl];
	}
	sl = (unsigned)__builtin_ctz(sl_bits);
	/* The last list holds every huge block: check the fit there. */
	for (struct blk *b = a->lists[fl][sl]; b; b = b->fnext)
		if (b->size >= size || fl < TLSF_FL_COUNT - 1)
			return b;
	return NULL;
}

/* How many fitting blocks a sub-granule request looks at (low_fit). More found nothing better on
 * the H200 benchmark's recorded trace. */
#define LOW_FIT_SCAN 16

/* For a request smaller than a granule: of the first LOW_FIT_SCAN blocks that hold it and are
 * at most two granules (the holes beside live allocations in partly used granules), the one
 * at the lowest address. Packing small requests low leaves the granules above them to empty out
 * wholly, so that they can move to a large request; a good fit scattered them instead: on the
 * H200 PyTorch benchmark's recorded trace (bench_core --replay) the peak held 17 MiB of such
 * holes above cudaMalloc's, 9 MiB with this. NULL when there is no such block. */
static struct blk *low_fit(struct arena *a, size_t size)
{
	unsigned fl, sl, top_fl, top_sl;
	struct blk *best = NULL;
	int seen = 0;

	mapping(size, &fl, &sl);
	mapping(2 * a->dh->gran, &top_fl, &top_sl);
	for (uint64_t fm = a->fl_map & (~0ull << fl); fm && seen < LOW_FIT_SCAN; fm &= fm - 1) {
		unsigned f = (unsigned)__builtin_ctzll(fm);
		uint32_t sm = a->sl_map[f];

		if (f > top_fl)
			break;
		if (f == fl)
			sm &= ~0u << sl;
		if (f == top_fl)
			sm &= top_sl + 1 < 32 ? (1u << (top_sl + 1)) - 1 : ~0u;
		for (; sm && seen < LOW_FIT_SCAN; sm &= sm - 1)
			for (struct blk *b = a->lists[f][__builtin_ctz(sm)];
			     b && seen < LOW_FIT_SCAN; b = b->fnext) {
				if (b->size < size)
					continue;
				seen++;
				if (!best || b->addr < best->addr)
					best = b;
			}
	}
	return best;
}

struct blk *free_index_find(struct arena *a, size_t size)
{
	struct blk *b, *best = NULL;
	unsigned fl, sl;
	int walked = 0;

	if (size < a->dh->gran && (best = low_fit(a, size)))
		return best;

	/* Best fit within the list that holds `size` itself (a bounded walk): blocks there
	 * differ by less than 1/16, and taking the tightest keeps larger blocks whole. */
	mapping(size, &fl, &sl);
	for (b = a->lists[fl][sl]; b && walked < 16; b = b->fnext, walked++)
		if (b->size >= size && (!best || b->size < best->size))
			best = b;
	if (best)
		return best;
	/* Good fit: the first block of the next non-empty list, O(1). */
	return find_rounded(a, size);
}

struct blk *free_index_scan(struct arena *a, size_t size, size_t align, unsigned scan,
			    blk_accept_fn accept, void *arg)
{
	unsigned fl, sl, seen = 0;

	mapping(size, &fl, &sl);
	for (uint64_t fm = a->fl_map & (~0ull << fl); fm && seen < scan; fm &= fm - 1) {
		unsigned f = (unsigned)__builtin_ctzll(fm);
		uint32_t sm = a->sl_map[f] & (f == fl ? ~0u << sl : ~0u);

		for (; sm && seen < scan; sm &= sm - 1)
			for (struct blk *b = a->lists[f][__builtin_ctz(sm)]; b && seen < scan;
			     b = b->fnext) {
				vmm_devptr start = blk_aligned_start(b, align);

				if (start - b->addr + size > b->size)
					continue;
				seen++;
				if (accept(a, start, size, arg))
					return b;
			}
	}
	return NULL;
}

bool free_index_collect(struct arena *a, struct blk ***out, size_t *n, size_t *cap)
{
	for (uint64_t fm = a->fl_map; fm; fm &= fm - 1) {
		unsigned fl = (unsigned)__builtin_ctzll(fm);

		for (uint32_t sm = a->sl_map[fl]; sm; sm &= sm - 1) {
			for (struct blk *b = a->lists[fl][__builtin_ctz(sm)]; b; b = b->fnext) {
				if (*n == *cap) {
					size_t c = *cap ? *cap * 2 : 64;
					struct blk **nb = realloc(*out, c * sizeof(*nb));

					if (!nb)
						return false;
					*out = nb;
					*cap = c;
				}
				(*out)[(*n)++] = b;
			}
		}
	}
	return true;
}

struct blk *blk_split(struct devheap *dh, struct blk *b, size_t size)
{
	struct blk *t;

	if (b->size - size < HEAP_ALIGN)
		return NULL;
	t = blk_new(dh);
	if (!t)
		return NULL; /* keep the block whole: it merely wastes the tail */
	t->addr = b->addr + size;
	t->size = b->size - size;
	t->arena = b->arena;
	t->prev = b;
	t->next = b->next;
	if (t->next)
		t->next->prev = t;
	b->next = t;
	b->size = size;
	page_first_add(dh, t);
	free_index_insert(b->arena, t);
	return t;
}

static bool mergeable(struct blk *a, struct blk *b)
{
	return a && b && a->state == BLK_FREE && b->state == BLK_FREE && a->arena == b->arena &&
	       a->addr + a->size == b->addr;
}

/* Absorb r (the right neighbour) into l; both are out of the free index. */
static void absorb(struct devheap *dh, struct blk *l, struct blk *r)
{
	page_first_remove(dh, r);
	l->size += r->size;
	l->next = r->next;
	if (l->next)
		l->next->prev = l;
	blk_put(dh, r);
}

void blk_retire(struct devheap *dh, struct blk *b)
{
	b->state = BLK_RETIRED;
	b->alloc = NULL;
	b->slab = NULL;
	b->arena->st.retired_bytes += b->size;
	dh->share_check = true;
}

/* The length of b's first run: the part of it in its first handle when that handle is shared
 * (*shared true), else all of it up to the first shared handle. */
static size_t first_run(struct devheap *dh, const struct blk *b, bool *shared)
{
	vmm_devptr va = b->addr, end = b->addr + b->size;
	bool first = true;

	while (va < end) {
		struct phandle *h = page_handle_get(dh, va);
		bool s = h && h->shared;
		vmm_devptr next = h ? h->va + h->size : (va & ~(vmm_devptr)(dh->gran - 1)) + dh->gran;

		if (first)
			*shared = s;
		else if (s != *shared)
			break;
		first = false;
		va = next < end ? next : end;
		if (s)
			break; /* a retired block stays inside one handle (heap_share.c releases it) */
	}
	return (size_t)(va - b->addr);
}

/* The parts of b (out of the free index, state free) inside shared handles are retired instead
 * of freed: such memory is never handed out again while another process may map it. The parts
 * after b's first run are released on their own. Returns b when its first run is to be freed,
 * NULL when it was retired. */
static struct blk *retire_shared(struct devheap *dh, struct blk *b)
{
	bool shared = false;
	size_t run;
	struct blk *t;

	if (!dh->nshared)
		return b;
	run = first_run(dh, b, &shared);
	if (run < b->size) {
		t = blk_split(dh, b, run);
		if (!t) {
			blk_retire(dh, b); /* no host memory to split: all of it stays out of use */
			return NULL;
		}
		free_index_remove(b->arena, t);
		t->state = BLK_FREE;
		/* t's first run is of the other kind; b must not be merged into it meanwhile. */
		b->state = BLK_RETIRED;
		blk_release(dh, t);
		b->state = BLK_FREE;
	}
	if (shared) {
		blk_retire(dh, b);
		return NULL;
	}
	return b;
}

struct blk *blk_release(struct devheap *dh, struct blk *b)
{
	struct arena *a = b->arena;

	b->state = BLK_FREE;
	b->alloc = NULL;
	b->slab = NULL;
	b = retire_shared(dh, b);
	if (!b)
		return NULL;
	if (mergeable(b->prev, b)) {
		struct blk *l = b->prev;

		free_index_remove(a, l);
		absorb(dh, l, b);
		b = l;
	}
	if (mergeable(b, b->next)) {
		free_index_remove(a, b->next);
		absorb(dh, b, b->next);
	}
	free_index_insert(a, b);
	return b;
}

void arena_add_free_range(struct arena *a, vmm_devptr va, size_t size)
{
	struct devheap *dh = a->dh;
	struct blk *b = blk_new(dh), *l = NULL, *r = NULL;
	struct reservation *res = res_of(dh, va);

	if (!b)
		return; /* cannot happen in practice; the memory stays mapped but unused */
	b->addr = va;
	b->size = size;
	b->arena = a;
	b->state = BLK_USED;
	if (va > res->base)
		l = blk_containing(dh, va - 1);
	if (va + size < res->base + res->size) {
		r = blk_containing(dh, va + size);
		if (r && r->addr != va + size)
			r = NULL;
	}
	b->prev = l;
	b->next = r;
	if (l)
		l->next = b;
	if (r)
		r->prev = b;
	page_first_add(dh, b);
	blk_release(dh, b);
}

void blk_unlink(struct devheap *dh, struct blk *b)
{
	page_first_remove(dh, b);
	if (b->prev && b->prev->next == b)
		b->prev->next = NULL;
	if (b->next && b->next->prev == b)
		b->next->prev = NULL;
	blk_put(dh, b);
}

void arena_take_free_range(struct arena *a, vmm_devptr va, size_t size)
{
	struct devheap *dh = a->dh;
	struct blk *b = blk_containing(dh, va), *mid, *t;

	if (!b || b->state != BLK_FREE || b->addr + b->size < va + size)
		return;
	free_index_remove(a, b);
	mid = b;
	if (b->addr < va) {
		t = blk_split(dh, b, va - b->addr);
		free_index_insert(a, b);
		if (!t)
			return;
		free_index_remove(a, t);
		mid = t;
	}
	if (mid->size > size) {
		t = blk_split(dh, mid, size);
		(void)t; /* the tail is free and indexed */
	}
	/* Unlink mid from the address list: the memory under it goes away. */
	page_first_remove(dh, mid);
	if (mid->prev)
		mid->prev->next = NULL;
	if (mid->next)
		mid->next->prev = NULL;
	blk_put(dh, mid);
}
