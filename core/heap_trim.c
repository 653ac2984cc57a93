/* Idle pieces given back on the core's thread (heap_trim.h).
 *
 * Idleness is seen at each round: a piece wholly free then keeps the time it was first seen so,
 * one not free loses it. A piece used and freed again between two rounds looks idle throughout;
 * rounds follow every sync ahead (several a second in a training loop), so that window is short.
 * Only 2 MiB pieces: a larger free handle moves in one driver call, the cost a trim saves.
 *
 * The lock is held per batch, not per round: the program's allocations wait for one batch at
 * most (~0.6 ms of unmaps and releases). Between batches the program may move, cut or give back
 * any handle, so a batch looks its pieces up again; those stamped idle were moved to the front
 * of the device's list, where the lookup finds them first. */
#include "heap_trim.h"

#include "heap_phys.h"
#include "log.h"
#include "mono_wait.h"

#define TRIM_BATCH 16
#define TRIM_ROUND_MAX 256

static bool trimmable(struct devheap *dh, struct phandle *h)
{
	return h->size == dh->gran && !h->shared && !h->retained && handle_wholly_free(dh, h);
}

/* Stamp every piece; move the idle ones to the list's front. Returns how many are idle. */
static size_t stamp(struct devheap *dh, double now, double idle_s)
{
	struct phandle *idle = NULL, *h, *next;
	size_t n = 0;

	for (h = dh->handles; h; h = next) {
		next = h->next;
		if (!trimmable(dh, h)) {
			h->free_since = 0;
			continue;
		}
		if (!h->free_since)
			h->free_since = now;
		if (now - h->free_since < idle_s)
			continue;
		handle_unlink(dh, h);
		h->next = idle; /* a private chain, linked back below */
		idle = h;
		n++;
	}
	for (h = idle; h; h = next) {
		next = h->next;
		handle_link(dh, h);
	}
	return n;
}

static size_t give_back_batch(struct devheap *dh, double now, double idle_s)
{
	struct phandle *hs[TRIM_BATCH];
	size_t n = 0;

	for (struct phandle *h = dh->handles; h && n < TRIM_BATCH; h = h->next) {
		if (!h->free_since || now - h->free_since < idle_s)
			continue;
		if (trimmable(dh, h))
			hs[n++] = h;
		else
			h->free_since = 0;
	}
	if (!n)
		return 0;
	return (size_t)(heap_drop_handles(dh, hs, n) / dh->gran);
}

size_t trim_round(struct devheap *dh)
{
	double idle_s = dh->core->cfg.idle_trim_s, now = vmm_now_s();
	size_t idle, went = 0, k;

	if (!(idle_s > 0))
		return 0;
	pthread_mutex_lock(&dh->lock);
	idle = stamp(dh, now, idle_s);
	pthread_mutex_unlock(&dh->lock);
	while (went < idle && went < TRIM_ROUND_MAX) {
		pthread_mutex_lock(&dh->lock);
		k = give_back_batch(dh, now, idle_s);
		dh->tally.trimmed += k;
		pthread_mutex_unlock(&dh->lock);
		if (!k)
			break;
		went += k;
	}
	if (went)
		vmm_log(VMM_LOG_DEBUG, "device %d: %zu idle pieces given back (%zu idle for %.3f s)",
			dh->dev, went, idle, idle_s);
	return went;
}
