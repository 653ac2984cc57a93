/* Refilling ahead (heap_refill.h).
 *
 * A queue per device of ranges to make as 2 MiB pieces, and one thread of the core that makes
 * them. A queued range is free memory to the fit already, with its pages marked in the page
 * index (dh->refill_mark) and no memory under it. The thread takes a range from the queue,
 * creates, maps and grants its pieces without the heap's lock (the range is claimed address
 * space that no one else maps), says it is made, then records the pieces as the range's
 * handles under the heap's lock. The program's thread waits for it only for the one range
 * being made (~31 pieces, about 2 ms on the H200), in refill_claim and refill_settle, and then
 * records that range itself, so it never needs the thread to take the heap's lock it holds.
 * A request placed on a queued range makes its granules there and then (refill_claim); a
 * settle drops the queue: what the program needs instead, its growth makes. */
#include "heap_refill.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap_blocks.h"
#include "heap_phys.h"
#include "heap_va.h"
#include "lib_thread.h"
#include "log.h"
#include "mono_wait.h"

/* Ranges queued per device. A request cuts one handle, and leaves at most two ranges; more than
 * this waiting means the program cuts faster than the thread makes, and the heap makes them on
 * the program's thread, as without refills. */
#define QUEUE_MAX 64
/* How long the program's thread waits for the piece in hand (cfg.refill_wait_ms, 0 = this):
 * ~0.1 ms on the H200, so seconds mean a driver that has stopped answering. */
#define SETTLE_WAIT_MS 2000
#define STOP_WAIT_MS 5000

struct refill_job {
	struct arena *a;
	vmm_devptr va;
	size_t size;
	int peers[VMM_MAX_DEVICES]; /* the device's peers when queued: its grant's */
	int npeers;
};

/* A range being made: its pieces, the first `made` created, mapped and granted. */
struct refill_work {
	struct refill_job job;
	vmm_phys *ph;
	size_t made;
	bool ungranted;         /* ph[made] is mapped but its grant failed: commit gives it back */
	/* The program's thread wants the range (a settle, or a request placed on it): stop after
	 * the piece in hand. */
	atomic_bool stop;
};

enum { REFILL_IDLE, REFILL_MAKING, REFILL_MADE };

struct refill_dev {
	struct refill_job q[QUEUE_MAX];
	int n;
	struct refill_work cur; /* the thread's, while state is not REFILL_IDLE */
	int state;
	/* cur was waited for past the deadline and left the free memory: what the thread made
	 * of it is released when it returns. */
	bool abandoned;
};

struct refill {
	struct vmm_worker w;    /* its lock taken after a devheap's lock, never before; posted: a
				 * range was queued, or stop */
	pthread_cond_t made;    /* a range left REFILL_MAKING */
	unsigned pending;       /* bit d: device d has ranges queued */
	struct refill_dev dev[VMM_MAX_DEVICES];
};

/* How long the thread waits at first for the program to leave the heap, doubling to the cap
 * while it stays: a program's heap call is microseconds, but one that synchronizes the device
 * holds the lock for as long as the device's work (polled every 20 µs, 50 000 wake-ups a
 * second). */
#define GIVE_WAY_US 20
#define GIVE_WAY_MAX_US 1000

/* Before each piece the core's thread makes: give way while the program's thread is inside the
 * heap (its lock held), since the driver serializes per-handle work and a piece made now would
 * hold up the program's own calls (a gather's ~1700 give-backs would wait behind as many
 * pieces), unless the program stopped the range. On the program's own thread (refill_claim)
 * there is nothing to give way to. Without it, bench_core's real-time replay had the program
 * longer in the heap with refills than without (docs/design.md). */
static void give_way(struct devheap *dh, struct refill_work *w)
{
	long us = GIVE_WAY_US;

	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		if (!pthread_mutex_trylock(&dh->lock)) {
			pthread_mutex_unlock(&dh->lock);
			return;
		}
		nanosleep(&(struct timespec){ 0, us * 1000 }, NULL);
		us = us * 2 < GIVE_WAY_MAX_US ? us * 2 : GIVE_WAY_MAX_US;
	}
}

/* Make w's pieces (no lock needed: the range is claimed address space that only w maps), one
 * at a time: created, mapped, granted. Piece by piece, not one grant over the range, so that
 * no call of this thread holds the driver long (a grant of 31 pieces is ~1 ms) and a stop
 * leaves whole pieces. Where the driver refuses (out of memory, say), or a settle asks it to
 * stop, the rest is not made. polite: the core's thread, which gives way to the program. */
