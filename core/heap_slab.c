/* Small allocations (heap_slab.h): packed by size class into slabs carved from the arena like any
 * block, so that a 256-byte allocation costs 256 bytes. Classes step by 256 bytes up to 1 KiB,
 * then four per power of two (at most 25% internal waste).
 *
 * A class's first slab is small (SLAB_MIN), and each further one as large as the class's slabs
 * together, up to a granule: the room a class holds empty is bounded by what it uses, plus
 * SLAB_MIN. The driver packs small cudaMallocs of every size into the same 2 MiB pages; one
 * granule per class cost a program 2 MiB for each size it ever used (PyTorch's NO_CACHING
 * training touches a dozen or more: +44 MiB of peak on the H200), and slabs of a few slots
 * also fit into the ends of granules that larger allocations left free. */
#include "heap_slab.h"

#include <stdlib.h>

#define SLAB_MIN (64u << 10)

int size_class(size_t size, size_t small_max)
{
	size_t s = align_up(size ? size : 1, HEAP_ALIGN);
	unsigned p;

	if (s > small_max)
		return -1;
	if (s <= 1024)
		return (int)(s / HEAP_ALIGN) - 1;
	p = 63u - (unsigned)__builtin_clzll(s - 1);
	return 4 + (int)(p - 10) * 4 + (int)((s - (1ull << p) + (1ull << (p - 2)) - 1) >> (p - 2)) - 1;
}

size_t class_size(int cls)
{
	unsigned p;

	if (cls < 4)
		return (size_t)(cls + 1) * HEAP_ALIGN;
	p = 10u + (unsigned)(cls - 4) / 4u;
	return (1ull << p) + (size_t)((cls - 4) % 4 + 1) * (1ull << (p - 2));
}

static void slab_list(struct arena *a, struct slab *s)
{
	if (s->listed || s->frozen)
		return;
	s->prev = NULL;
	s->next = a->partial[s->cls];
	if (s->next)
		s->next->prev = s;
	a->partial[s->cls] = s;
	s->listed = true;
}

static void slab_unlist(struct arena *a, struct slab *s)
{
	if (!s->listed)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		a->partial[s->cls] = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	s->listed = false;
}

void slab_free_struct(struct slab *s)
{
	free(s->free_stack);
	free(s->slots);
	free(s);
}

static void slab_destroy(struct devheap *dh, struct slab *s)
{
	slab_unlist(s->arena, s);
	s->arena->slab_bytes[s->cls] -= s->bytes;
	blk_release(dh, s->blk);
	slab_free_struct(s);
}

/* The smallest slab of a class: SLAB_MIN, or one slot. */
static size_t slab_min(size_t slot)
{
	return slot > SLAB_MIN ? slot : SLAB_MIN;
}

/* The size of the class's next slab (see the top of the file), a whole number of slots. */
static size_t slab_size(const struct arena *a, int cls, size_t slot)
{
	size_t want = a->slab_bytes[cls], gran = a->dh->gran;

	if (want < slab_min(slot))
		want = slab_min(slot);
	if (want > gran)
		want = gran > slot ? gran : slot;
	return want / slot * slot;
}

struct slab *slab_new(struct arena *a, int cls, vmm_error *err)
{
	struct slab *s = calloc(1, sizeof(*s));

	if (!s)
		goto host_oom;
	s->arena = a;
	s->cls = cls;
	s->slot_size = class_size(cls);
	s->bytes = slab_size(a, cls, s->slot_size);
	s->nslots = (uint32_t)(s->bytes / s->slot_size);
	s->free_stack = malloc(s->nslots * sizeof(*s->free_stack));
	s->slots = calloc(s->nslots, sizeof(*s->slots));
	if (!s->free_stack || !s->slots)
		goto host_oom;
	/* Lowest slot on top: allocations fill the slab from its start. */
	for (uint32_t i = 0; i < s->nslots; i++)
		s->free_stack[i] = s->nslots - 1 - i;
	s->free_top = s->nslots;
	return s;
host_oom:
	if (s)
		slab_free_struct(s);
	vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a slab");
	return NULL;
}

void slab_attach(struct slab *s, struct blk *b)
{
	s->blk = b;
	b->state = BLK_SLAB;
	b->slab = s;
	s->arena->slab_bytes[s->cls] += s->bytes;
	slab_list(s->arena, s);
}

void slab_take_slot(struct slab *s, struct alloc *rec)
{
	uint32_t slot = s->free_stack[--s->free_top];

	s->slots[slot] = rec;
	s->nused++;
	if (!s->free_top)
		slab_unlist(s->arena, s);
	rec->base = s->blk->addr + (vmm_devptr)slot * s->slot_size;
	rec->usable = s->slot_size;
	rec->slab = s;
	rec->slot = slot;
	rec->blk = s->blk;
}

void slab_free_slot(struct devheap *dh, struct alloc *rec)
{
	struct slab *s = rec->slab;
	struct arena *a = s->arena;

	s->slots[rec->slot] = NULL;
	s->free_stack[s->free_top++] = rec->slot;
	s->nused--;
	slab_list(a, s);
	/* Keep one empty slab of the smallest size per class as a cushion (a malloc/free loop of
	 * one small tensor then makes no slab each time); give further or larger ones back to the
	 * arena. A frozen one goes as soon as it is empty (its memory in a shared handle is
	 * retired). */
	if (!s->nused && (s->frozen || s->prev || s->next || s->bytes > slab_min(s->slot_size)))
		slab_destroy(dh, s);
}

void slab_freeze(struct devheap *dh, struct slab *s)
{
	slab_unlist(s->arena, s);
	s->frozen = true;
	if (!s->nused)
		slab_destroy(dh, s);
}

void slab_release_empty(struct devheap *dh, struct arena *a)
{
	for (int c = 0; c < NUM_CLASSES; c++) {
		struct slab *s = a->partial[c], *n;

		for (; s; s = n) {
			n = s->next;
			if (!s->nused)
				slab_destroy(dh, s);
		}
	}
}
