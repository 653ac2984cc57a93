/* Physical handles of a device (heap_phys.h): their list, moving a wholly free one out of its
 * arena, giving handles back to the driver (several side by side; the ones it refuses are parked
 * and tried again), access grants, and the mapped bytes' accounting. */
#include "heap_phys.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "offload/copy_engine.h"

void stats_mapped(struct arena *a, int64_t delta)
{
	struct devheap *dh = a->dh;

	a->st.mapped_bytes += (uint64_t)delta;
	dh->mapped_total += (uint64_t)delta;
	if (a->st.mapped_bytes > a->st.peak_mapped_bytes)
		a->st.peak_mapped_bytes = a->st.mapped_bytes;
	if (dh->mapped_total > dh->peak_mapped)
		dh->peak_mapped = dh->mapped_total;
}

/* Add p to the parked list (counted in release_pending); false: no host memory for the list. */
static bool park_entry(struct devheap *dh, struct parked_phys p)
{
	if (dh->nparked == dh->cap_parked) {
		size_t cap = dh->cap_parked ? 2 * dh->cap_parked : 4;
		struct parked_phys *n = realloc(dh->parked, cap * sizeof(*n));

		if (!n)
			return false;
		dh->parked = n;
		dh->cap_parked = cap;
	}
	dh->parked[dh->nparked++] = p;
	dh->parked_bytes += p.size;
	return true;
}

/* Keep a handle the driver would not take back, to try again later; logged once, here. */
static void park(struct devheap *dh, vmm_phys h, size_t size, const vmm_error *why)
{
	if (!park_entry(dh, (struct parked_phys){ .h = h, .size = size })) {
		vmm_log(VMM_LOG_ERROR, "device %d: the driver would not take back a handle of %zu "
			"bytes (%s), and no host memory is left to keep it: its memory is held "
			"until the process exits", dh->dev, size, why->msg);
		return;
	}
	vmm_log(VMM_LOG_ERROR, "device %d: the driver would not take back a handle of %zu bytes "
		"(%s); it is kept and released again at the next give-back (status: "
		"release_pending)", dh->dev, size, why->msg);
}

void phys_park_mapped(struct devheap *dh, vmm_phys h, vmm_devptr va, size_t size, bool va_ours,
		      const char *what)
{
	struct parked_phys p = { .h = h, .size = size, .va = va, .va_ours = va_ours };

	if (!park_entry(dh, p)) {
		vmm_log(VMM_LOG_ERROR, "device %d: %s: 0x%llx (%zu bytes) would not unmap, and no "
			"host memory is left to keep its handle: it stays mapped, unreleased, until "
			"the process exits", dh->dev, what, (unsigned long long)va, size);
		return;
	}
	vmm_log(VMM_LOG_ERROR, "device %d: %s: 0x%llx (%zu bytes) would not unmap; its handle is "
		"kept mapped, not released, and unmapped and released again at the next give-back, "
		"wake or teardown (status: release_pending)", dh->dev, what,
		(unsigned long long)va, size);
}

/* A release of h failed once already: one more try, then park it. */
static void release_again_or_park(struct devheap *dh, vmm_phys h, size_t size)
{
	vmm_backend *be = dh->core->be;
	vmm_error e;

	vmm_error_clear(&e);
	if (be->release(be, h, &e))
		park(dh, h, size, &e);
}

void phys_release(struct devheap *dh, vmm_phys h, size_t size)
{
	vmm_backend *be = dh->core->be;

	if (be->release(be, h, NULL))
		release_again_or_park(dh, h, size);
}

/* Copies of a failed transfer may still run (copy_engine.h): what is parked mapped stays so. */
static bool copies_may_run(struct devheap *dh)
{
	return dh->ce && vmm_copy_engine_unsettled(dh->ce) && !vmm_copy_engine_settle(dh->ce);
}

uint64_t phys_retry_parked(struct devheap *dh)
{
	vmm_backend *be = dh->core->be;
	uint64_t went = 0;
	bool keep_mapped = dh->nparked && copies_may_run(dh);

	for (size_t i = 0; i < dh->nparked;) {
		struct parked_phys *p = &dh->parked[i];

		/* A handle still mapped is unmapped first: never released under its mapping. */
		if (p->va && (keep_mapped || be->unmap(be, p->va, p->size, NULL))) {
			i++;
			continue;
		}
		if (p->va) {
			vmm_log(VMM_LOG_INFO, "device %d: 0x%llx (%zu bytes), which would not unmap "
				"earlier, is unmapped now", dh->dev, (unsigned long long)p->va,
				p->size);
			if (p->va_ours)
				va_free(dh, p->va, p->size);
			p->va = 0;
		}
		if (be->release(be, p->h, NULL)) {
			i++;
			continue;
		}
		vmm_log(VMM_LOG_INFO, "device %d: a handle of %zu bytes the driver had refused "
			"is released now", dh->dev, p->size);
		dh->parked_bytes -= p->size;
		went += p->size;
		*p = dh->parked[--dh->nparked];
	}
	return went;
}

