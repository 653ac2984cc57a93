/* Imports whose unmap was refused (ipc_parked.h): a short list under one lock, held across the
 * retries' driver calls so that two retries never unmap the same range. */
#include "ipc_parked.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../core/log.h"

struct parked {
	int device;
	vmm_devptr va;                  /* still mapped */
	size_t size;
	vmm_phys handles[IPC_IMPORT_MAX_PIECES];
	size_t nhandles;
	vmm_devptr range;               /* given back once unmapped; range_size 0: not ours */
	size_t range_size;
	pid_t exporter;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct parked *list;
static size_t n_parked, cap_parked;

bool ipc_unmap_twice(vmm_backend *be, vmm_devptr va, size_t size)
{
	return !be->unmap(be, va, size, NULL) || !be->unmap(be, va, size, NULL);
}

void ipc_parked_add(int device, vmm_devptr va, size_t size, const vmm_phys *handles, size_t n,
		    vmm_devptr range, size_t range_size, pid_t exporter, const char *what)
{
	struct parked p = { .device = device, .va = va, .size = size, .range = range,
			    .range_size = range_size, .exporter = exporter };
	bool kept = false;

	if (n > IPC_IMPORT_MAX_PIECES)
		n = IPC_IMPORT_MAX_PIECES;
	memcpy(p.handles, handles, n * sizeof(*handles));
	p.nhandles = n;
	pthread_mutex_lock(&lock);
	if (n_parked == cap_parked) {
		size_t cap = cap_parked ? 2 * cap_parked : 4;
		struct parked *v = realloc(list, cap * sizeof(*v));

		if (v) {
			list = v;
			cap_parked = cap;
		}
	}
	if (n_parked < cap_parked) {
		list[n_parked++] = p;
		kept = true;
	}
	pthread_mutex_unlock(&lock);
	if (kept)
		vmm_log(VMM_LOG_ERROR, "%s: memory of pid %d at 0x%llx (%zu bytes) would not unmap; "
			"it stays mapped, its handles unreleased and its range reserved, until a later "
			"open, close, group sleep or wake unmaps it (status: ipc_imported)", what,
			(int)exporter, (unsigned long long)va, size);
	else
		vmm_log(VMM_LOG_ERROR, "%s: memory of pid %d at 0x%llx (%zu bytes) would not unmap, "
			"and no host memory is left to keep it: it stays mapped, unreleased, until the "
			"process exits", what, (int)exporter, (unsigned long long)va, size);
}

/* With lock held: p unmapped, but another parked mapping lies in its range: that one gives the
 * range back later. */
static bool hand_range_over(const struct parked *p)
{
	for (size_t i = 0; i < n_parked; i++) {
		struct parked *q = &list[i];

		if (q != p && !q->range_size && q->va >= p->range && q->va < p->range + p->range_size) {
			q->range = p->range;
			q->range_size = p->range_size;
			return true;
		}
	}
	return false;
}

void ipc_parked_retry(vmm_backend *be)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; be && i < n_parked;) {
		struct parked *p = &list[i];

		if (be->unmap(be, p->va, p->size, NULL)) {
			i++;
			continue;
		}
		for (size_t k = 0; k < p->nhandles; k++)
			if (be->release(be, p->handles[k], NULL))
				vmm_log(VMM_LOG_WARN, "releasing a handle imported from pid %d failed; "
					"its memory stays with the driver until exit", (int)p->exporter);
		if (p->range_size && !hand_range_over(p))
			be->unreserve(be, p->device, p->range, p->range_size, NULL);
		vmm_log(VMM_LOG_INFO, "memory of pid %d at 0x%llx (%zu bytes), which would not "
			"unmap earlier, is unmapped now", (int)p->exporter,
			(unsigned long long)p->va, p->size);
		list[i] = list[--n_parked];
	}
	pthread_mutex_unlock(&lock);
}

bool ipc_parked_adopt_range(vmm_devptr range, size_t size)
{
	bool adopted = false;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_parked && !adopted; i++) {
		struct parked *p = &list[i];

		if (p->va >= range && p->va < range + size && !p->range_size) {
			p->range = range;
			p->range_size = size;
			adopted = true;
		}
	}
	pthread_mutex_unlock(&lock);
	return adopted;
}

uint64_t ipc_parked_bytes(int dev)
{
	uint64_t bytes = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_parked; i++)
		if (list[i].device == dev)
			bytes += list[i].size;
	pthread_mutex_unlock(&lock);
	return bytes;
}

void ipc_parked_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
	free(list);
	list = NULL;
	n_parked = cap_parked = 0;
}
