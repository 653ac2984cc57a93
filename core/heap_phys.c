/* Physical memory: growing an arena (reusing wholly free handles from anywhere on the device,
 * re-mapped contiguously at the new address, before creating new ones), giving handles back, and
 * the device synchronization that makes quarantined memory reusable. */
#include "heap_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

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

void phys_release(vmm_backend *be, vmm_phys h)
{
	if (be->release(be, h, NULL) && be->release(be, h, NULL))
		vmm_log(VMM_LOG_ERROR, "a physical handle could not be released");
}

void phys_unmap(vmm_backend *be, vmm_devptr va, size_t size)
{
	if (be->unmap(be, va, size, NULL) && be->unmap(be, va, size, NULL))
		vmm_log(VMM_LOG_ERROR, "0x%llx could not be unmapped", (unsigned long long)va);
}

/* Releases spread over threads: cuMemRelease of a 1 GiB handle costs ~0.3 ms on the H200, most
 * of what a discard sleep of many handles costs. CUDA only: an Ascend thread works on the device
 * it set (aclrtSetDevice), and a fresh thread has none. */
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
	if (n >= RELEASE_PARALLEL_MIN && be->name && !strcmp(be->name, "cuda")) {
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

bool handle_wholly_free(struct devheap *dh, struct phandle *h)
{
	struct blk *b;

	if (!h->va || h->asleep)
		return false;
	b = blk_containing(dh, h->va);
	return b && b->state == BLK_FREE && b->addr + b->size >= h->va + h->size;
}

static void handle_unlink(struct devheap *dh, struct phandle *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else
		dh->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
}

static void handle_link(struct devheap *dh, struct phandle *h)
{
	h->prev = NULL;
	h->next = dh->handles;
	if (h->next)
		h->next->prev = h;
	dh->handles = h;
}

/* Take a wholly free, mapped handle out of its arena and unmap it (it stays created). */
static vmm_status handle_detach(struct devheap *dh, struct phandle *h, vmm_error *err)
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

static void handle_destroy(struct devheap *dh, struct phandle *h, struct arena *acct)
{
	vmm_backend *be = dh->core->be;

	phys_release(be, h->h);
	acct->st.handles_released++;
	if (h->backup.ptr && dh->backup_free)
		dh->backup_free(be, &h->backup);
	free(h);
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

uint64_t heap_drop_handles(struct devheap *dh, struct phandle **hs, size_t n)
{
	vmm_backend *be = dh->core->be;
	vmm_phys *ph = calloc(n ? n : 1, sizeof(*ph));
	bool *ok = calloc(n ? n : 1, sizeof(*ok));
	struct arena **acct = malloc((n ? n : 1) * sizeof(*acct));
	uint64_t bytes = 0;
	size_t k = 0;

	if (!ph || !ok || !acct) {
		/* One at a time, then. */
		for (size_t i = 0; i < n; i++) {
			size_t sz = hs[i]->size;

			if (handle_drop(dh, hs[i], NULL) == VMM_OK)
				bytes += sz;
		}
		free(ph);
		free(ok);
		free(acct);
		return bytes;
	}
	for (size_t i = 0; i < n; i++) {
		struct arena *a = hs[i]->arena;

		if (handle_detach(dh, hs[i], NULL))
			continue; /* still mapped and free: it stays in its arena */
		handle_unlink(dh, hs[i]);
		acct[k] = a;
		hs[k] = hs[i];
		ph[k++] = hs[i]->h;
	}
	phys_release_many(be, ph, k, ok, NULL);
	for (size_t i = 0; i < k; i++) {
		if (!ok[i])
			phys_release(be, ph[i]);
		/* A handle the driver would not take back is lost to this heap either way. */
		bytes += hs[i]->size;
		acct[i]->st.handles_released++;
		if (hs[i]->backup.ptr && dh->backup_free)
			dh->backup_free(be, &hs[i]->backup);
		free(hs[i]);
	}
	free(ph);
	free(ok);
	free(acct);
	return bytes;
}

void heap_release_free_handles(struct devheap *dh, size_t keep_bytes)
{
	size_t free_bytes = 0, n = 0, cap = 0;
	struct phandle **hs = NULL;

	for (struct phandle *h = dh->handles; h; h = h->next) {
		if (handle_wholly_free(dh, h)) {
			free_bytes += h->size;
			cap++;
		}
	}
	if (free_bytes <= keep_bytes)
		return;
	hs = malloc(cap * sizeof(*hs));
	for (struct phandle *h = dh->handles, *nx; h && free_bytes > keep_bytes; h = nx) {
		nx = h->next;
		if (!handle_wholly_free(dh, h))
			continue;
		if (hs) {
			hs[n++] = h;
			free_bytes -= h->size;
		} else if (handle_drop(dh, h, NULL) == VMM_OK) {
			free_bytes -= h->size;
		}
	}
	if (hs)
		heap_drop_handles(dh, hs, n);
	free(hs);
}

vmm_status heap_reclaim(struct devheap *dh, struct arena *who, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_status st;

	if (!dh->quar_total)
		return VMM_OK;
	st = be->synchronize(be, dh->dev, err);
	if (st)
		return st;
	if (who)
		who->st.syncs++;
	heap_reclaim_synced(dh);
	return VMM_OK;
}

void heap_reclaim_synced(struct devheap *dh)
{
	for (int i = 0; i < dh->narenas; i++) {
		struct arena *a = dh->arenas[i];

		while (a->quar_head) {
			struct alloc *r = a->quar_head;

			a->quar_head = r->qnext;
			if (a->quar_head)
				a->quar_head->qprev = NULL;
			alloc_finish_free(dh, r);
		}
		a->quar_bytes = 0;
	}
	dh->quar_total = 0;
}

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

/* Collect handles summing to `want` bytes exactly, or at least `want` when `exact` is false:
 * wholly free handles first (largest that fit), then a larger wholly free one rather than new
 * memory, then new ones (see PIECE_MAX). */
static vmm_status plan_fill(struct arena *a, struct grow_plan *p, size_t want, bool exact,
			    struct blk *avoid, vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_backend *be = dh->core->be;
	size_t maxh = dh->core->cfg.max_handle_bytes;
	struct cands c;
	struct phandle *h;
	vmm_status st = VMM_OK;

	if (!cands_collect(dh, avoid, &c))
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
	/* Room only shrinks: one pass over the candidates, largest first. */
	for (size_t i = 0; i < c.n && p->total < want; i++) {
		if (c.h[i]->size > want - p->total)
			continue;
		if (!plan_add(p, c.h[i], false)) {
			st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
			goto out;
		}
		c.used[i] = true;
	}
	/* Rather than create memory while a larger wholly free handle sits idle, map that one:
	 * its tail stays free in the arena, and the device's mapped memory does not grow. */
	if (!exact && p->total < want) {
		size_t room = want - p->total, k = c.n;

		while (k-- > 0)
			if (!c.used[k] && c.h[k]->size >= room)
				break;
		if (k < c.n) {
			if (!plan_add(p, c.h[k], false)) {
				st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory");
				goto out;
			}
			c.used[k] = true;
		}
	}
	while (p->total < want) {
		size_t sz = want - p->total;

		if (sz > maxh)
			sz = maxh;
		if (want < maxh && sz > PIECE_MAX)
			sz = PIECE_MAX;
		h = calloc(1, sizeof(*h));
		if (!h) {
			st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a handle record");
			goto out;
		}
		st = be->create(be, dh->dev, sz, &h->h, err);
		if (st) {
			size_t room = want - p->total, k = c.n;

			free(h);
			if (st != VMM_E_OOM || exact)
				goto out;
			/* The driver is out: the smallest larger cached handle covers the rest. */
			while (k-- > 0)
				if (!c.used[k] && c.h[k]->size > room)
					break;
			if (k >= c.n)
				goto out;
			if (!plan_add(p, c.h[k], false)) {
				st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory");
				goto out;
			}
			c.used[k] = true;
			st = VMM_OK;
			continue;
		}
		h->size = sz;
		a->st.handles_created++;
		if (!plan_add(p, h, true)) {
			phys_release(be, h->h);
			a->st.handles_released++;
			free(h);
			st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a growth plan");
			goto out;
		}
	}
out:
	cands_free(&c);
	return st;
}

/* Map the plan's handles one after another at va, grant access once over the whole range. On
 * failure everything the plan touched is unmapped and released (moved cached handles included:
 * they were free) and the VA is given back. */
static vmm_status plan_map(struct arena *a, struct grow_plan *p, vmm_devptr va, vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_backend *be = dh->core->be;
	vmm_status st = VMM_OK;
	size_t i, off = 0;

	for (i = 0; i < p->n; i++) {
		struct phandle *h = p->hs[i];

		if (!p->fresh[i]) {
			st = handle_detach(dh, h, err);
			if (st)
				break;
			handle_unlink(dh, h);
			p->fresh[i] = true; /* from here on it is ours to map or release */
		}
		st = be->map(be, va + off, h->size, h->h, err);
		if (st)
			break;
		h->va = va + off;
		off += h->size;
	}
	if (!st)
		st = heap_grant_access(dh, va, p->total, err);
	if (st) {
		for (size_t k = 0; k < p->n; k++) {
			struct phandle *h = p->hs[k];

			if (h->va && k < i) {
				phys_unmap(be, h->va, h->size);
				h->va = 0;
			}
		}
		va_free(dh, va, p->total);
		return st;
	}
	for (i = 0; i < p->n; i++) {
		struct phandle *h = p->hs[i];

		h->arena = a;
		h->asleep = false;
		handle_link(dh, h);
		page_handle_set(dh, h->va, h->size, h);
	}
	stats_mapped(a, (int64_t)p->total);
	arena_add_free_range(a, va, p->total);
	a->grow_end = va + p->total;
	return VMM_OK;
}

vmm_status arena_grow(struct arena *a, size_t need, vmm_error *err)
{
	struct devheap *dh = a->dh;
	struct grow_plan p = { 0 };
	struct blk *tail = NULL;
	vmm_devptr va;
	vmm_status st;
	size_t want;

	/* Extend the arena's last growth in place when the VA after it is free: the free tail
	 * block then coalesces with the new memory and the request needs fewer new bytes. */
	if (a->grow_end) {
		tail = blk_containing(dh, a->grow_end - 1);
		if (tail && (tail->state != BLK_FREE || tail->arena != a ||
			     tail->addr + tail->size != a->grow_end || tail->size >= need))
			tail = NULL;
	}
	if (tail) {
		want = align_up(need - tail->size, dh->gran);
		if (va_claim_at(dh, a->grow_end, want)) {
			st = plan_fill(a, &p, want, true, tail, err);
			if (!st) {
				st = plan_map(a, &p, a->grow_end, err);
				if (!st)
					goto done;
			} else {
				va_free(dh, a->grow_end, want);
			}
			plan_abandon(dh, &p, a);
			if (st != VMM_E_OOM)
				return st;
			/* Fall through: a fresh range may use a larger cached handle. */
		}
	}
	want = align_up(need, dh->gran);
	st = plan_fill(a, &p, want, false, NULL, err);
	if (st)
		goto fail;
	st = va_alloc(dh, p.total, &va, err);
	if (st)
		goto fail;
	st = plan_map(a, &p, va, err);
	if (st)
		goto fail;
done:
	free(p.hs);
	free(p.fresh);
	return VMM_OK;
fail:
	plan_abandon(dh, &p, a);
	return st;
}