bool phys_unmap(vmm_backend *be, vmm_devptr va, size_t size)
{
	return !be->unmap(be, va, size, NULL) || !be->unmap(be, va, size, NULL);
}

bool phys_unmap_release(struct devheap *dh, vmm_phys h, vmm_devptr va, size_t size, bool va_ours,
			const char *what)
{
	if (!phys_unmap(dh->core->be, va, size)) {
		phys_park_mapped(dh, h, va, size, va_ours, what);
		return false;
	}
	phys_release(dh, h, size);
	return true;
}

/* Releases spread over threads where the backend says it pays (be->parallel_release): cuMemRelease
 * of a 1 GiB handle costs ~0.3 ms on the H200, most of what a discard sleep of many handles costs.
 * Not Ascend: a thread works on the device it set (aclrtSetDevice), and a fresh thread has none. */
#define RELEASE_THREADS 4
#define RELEASE_PARALLEL_MIN 4

struct release_job {
	vmm_backend *be;
	const vmm_phys *hs;
	bool *ok;
	size_t n;
	_Atomic size_t next;
	pthread_mutex_t lock;
	vmm_status first;
	vmm_error *err;
};

static void *release_worker(void *arg)
{
	struct release_job *j = arg;
	size_t i;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
		vmm_error e;
		vmm_status st = j->be->release(j->be, j->hs[i], &e);

		j->ok[i] = st == VMM_OK;
		if (st) {
			pthread_mutex_lock(&j->lock);
			if (!j->first) {
				j->first = st;
				if (j->err)
					*j->err = e;
			}
			pthread_mutex_unlock(&j->lock);
		}
	}
	return NULL;
}

vmm_status phys_release_many(vmm_backend *be, const vmm_phys *hs, size_t n, bool *ok,
			     vmm_error *err)
{
	struct release_job j = { .be = be, .hs = hs, .ok = ok, .n = n, .err = err };
	pthread_t t[RELEASE_THREADS - 1];
	int nt = 0;

	pthread_mutex_init(&j.lock, NULL);
	if (n >= RELEASE_PARALLEL_MIN && be->parallel_release) {
		size_t want = n / 2 < RELEASE_THREADS - 1 ? n / 2 : RELEASE_THREADS - 1;

		/* A thread that cannot start leaves its share to the others. */
		while ((size_t)nt < want && !pthread_create(&t[nt], NULL, release_worker, &j))
			nt++;
	}
	release_worker(&j);
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&j.lock);
	return j.first;
}

vmm_status heap_grant_access(struct devheap *dh, vmm_devptr va, size_t size, vmm_error *err)
{
	vmm_backend *be = dh->core->be;

	return be->set_access(be, dh->dev, va, size, dh->peers, dh->npeers, err);
}

/* Re-grant access on every mapped run of the device (contiguous handles in one call). */
vmm_status heap_regrant_all(struct devheap *dh, vmm_error *err)
{
	size_t n = atomic_load(&dh->nres);

	for (size_t k = 0; k < n; k++) {
		struct reservation *r = &dh->res[k];

		for (size_t p = 0; p < r->npages;) {
			struct phandle *h = r->page_handle[p];
			vmm_devptr start;
			size_t len = 0;
			vmm_status st;

			if (!h || h->asleep) {
				p++;
				continue;
			}
			start = r->base + p * dh->gran;
			while (p < r->npages && r->page_handle[p] && !r->page_handle[p]->asleep) {
				len += dh->gran;
				p++;
			}
			st = heap_grant_access(dh, start, len, err);
			if (st)
				return st;
		}
	}
	return VMM_OK;
}

bool handle_wholly_free(struct devheap *dh, struct phandle *h)
{
	struct blk *b;

	if (!h->va || h->asleep)
		return false;
	b = blk_containing(dh, h->va);
	return b && b->state == BLK_FREE && b->addr + b->size >= h->va + h->size;
}

void handle_unlink(struct devheap *dh, struct phandle *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else
		dh->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
}