static void make(struct devheap *dh, struct refill_work *w, bool polite)
{
	vmm_backend *be = dh->core->be;
	size_t gran = dh->gran, n = w->job.size / gran;
	int dev = dh->dev;

	w->made = 0;
	w->ungranted = false;
	w->ph = calloc(n ? n : 1, sizeof(*w->ph));
	if (!w->ph)
		return;
	for (size_t i = 0; i < n; i++) {
		vmm_devptr va = w->job.va + i * gran;

		if (polite)
			give_way(dh, w);
		if (atomic_load_explicit(&w->stop, memory_order_relaxed))
			break;
		if (be->create(be, dev, gran, &w->ph[i], NULL))
			break;
		if (be->map(be, va, gran, w->ph[i], NULL)) {
			be->release(be, w->ph[i], NULL);
			break;
		}
		if (be->set_access(be, dev, va, gran, w->job.peers, w->job.npeers, NULL)) {
			w->ungranted = true; /* unmapped and released under the heap's lock */
			break;
		}
		w->made++;
	}
}

/* [va, va+size) of a queued range leaves the arena's free memory: nothing backs it. */
static void withdraw(struct devheap *dh, struct arena *a, vmm_devptr va, size_t size)
{
	arena_take_free_range(a, va, size);
	page_handle_set(dh, va, size, NULL);
	va_free(dh, va, size);
}

/* The pieces w holds mapped: those made, and one whose grant failed. */
static size_t in_hand(const struct refill_work *w)
{
	return w->made + (w->ungranted ? 1 : 0);
}

/* w's pieces back its range, which is free memory of the arena already (dh's lock held); what
 * was not made goes back to the front of requeue's queue (NULL, or a full queue: it leaves the
 * free memory). Returns the bytes that left the free memory: where not 0, free blocks were
 * split or dropped, and a block found before is no longer to be trusted. */
static size_t commit(struct devheap *dh, struct refill_work *w, struct refill_dev *requeue)
{
	struct arena *a = w->job.a;
	vmm_devptr va = w->job.va;
	size_t gran = dh->gran, added = 0, left = 0, i;

	for (i = 0; i < w->made; i++) {
		struct phandle *h = calloc(1, sizeof(*h));

		if (!h)
			break;
		h->h = w->ph[i];
		h->size = gran;
		h->va = va + i * gran;
		h->arena = a;
		handle_link(dh, h);
		page_handle_set(dh, h->va, gran, h);
		a->st.handles_created++;
		added += gran;
	}
	if (added)
		stats_mapped(a, (int64_t)added);
	/* Mapped but not usable (no host memory for its record, or the grant failed): given
	 * back, and the rest of the range begins after it. */
	for (w->made = in_hand(w); i < w->made; i++) {
		vmm_devptr at = va + i * gran;

		arena_take_free_range(a, at, gran);
		page_handle_set(dh, at, gran, NULL);
		if (phys_unmap_release(dh, w->ph[i], at, gran, true, "a refill not usable"))
			va_free(dh, at, gran);
		left += gran;
	}
	w->ungranted = false;
	if (w->made * gran < w->job.size) {
		struct refill_job rest = w->job;

		rest.va = va + w->made * gran;
		rest.size = w->job.size - w->made * gran;
		if (requeue && requeue->n < QUEUE_MAX) {
			memmove(requeue->q + 1, requeue->q, (size_t)requeue->n * sizeof(*requeue->q));
			requeue->q[0] = rest;
			requeue->n++;
		} else {
			withdraw(dh, a, rest.va, rest.size);
			left += rest.size;
		}
	}
	free(w->ph);
	w->ph = NULL;
	w->made = 0;
	return left;
}

/* The thread's range, abandoned (out of the free memory already): what it made goes back, and
 * then the address space (dh's lock held). */
static void drop_abandoned(struct devheap *dh, struct refill_dev *d)
{
	struct refill_work *w = &d->cur;
	bool all = true;

	for (size_t i = 0; i < in_hand(w); i++)
		all &= phys_unmap_release(dh, w->ph[i], w->job.va + i * dh->gran, dh->gran, true,
					  "a refill abandoned");
	if (all)
		va_free(dh, w->job.va, w->job.size);
	free(w->ph);
	w->ph = NULL;
	w->made = 0;
	w->ungranted = false;
	d->abandoned = false;
	d->state = REFILL_IDLE;
}

