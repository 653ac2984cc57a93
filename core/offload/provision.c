/* The provisioning pool: worker threads that fault in and pin host backup segments ahead of the
 * copies that need them (a first sleep is bounded by host provisioning, not by the link: see
 * docs/research.md, section 3). Segments are split into pieces touched in parallel; the worker that
 * finishes a segment's last piece registers it while the others already touch the next one. */
#include <pthread.h>
#include <stdlib.h>

#include "../lib_thread.h"
#include "offload_internal.h"

#define PIECE_BYTES ((size_t)8 << 20)
#define MAX_THREADS HB_THREADS_MAX

struct prov_item {
	struct hb_rec *r;
	size_t seg;
	unsigned pieces, taken, done;
};

struct prov_pool {
	pthread_mutex_t lock;
	pthread_cond_t work;      /* workers wait for pieces */
	pthread_cond_t settled;   /* drain waits for segments */
	pthread_t th[MAX_THREADS];
	int nthreads;
	bool stop;
	struct prov_item *q;
	size_t n, cap, next;      /* next: first item with pieces left to take */
	size_t nsettled;
	double busy_since, busy;
};

/* Take the next piece under the lock; false when the pool is stopping and idle. */
static bool take_piece(struct prov_pool *p, size_t *idx, unsigned *piece)
{
	while (!p->stop && p->next == p->n)
		pthread_cond_wait(&p->work, &p->lock);
	if (p->next == p->n)
		return false;
	*idx = p->next;
	*piece = p->q[*idx].taken++;
	if (p->q[*idx].taken == p->q[*idx].pieces)
		p->next++;
	return true;
}

static void *worker(void *arg)
{
	struct prov_pool *p = arg;
	unsigned piece;
	size_t idx;

	pthread_mutex_lock(&p->lock);
	while (take_piece(p, &idx, &piece)) {
		/* q may be reallocated by a submit while unlocked: keep copies, not pointers. */
		struct hb_rec *r = p->q[idx].r;
		size_t seg = p->q[idx].seg, len, off, n;
		char *start;

		pthread_mutex_unlock(&p->lock);
		hb_seg_bounds(r, seg, &start, &len);
		off = (size_t)piece * PIECE_BYTES;
		n = len - off < PIECE_BYTES ? len - off : PIECE_BYTES;
		hb_touch(start + off, n);
		pthread_mutex_lock(&p->lock);
		if (++p->q[idx].done < p->q[idx].pieces)
			continue;
		/* The last piece of the segment: register it while others touch the next. */
		pthread_mutex_unlock(&p->lock);
		hb_settle(r, seg, hb_register(r, seg));
		pthread_mutex_lock(&p->lock);
		if (++p->nsettled == p->n) {
			p->busy += vmm_now_s() - p->busy_since;
			pthread_cond_broadcast(&p->settled);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct prov_pool *prov_pool_create(int threads)
{
	struct prov_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (threads < 1)
		threads = 1;
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->settled, NULL);
	for (int i = 0; i < threads; i++)
		if (vmm_thread_create(&p->th[p->nthreads], NULL, worker, p) == 0)
			p->nthreads++;
	if (!p->nthreads) {
		prov_pool_destroy(p);
		return NULL;
	}
	return p;
}

void prov_pool_destroy(struct prov_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->th[i], NULL);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->settled);
	pthread_mutex_destroy(&p->lock);
	free(p->q);
	free(p);
}

bool prov_pool_submit(struct prov_pool *p, struct hb_rec *const *r, const size_t *seg, size_t n)
{
	if (!n)
		return true;
	pthread_mutex_lock(&p->lock);
	if (p->n + n > p->cap) {
		size_t c = p->cap ? p->cap : 64;
		struct prov_item *nq;

		while (c < p->n + n)
			c *= 2;
		nq = realloc(p->q, c * sizeof(*nq));
		if (!nq) {
			pthread_mutex_unlock(&p->lock);
			return false;
		}
		p->q = nq;
		p->cap = c;
	}
	if (p->nsettled == p->n)
		p->busy_since = vmm_now_s();
	for (size_t i = 0; i < n; i++) {
		char *start;
		size_t len;

		hb_seg_bounds(r[i], seg[i], &start, &len);
		p->q[p->n++] = (struct prov_item){
			.r = r[i], .seg = seg[i],
			.pieces = (unsigned)((len + PIECE_BYTES - 1) / PIECE_BYTES),
		};
	}
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	return true;
}

double prov_pool_drain(struct prov_pool *p)
{
	double busy;

	pthread_mutex_lock(&p->lock);
	while (p->nsettled < p->n)
		pthread_cond_wait(&p->settled, &p->lock);
	busy = p->busy;
	p->busy = 0;
	p->n = p->next = p->nsettled = 0;
	pthread_mutex_unlock(&p->lock);
	return busy;
}