void handle_link(struct devheap *dh, struct phandle *h)
{
	h->prev = NULL;
	h->next = dh->handles;
	if (h->next)
		h->next->prev = h;
	dh->handles = h;
}

/* Take a wholly free, mapped handle out of its arena and unmap it (it stays created). */
vmm_status handle_detach(struct devheap *dh, struct phandle *h, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_status st;

	arena_take_free_range(h->arena, h->va, h->size);
	st = be->unmap(be, h->va, h->size, err);
	if (st) {
		arena_add_free_range(h->arena, h->va, h->size);
		return st;
	}
	page_handle_set(dh, h->va, h->size, NULL);
	va_free(dh, h->va, h->size);
	stats_mapped(h->arena, -(int64_t)h->size);
	h->va = 0;
	return VMM_OK;
}

void heap_backup_put(struct devheap *dh, vmm_host_buf *backup)
{
	if (backup->ptr && dh->backup_put)
		dh->backup_put(dh->backups, backup);
}

void handle_forget(struct devheap *dh, struct phandle *h, struct arena *acct)
{
	acct->st.handles_released++;
	heap_backup_put(dh, &h->backup);
	free(h);
}

void handle_destroy(struct devheap *dh, struct phandle *h, struct arena *acct)
{
	phys_release(dh, h->h, h->size);
	handle_forget(dh, h, acct);
}

vmm_status handle_drop(struct devheap *dh, struct phandle *h, vmm_error *err)
{
	struct arena *a = h->arena;
	vmm_status st = handle_detach(dh, h, err);

	if (st)
		return st;
	handle_unlink(dh, h);
	handle_destroy(dh, h, a);
	return VMM_OK;
}

/* Detach hs[0..n) for dropping (unmapped, out of the device's list): a handle that will not unmap
 * stays mapped and free in its arena. The detached ones move to the front of hs, their driver
 * handles to ph and their arenas to acct; returns how many. */
static size_t detach_for_drop(struct devheap *dh, struct phandle **hs, size_t n, vmm_phys *ph,
			      struct arena **acct)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		struct arena *a = hs[i]->arena;

		if (handle_detach(dh, hs[i], NULL))
			continue;
		handle_unlink(dh, hs[i]);
		acct[k] = a;
		hs[k] = hs[i];
		ph[k++] = hs[i]->h;
	}
	return k;
}

uint64_t heap_drop_handles(struct devheap *dh, struct phandle **hs, size_t n)
{
	vmm_backend *be = dh->core->be;
	vmm_phys *ph = calloc(n ? n : 1, sizeof(*ph));
	bool *ok = calloc(n ? n : 1, sizeof(*ok));
	struct arena **acct = malloc((n ? n : 1) * sizeof(*acct));
	uint64_t bytes = 0;
	size_t k;

	if (!ph || !ok || !acct) {
		/* One at a time, then. */
		for (size_t i = 0; i < n; i++) {
			size_t sz = hs[i]->size;

			if (handle_drop(dh, hs[i], NULL) == VMM_OK)
				bytes += sz;
		}
		goto out;
	}
	k = detach_for_drop(dh, hs, n, ph, acct);
	phys_release_many(be, ph, k, ok, NULL);
	for (size_t i = 0; i < k; i++) {
		if (!ok[i])
			release_again_or_park(dh, ph[i], hs[i]->size);
		/* A handle the driver would not take back is parked: no longer this heap's. */
		bytes += hs[i]->size;
		acct[i]->st.handles_released++;
		heap_backup_put(dh, &hs[i]->backup);
		free(hs[i]);
	}
out:
	free(ph);
	free(ok);
	free(acct);
	return bytes;
}

void phys_teardown(struct devheap *dh)
{
	phys_retry_parked(dh);
	for (struct phandle *h = dh->handles, *n; h; h = n) {
		n = h->next;
		if (h->va && !h->asleep)
			phys_unmap_release(dh, h->h, h->va, h->size, false, "teardown");
		else if (!h->asleep)
			phys_release(dh, h->h, h->size);
		heap_backup_put(dh, &h->backup);
		free(h);
	}
	dh->handles = NULL;
	/* The last chance: what the driver still refuses is its to free at the process's exit. */
	phys_retry_parked(dh);
	if (dh->nparked)
		vmm_log(VMM_LOG_ERROR, "device %d: %zu handle(s), %llu bytes, the driver would not "
			"unmap or take back are left to it", dh->dev, dh->nparked,
			(unsigned long long)dh->parked_bytes);
	free(dh->parked);
	dh->parked = NULL;
	dh->nparked = dh->cap_parked = 0;
	dh->parked_bytes = 0;
}