/* The thread's range is made: it backs its free memory (dh's lock and rf's held); what it did
 * not make is queued again (requeue) or dropped. Returns the bytes that left the free memory
 * (commit). */
static size_t finish_made(struct devheap *dh, struct refill_dev *d, bool requeue)
{
	size_t left;

	if (d->abandoned) {
		drop_abandoned(dh, d); /* out of the free memory since it was abandoned */
		return 0;
	}
	dh->tally.refilled += d->cur.made;
	left = commit(dh, &d->cur, requeue ? d : NULL);
	d->state = REFILL_IDLE;
	return left;
}

static bool overlaps(const struct refill_job *j, vmm_devptr lo, vmm_devptr hi)
{
	return j->va < hi && lo < j->va + j->size;
}

static void *refill_main(void *arg)
{
	struct vmm_core *core = arg;
	struct refill *rf = core->refill;

	pthread_mutex_lock(&rf->w.lock);
	for (;;) {
		struct refill_dev *d;
		struct devheap *dh;
		int dev;

		while (!rf->pending && !rf->w.stop)
			pthread_cond_wait(&rf->w.posted, &rf->w.lock);
		if (rf->w.stop)
			break;
		dev = __builtin_ctz(rf->pending);
		d = &rf->dev[dev];
		if (!d->n || d->state != REFILL_IDLE) {
			rf->pending &= ~(1u << dev);
			continue;
		}
		d->cur.job = d->q[0];
		atomic_store_explicit(&d->cur.stop, false, memory_order_relaxed);
		memmove(d->q, d->q + 1, (size_t)--d->n * sizeof(*d->q));
		if (!d->n)
			rf->pending &= ~(1u << dev);
		d->state = REFILL_MAKING;
		pthread_mutex_unlock(&rf->w.lock);
		make(atomic_load_explicit(&core->heaps[dev], memory_order_acquire), &d->cur, true);
		pthread_mutex_lock(&rf->w.lock);
		d->state = REFILL_MADE;
		pthread_cond_broadcast(&rf->made);
		pthread_mutex_unlock(&rf->w.lock);
		/* The heap's lock before the refill lock: a program's thread in refill_settle may
		 * have added the range meanwhile. */
		dh = atomic_load_explicit(&core->heaps[dev], memory_order_acquire);
		pthread_mutex_lock(&dh->lock);
		pthread_mutex_lock(&rf->w.lock);
		if (d->state == REFILL_MADE)
			finish_made(dh, d, false);
		pthread_mutex_unlock(&dh->lock);
	}
	vmm_worker_exiting(&rf->w);
	pthread_mutex_unlock(&rf->w.lock);
	return NULL;
}

/* The refill thread, started at the first range queued (a devheap's lock held; the core's
 * init_lock serializes devices). NULL when it cannot be had: the heap then makes every piece on
 * the program's thread. */
static struct refill *refill_get(struct vmm_core *core)
{
	struct refill *rf = atomic_load_explicit(&core->refill, memory_order_acquire);

	if (rf)
		return rf;
	pthread_mutex_lock(&core->init_lock);
	rf = core->refill;
	if (rf || core->refill_failed) {
		pthread_mutex_unlock(&core->init_lock);
		return rf;
	}
	rf = calloc(1, sizeof(*rf));
	if (rf) {
		vmm_cond_init_monotonic(&rf->made);
		/* Before the thread, which reads it. */
		atomic_store_explicit(&core->refill, rf, memory_order_release);
		if (!vmm_worker_start(&rf->w, refill_main, core, "vmmshim-refill")) {
			core->refill = NULL;
			pthread_cond_destroy(&rf->made);
			free(rf);
			rf = NULL;
		}
	}
	if (!rf) {
		core->refill_failed = true;
		vmm_log(VMM_LOG_WARN, "no thread to refill ahead: the heap makes every piece on the "
			"program's thread");
	}
	pthread_mutex_unlock(&core->init_lock);
	return rf;
}

