/* Virtual address space of a device (heap_va.h): reservations (one at first use, sized from the
 * device's memory; more when it runs out) and the unclaimed extents in each, first fit. */
#include "heap_va.h"

#include <stdlib.h>
#include <string.h>

#include "sorted_search.h"

static bool extents_reserve(struct reservation *r)
{
	struct va_extent *n;
	size_t cap;

	if (r->nfree < r->cap_free)
		return true;
	cap = r->cap_free ? r->cap_free * 2 : 16;
	n = realloc(r->free, cap * sizeof(*n));
	if (!n)
		return false;
	r->free = n;
	r->cap_free = cap;
	return true;
}

struct reservation *res_of(struct devheap *dh, vmm_devptr va)
{
	size_t n = atomic_load_explicit(&dh->nres, memory_order_acquire);

	for (size_t i = 0; i < n; i++)
		if (va >= dh->res[i].base && va - dh->res[i].base < dh->res[i].size)
			return &dh->res[i];
	return NULL;
}

static void res_tables_free(struct reservation *r)
{
	free(r->page_first);
	free(r->page_handle);
	free(r->free);
	memset(r, 0, sizeof(*r));
}

/* The page tables and the extent list of a reservation of `size` bytes, before it is made. */
static vmm_status res_tables_alloc(struct devheap *dh, struct reservation *r, size_t size,
				   vmm_error *err)
{
	memset(r, 0, sizeof(*r));
	r->npages = size / dh->gran;
	r->page_first = calloc(r->npages, sizeof(*r->page_first));
	r->page_handle = calloc(r->npages, sizeof(*r->page_handle));
	if (!r->page_first || !r->page_handle || !extents_reserve(r)) {
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a %zu-page table", r->npages);
		res_tables_free(r);
		return VMM_E_HOST_OOM;
	}
	return VMM_OK;
}

/* Reserve `*want` bytes; address space can be budgeted (Ascend, or a VA limit): settle for less,
 * halving, as long as `need` fits. */
static vmm_status reserve_shrinking(struct devheap *dh, size_t *want, size_t need, vmm_devptr *va,
				    vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_status st = be->reserve(be, dh->dev, *want, dh->gran, va, err);

	while (st && st != VMM_E_INVALID && *want / 2 >= need && *want / 2 >= dh->gran) {
		*want = align_up(*want / 2, dh->gran);
		st = be->reserve(be, dh->dev, *want, dh->gran, va, err);
	}
	return st;
}

static vmm_status add_reservation(struct devheap *dh, size_t want, size_t need, vmm_error *err)
{
	size_t n = atomic_load(&dh->nres);
	struct reservation *r;
	vmm_devptr va;
	vmm_status st;

	if (n == MAX_RESERVATIONS)
		return vmm_fail(err, VMM_E_OOM, 0, "device %d: address space exhausted (%d reservations)",
				dh->dev, MAX_RESERVATIONS);
	want = align_up(want, dh->gran);
	r = &dh->res[n];
	st = res_tables_alloc(dh, r, want, err);
	if (st)
		return st;
	st = reserve_shrinking(dh, &want, need, &va, err);
	if (st) {
		res_tables_free(r);
		return st;
	}
	r->npages = want / dh->gran;
	r->base = va;
	r->size = want;
	r->free[0].va = va;
	r->free[0].size = want;
	r->nfree = 1;
	atomic_store_explicit(&dh->nres, n + 1, memory_order_release);
	return VMM_OK;
}

static void take_extent(struct reservation *r, size_t i, vmm_devptr va, size_t size)
{
	struct va_extent *e = &r->free[i];
	vmm_devptr end = e->va + e->size;

	if (va == e->va) {
		e->va += size;
		e->size -= size;
		if (!e->size) {
			memmove(e, e + 1, (r->nfree - i - 1) * sizeof(*e));
			r->nfree--;
		}
		return;
	}
	/* In the middle: the extent splits in two (room was made by the caller). */
	e->size = va - e->va;
	if (va + size < end) {
		memmove(e + 2, e + 1, (r->nfree - i - 1) * sizeof(*e));
		e[1].va = va + size;
		e[1].size = end - (va + size);
		r->nfree++;
	}
}

vmm_status va_alloc(struct devheap *dh, size_t size, vmm_devptr *va, vmm_error *err)
{
	size_t n = atomic_load(&dh->nres);
	vmm_status st;

	for (size_t k = 0; k < n; k++) {
		struct reservation *r = &dh->res[k];

		for (size_t i = 0; i < r->nfree; i++) {
			if (r->free[i].size >= size) {
				*va = r->free[i].va;
				take_extent(r, i, *va, size);
				return VMM_OK;
			}
		}
	}
	st = add_reservation(dh, size > dh->core->cfg.reserve_bytes ? size :
				 dh->core->cfg.reserve_bytes, size, err);
	if (st)
		return st;
	return va_alloc(dh, size, va, err);
}

bool va_claim_at(struct devheap *dh, vmm_devptr va, size_t size)
{
	struct reservation *r = res_of(dh, va);

	if (!r || !extents_reserve(r))
		return false;
	for (size_t i = 0; i < r->nfree; i++) {
		struct va_extent *e = &r->free[i];

		if (va >= e->va && va + size <= e->va + e->size) {
			take_extent(r, i, va, size);
			return true;
		}
		if (e->va > va)
			break;
	}
	return false;
}

size_t va_room_at(struct devheap *dh, vmm_devptr va)
{
	struct reservation *r = res_of(dh, va);
	size_t lo;

	if (!r)
		return 0;
	/* The extents are in address order: binary search for one that starts at va. */
	lo = VMM_SORTED_LOWER_BOUND(r->free, r->nfree, va, va);
	return lo < r->nfree && r->free[lo].va == va ? r->free[lo].size : 0;
}

void va_free(struct devheap *dh, vmm_devptr va, size_t size)
{
	struct reservation *r = res_of(dh, va);
	size_t i = 0;

	if (!r)
		return;
	while (i < r->nfree && r->free[i].va < va)
		i++;
	/* Coalesce with the extent before and after. */
	if (i > 0 && r->free[i - 1].va + r->free[i - 1].size == va) {
		r->free[i - 1].size += size;
		if (i < r->nfree && va + size == r->free[i].va) {
			r->free[i - 1].size += r->free[i].size;
			memmove(&r->free[i], &r->free[i + 1], (r->nfree - i - 1) * sizeof(*r->free));
			r->nfree--;
		}
		return;
	}
	if (i < r->nfree && va + size == r->free[i].va) {
		r->free[i].va = va;
		r->free[i].size += size;
		return;
	}
	if (!extents_reserve(r))
		return; /* the range is lost to reuse, never to correctness */
	memmove(&r->free[i + 1], &r->free[i], (r->nfree - i) * sizeof(*r->free));
	r->free[i].va = va;
	r->free[i].size = size;
	r->nfree++;
}

void va_release_all(struct devheap *dh)
{
	vmm_backend *be = dh->core->be;
	size_t n = atomic_load(&dh->nres);

	for (size_t k = 0; k < n; k++) {
		struct reservation *r = &dh->res[k];

		be->unreserve(be, dh->dev, r->base, r->size, NULL);
		free(r->page_first);
		free(r->page_handle);
		free(r->free);
	}
	atomic_store(&dh->nres, 0);
}