bool refill_defer(struct arena *a, vmm_devptr va, size_t size)
{
	struct devheap *dh = a->dh;
	struct refill *rf;
	struct refill_dev *d;
	bool queued = false;

	if (!dh->core->cfg.refill_ahead || !size || vmm_capture_active())
		return false;
	rf = refill_get(dh->core);
	if (!rf)
		return false;
	pthread_mutex_lock(&rf->w.lock);
	d = &rf->dev[dh->dev];
	if (d->n < QUEUE_MAX && !rf->w.stop) {
		struct refill_job *j = &d->q[d->n++];

		j->a = a;
		j->va = va;
		j->size = size;
		j->npeers = dh->npeers;
		memcpy(j->peers, dh->peers, sizeof(j->peers));
		rf->pending |= 1u << dh->dev;
		pthread_cond_signal(&rf->w.posted);
		queued = true;
	}
	pthread_mutex_unlock(&rf->w.lock);
	/* Free memory for the fit from now on, as if made: a request placed on it makes it first
	 * (refill_claim), so the heap's layout is the one it would have without refills. */
	if (queued) {
		/* Every page of a block has a handle in the page index (blk_containing walks
		 * them): a mark until the pieces are made, asleep so that nothing takes it for
		 * memory. */
		page_handle_set(dh, va, size, &dh->refill_mark);
		arena_add_free_range(a, va, size);
	}
	return queued;
}

static int settle_wait_ms(const struct devheap *dh)
{
	return dh->core->cfg.refill_wait_ms ? (int)dh->core->cfg.refill_wait_ms : SETTLE_WAIT_MS;
}

/* Stop the range being made after its piece in hand, wait for that (settle_wait_ms at most),
 * and back what was made (rf's lock held, with dh's); the rest is queued again (requeue) or
 * dropped. Past the deadline the range leaves the free memory instead, so that no request is
 * placed on it unmade; the thread releases what it made when the driver lets it go. Returns
 * the bytes that left the free memory (a piece whose grant failed, a range abandoned). */
static size_t stop_made(struct refill *rf, struct devheap *dh, struct refill_dev *d, bool requeue)
{
	struct timespec deadline;

	if (d->state == REFILL_MAKING)
		atomic_store_explicit(&d->cur.stop, true, memory_order_relaxed);
	if (d->state == REFILL_MAKING && !d->abandoned) {
		vmm_deadline_ms(&deadline, settle_wait_ms(dh));
		while (d->state == REFILL_MAKING)
			if (pthread_cond_timedwait(&rf->made, &rf->w.lock, &deadline))
				break;
	}
	if (d->state == REFILL_MADE)
		return finish_made(dh, d, requeue);
	if (d->state == REFILL_MAKING && !d->abandoned) {
		vmm_log(VMM_LOG_WARN, "device %d: a refill of %zu bytes still in the driver after "
			"%d ms: its range is left out of the free memory", dh->dev, d->cur.job.size,
			settle_wait_ms(dh));
		arena_take_free_range(d->cur.job.a, d->cur.job.va, d->cur.job.size);
		page_handle_set(dh, d->cur.job.va, d->cur.job.size, NULL);
		d->abandoned = true;
		return d->cur.job.size;
	}
	return 0;
}

void refill_settle(struct devheap *dh)
{
	struct refill *rf = atomic_load_explicit(&dh->core->refill, memory_order_acquire);
	struct refill_dev *d;

	if (!rf)
		return;
	pthread_mutex_lock(&rf->w.lock);
	d = &rf->dev[dh->dev];
	for (int i = 0; i < d->n; i++)
		withdraw(dh, d->q[i].a, d->q[i].va, d->q[i].size);
	d->n = 0;
	rf->pending &= ~(1u << dh->dev);
	/* What is made is taken, the rest dropped with the queue; the wait is one piece's. */
	stop_made(rf, dh, d, false);
	pthread_mutex_unlock(&rf->w.lock);
}

/* Queued range i, which [lo, hi) overlaps: *job becomes the granules of it under [lo, hi), and
 * the queue keeps the parts on either side in its place. false (nothing changed, *job the
 * whole range) when the queue has no room for a second part. */
static bool narrow_to(struct refill_dev *d, int i, struct refill_job *job, vmm_devptr lo,
		      vmm_devptr hi, size_t gran)
{
	struct refill_job whole = *job;
	vmm_devptr end = whole.va + whole.size;
	vmm_devptr olo = lo > whole.va ? lo & ~(vmm_devptr)(gran - 1) : whole.va;
	vmm_devptr ohi = hi < end ? align_up(hi, gran) : end;
	bool left = olo > whole.va, right = ohi < end;

	if (left && right && d->n == QUEUE_MAX)
		return false;
	job->va = olo;
	job->size = ohi - olo;
	if (left && right) {
		memmove(d->q + i + 2, d->q + i + 1, (size_t)(d->n - i - 1) * sizeof(*d->q));
		d->n++;
	} else if (!left && !right) {
		memmove(d->q + i, d->q + i + 1, (size_t)(d->n - i - 1) * sizeof(*d->q));
		d->n--;
		return true;
	}
	if (left) {
		d->q[i] = whole;
		d->q[i].size = olo - whole.va;
	}
	if (right) {
		int at = left ? i + 1 : i;

		d->q[at] = whole;
		d->q[at].va = ohi;
		d->q[at].size = end - ohi;
	}
	return true;
}

vmm_status refill_claim(struct devheap *dh, vmm_devptr lo, vmm_devptr hi)
{
	struct refill *rf = atomic_load_explicit(&dh->core->refill, memory_order_acquire);
	vmm_status st = VMM_OK;
	struct refill_dev *d;

	if (!rf)
		return VMM_OK;
	pthread_mutex_lock(&rf->w.lock);
	d = &rf->dev[dh->dev];
	/* Not all backed (the driver ran out, or held the thread past the deadline): the part
	 * that is not left the free memory, and the caller looks again. So it does when any
	 * memory left, outside [lo, hi) too: that split the block it found. */
	/* The range being made, if the request lies on it: stopped after its piece in hand, the
	 * rest queued again at the front, for the loop below. Not made in time: BUSY. */
	if (d->state != REFILL_IDLE && !d->abandoned && overlaps(&d->cur.job, lo, hi)) {
		if (stop_made(rf, dh, d, true))
			st = d->abandoned ? VMM_E_BUSY : VMM_E_OOM;
	}
	for (int i = 0; i < d->n;) {
		struct refill_work w = { .job = d->q[i] };

		if (!overlaps(&w.job, lo, hi)) {
			i++;
			continue;
		}
		/* Only the granules the request lies on are made here; the rest of the range stays
		 * queued (in place, as up to two ranges) while the queue has room. */
		if (!narrow_to(d, i, &w.job, lo, hi, dh->gran)) {
			memmove(d->q + i, d->q + i + 1, (size_t)(d->n - i - 1) * sizeof(*d->q));
			d->n--;
		}
		make(dh, &w, false);
		dh->tally.refill_claimed += w.made;
		if (commit(dh, &w, NULL))
			st = VMM_E_OOM;
	}
	if (d->n) {
		rf->pending |= 1u << dh->dev;
		pthread_cond_signal(&rf->w.posted);
	} else {
		rf->pending &= ~(1u << dh->dev);
	}
	pthread_mutex_unlock(&rf->w.lock);
	return st;
}

bool refill_stop(struct vmm_core *core)
{
	struct refill *rf = core->refill;

	if (!rf)
		return true;
	if (!vmm_worker_stop(&rf->w, STOP_WAIT_MS)) {
		vmm_log(VMM_LOG_WARN, "the refill thread is still in the driver after %d s: the core "
			"is left to the end of the process", STOP_WAIT_MS / 1000);
		return false;
	}
	pthread_cond_destroy(&rf->made);
	free(rf);
	core->refill = NULL;
	return true;
}

void refill_after_fork(struct vmm_core *core)
{
	struct refill *rf = core->refill;

	core->refill = NULL;
	core->refill_failed = false;
	if (!rf)
		return;
	/* The parent's thread is not here, and its lock may have been held at the fork: the queue
	 * is read without it, by the child's one thread, as ahead_after_fork does. Every range it
	 * names, the one being made too, leaves the child's free memory: nothing will make it. The
	 * parent's record is left as it is (never freed). */
	for (int dev = 0; dev < VMM_MAX_DEVICES; dev++) {
		struct devheap *dh = core->heaps[dev];
		struct refill_dev *d = &rf->dev[dev];

		if (!dh)
			continue;
		for (int i = 0; i < d->n; i++)
			withdraw(dh, d->q[i].a, d->q[i].va, d->q[i].size);
		if (d->state != REFILL_IDLE && !d->abandoned)
			withdraw(dh, d->cur.job.a, d->cur.job.va, d->cur.job.size);
	}
}
