/* The copy engine (copy_engine.h): ranges are cut into chunks (never across a host segment) and
 * issued round-robin on a few streams of the device. Host memory that is pinned is copied
 * straight; memory still raw is provisioned by the pool ahead of the copies (so that touching and
 * pinning overlap the transfer); memory that could not be pinned goes through a small pinned
 * staging ring, one slot per stream. Streams, staging slots and the pool live as long as the
 * engine, so that the next sleep or wake finds them ready. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "copy_engine.h"
#include "../log.h"
#include "offload_internal.h"
#include "progress.h"

#define CE_DEFAULT_STREAMS 4
#define CE_MAX_STREAMS 8
#define CE_DEFAULT_CHUNK ((size_t)64 << 20)
#define CE_MIN_CHUNK ((size_t)4 << 10)
/* How often a failed stream synchronize is asked again before the stream counts as unsettled. */
#define CE_SYNC_ATTEMPTS 3

struct staged {
	void *dst;        /* host destination of a staged device->host chunk, copied after sync */
	size_t n;
};

enum dir { D2H, H2D };

/* The transfer in progress, between vmm_copy_begin and vmm_copy_end. */
struct ce_run {
	enum dir dir;
	vmm_status st;          /* the first failure: nothing more is issued */
	double t0, wait_s, prov_s;
	uint64_t bytes, staged_bytes;
	unsigned long chunk_no;
};

struct vmm_copy_engine {
	vmm_backend *be;
	int dev;
	pthread_mutex_t lock;   /* one transfer at a time */
	size_t chunk;
	int nstreams;
	bool started;           /* streams exist */
	vmm_stream streams[CE_MAX_STREAMS];
	void *stage[CE_MAX_STREAMS];
	struct staged pend[CE_MAX_STREAMS];
	bool stage_failed;      /* no pinned staging memory: copy pageable memory directly */
	/* Only while a transfer provisions: the steady state needs no threads, and the program
	 * should not carry idle ones between sleeps. */
	struct prov_pool *pool;
	struct ce_run run;
	/* A synchronize failed every time it was asked: copies may still be running (see
	 * settle_stream). Cleared when a later synchronize of every stream succeeds. */
	atomic_bool unsettled;
};


vmm_status vmm_copy_engine_create(vmm_backend *be, int dev, vmm_copy_engine **out, vmm_error *err)
{
	vmm_copy_engine *ce;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no engine pointer to fill");
	*out = NULL;
	if (!be || dev < 0 || dev >= VMM_MAX_DEVICES)
		return vmm_fail(err, VMM_E_INVALID, 0, "copy engine: no backend or bad device %d",
				dev);
	if (!be->stream_create || !be->stream_synchronize || !be->copy_d2h_async ||
	    !be->copy_h2d_async)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0,
				"the %s backend cannot copy asynchronously", be->name);
	ce = calloc(1, sizeof(*ce));
	if (!ce)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a copy engine");
	ce->be = be;
	ce->dev = dev;
	ce->chunk = CE_DEFAULT_CHUNK;
	ce->nstreams = CE_DEFAULT_STREAMS;
	pthread_mutex_init(&ce->lock, NULL);
	*out = ce;
	return VMM_OK;
}

vmm_status vmm_copy_engine_tune(vmm_copy_engine *ce, size_t chunk_bytes, int streams,
				vmm_error *err)
{
	vmm_status st = VMM_OK;

	if (!ce)
		return vmm_fail(err, VMM_E_INVALID, 0, "no copy engine");
	if ((chunk_bytes && chunk_bytes < CE_MIN_CHUNK) || streams < 0 ||
	    streams > CE_MAX_STREAMS)
		return vmm_fail(err, VMM_E_INVALID, 0,
				"copy engine: chunk %zu (min %zu) or streams %d (1..%d) out of range",
				chunk_bytes, CE_MIN_CHUNK, streams, CE_MAX_STREAMS);
	pthread_mutex_lock(&ce->lock);
	if (ce->started) {
		st = vmm_fail(err, VMM_E_BUSY, 0, "copy engine already started: tune it first");
	} else {
		if (chunk_bytes)
			ce->chunk = chunk_bytes;
		if (streams)
			ce->nstreams = streams;
	}
	pthread_mutex_unlock(&ce->lock);
	return st;
}

/* Wait until stream k has nothing in flight. A failed synchronize does not prove the stream
 * idle: the call can come back with an error while copies are still queued (simdev's injected
 * failures do exactly that), and unmapping or freeing what they touch would fault. So a failure
 * is asked again; the first failure is the one returned (the transfer failed even when a retry
 * then drains the stream). *idle: a synchronize succeeded at last. */
static vmm_status settle_stream(vmm_copy_engine *ce, int k, bool *idle, vmm_error *err)
{
	vmm_status first = VMM_OK, st;

	*idle = false;
	for (int a = 0; a < CE_SYNC_ATTEMPTS; a++) {
		st = ce->be->stream_synchronize(ce->be, ce->streams[k], first ? NULL : err);
		if (!st) {
			*idle = true;
			return first;
		}
		if (!first)
			first = st;
	}
	return first;
}

static void stop_streams(vmm_copy_engine *ce)
{
	for (int i = 0; i < CE_MAX_STREAMS; i++) {
		if (ce->streams[i]) {
			ce->be->stream_synchronize(ce->be, ce->streams[i], NULL);
			if (ce->be->stream_destroy)
				ce->be->stream_destroy(ce->be, ce->streams[i], NULL);
			ce->streams[i] = NULL;
		}
		if (ce->stage[i] && ce->be->host_free_pinned)
			ce->be->host_free_pinned(ce->be, ce->stage[i], NULL);
		ce->stage[i] = NULL;
	}
	ce->started = false;
}

void vmm_copy_engine_destroy(vmm_copy_engine *ce)
{
	if (!ce)
		return;
	pthread_mutex_lock(&ce->lock);
	stop_streams(ce);
	pthread_mutex_unlock(&ce->lock);
	pthread_mutex_destroy(&ce->lock);
	free(ce);
}

static vmm_status start(vmm_copy_engine *ce, vmm_error *err)
{
	if (ce->started)
		return VMM_OK;
	for (int i = 0; i < ce->nstreams; i++) {
		vmm_status st = ce->be->stream_create(ce->be, ce->dev, &ce->streams[i], err);

		if (st) {
			stop_streams(ce);
			return st;
		}
	}
	ce->started = true;
	return VMM_OK;
}

/* Claim the raw segments the ranges touch, in the order the copies will need them, and hand them
 * to the pool. Checks that no range runs past the end of its buffer. */
static vmm_status plan_provisioning(vmm_copy_engine *ce, const vmm_copy_range *rg, size_t n,
				    double *inline_s, vmm_error *err)
{
	struct hb_rec **recs = NULL;
	size_t *segs = NULL, nc = 0, cap = 0;
	vmm_status st = VMM_OK;

	for (size_t i = 0; i < n && !st; i++) {
		struct hb_rec *r;
		size_t first, last;

		if (!rg[i].size)
			continue;
		r = hb_find(rg[i].host);
		if (!r)
			continue;
		if ((char *)rg[i].host + rg[i].size > r->base + r->size) {
			st = vmm_fail(err, VMM_E_INVALID, 0,
				      "copy range %zu runs %zu bytes past its host buffer", i,
				      (size_t)((char *)rg[i].host + rg[i].size -
					       (r->base + r->size)));
			break;
		}
		first = hb_seg_index(r, rg[i].host);
		last = hb_seg_index(r, (char *)rg[i].host + rg[i].size - 1);
		for (size_t s = first; s <= last; s++) {
			if (!hb_claim(r, s))
				continue;
			if (nc == cap) {
				size_t c = cap ? cap * 2 : 64;
				struct hb_rec **nr = realloc(recs, c * sizeof(*nr));
				size_t *ns = nr ? realloc(segs, c * sizeof(*ns)) : NULL;

				if (nr)
					recs = nr;
				if (!ns) {
					hb_settle(r, s, HB_RAW);
					st = vmm_fail(err, VMM_E_HOST_OOM, 0, "no memory to plan");
					break;
				}
				segs = ns;
				cap = c;
			}
			recs[nc] = r;
			segs[nc++] = s;
		}
	}
	if (st) {
		/* Nothing was submitted: give the claims back. */
		for (size_t i = 0; i < nc; i++)
			hb_settle(recs[i], segs[i], HB_RAW);
	} else if (nc) {
		if (!ce->pool)
			ce->pool = prov_pool_create(hb_default_threads());
		if (!ce->pool || !prov_pool_submit(ce->pool, recs, segs, nc)) {
			/* No workers: provision here, serially (correct, only slower). */
			double t0 = vmm_now_s();

			for (size_t i = 0; i < nc; i++) {
				char *p;
				size_t len;

				hb_seg_bounds(recs[i], segs[i], &p, &len);
				hb_touch(p, len);
				hb_settle(recs[i], segs[i], hb_register(recs[i], segs[i]));
			}
			*inline_s += vmm_now_s() - t0;
		}
	}
	free(recs);
	free(segs);
	return st;
}

static void flush_staged(vmm_copy_engine *ce, int k)
{
	if (ce->pend[k].n)
		memcpy(ce->pend[k].dst, ce->stage[k], ce->pend[k].n);
	ce->pend[k].n = 0;
}

static vmm_status issue(vmm_copy_engine *ce, enum dir d, int k, vmm_devptr dev, char *host,
			size_t n, bool staged, uint64_t *staged_bytes, vmm_error *err)
{
	vmm_backend *be = ce->be;
	vmm_status st;

	if (staged && !ce->stage[k] && !ce->stage_failed && be->host_alloc_pinned) {
		if (be->host_alloc_pinned(be, ce->chunk, &ce->stage[k], NULL)) {
			ce->stage[k] = NULL;
			ce->stage_failed = true;
			vmm_log(VMM_LOG_WARN, "no pinned staging memory: copying pageable memory");
		}
	}
	if (!staged || !ce->stage[k]) {
		if (d == D2H)
			return be->copy_d2h_async(be, host, dev, n, ce->streams[k], err);
		return be->copy_h2d_async(be, dev, host, n, ce->streams[k], err);
	}
	/* The slot is reused: its previous chunk must be complete (and delivered, for D2H). */
	st = be->stream_synchronize(be, ce->streams[k], err);
	if (st)
		return st;
	flush_staged(ce, k);
	*staged_bytes += n;
	if (d == D2H) {
		st = be->copy_d2h_async(be, ce->stage[k], dev, n, ce->streams[k], err);
		if (!st)
			ce->pend[k] = (struct staged){ .dst = host, .n = n };
		return st;
	}
	memcpy(ce->stage[k], host, n);
	return be->copy_h2d_async(be, dev, ce->stage[k], n, ce->streams[k], err);
}

bool vmm_copy_engine_unsettled(vmm_copy_engine *ce)
{
	return ce && atomic_load(&ce->unsettled);
}

bool vmm_copy_engine_settle(vmm_copy_engine *ce)
{
	bool unsettled = false;

	if (!vmm_copy_engine_unsettled(ce))
		return true;
	/* A transfer in progress (this thread's or another's) has the engine: not now. */
	if (pthread_mutex_trylock(&ce->lock))
		return false;
	for (int k = 0; k < ce->nstreams && ce->started; k++) {
		bool idle;

		settle_stream(ce, k, &idle, NULL);
		unsettled |= !idle;
	}
	atomic_store(&ce->unsettled, unsettled);
	pthread_mutex_unlock(&ce->lock);
	if (!unsettled)
		vmm_log(VMM_LOG_INFO, "copy dev %d: the copy streams synchronize again", ce->dev);
	return !unsettled;
}

int vmm_copy_engine_reset(vmm_copy_engine *ce, int (*reset)(void *arg), void *arg)
{
	int rc;

	pthread_mutex_lock(&ce->lock);
	rc = reset(arg);
	if (rc == 0) {
		/* Gone with the context: a destroy or free of them now would name freed objects. */
		for (int i = 0; i < CE_MAX_STREAMS; i++) {
			ce->streams[i] = NULL;
			ce->stage[i] = NULL;
		}
		ce->started = false;
		ce->stage_failed = false;
		atomic_store(&ce->unsettled, false); /* the reset ended the context's copies */
	}
	pthread_mutex_unlock(&ce->lock);
	return rc;
}

/* Begin a transfer in steps: take the engine (held until vmm_copy_end) and start its streams. */
vmm_status vmm_copy_begin(vmm_copy_engine *ce, int to_device, vmm_error *err)
{
	vmm_status st;

	if (!ce)
		return vmm_fail(err, VMM_E_INVALID, 0, "copy: no engine");
	pthread_mutex_lock(&ce->lock);
	st = start(ce, err);
	if (st) {
		pthread_mutex_unlock(&ce->lock);
		return st;
	}
	memset(&ce->run, 0, sizeof(ce->run));
	ce->run.dir = to_device ? H2D : D2H;
	ce->run.t0 = vmm_now_s();
	return VMM_OK;
}

/* Issue the ranges on the streams; returns once they are queued, not done. A failure is kept
 * for vmm_copy_end too: nothing more is issued after it. */
vmm_status vmm_copy_add(vmm_copy_engine *ce, const vmm_copy_range *rg, size_t n, vmm_error *err)
{
	struct ce_run *run = &ce->run;
	vmm_status st = VMM_OK;
	uint64_t total = 0; /* what these ranges add to the operation's bytes to copy */

	if (run->st)
		return vmm_fail(err, run->st, 0, "copy: an earlier part of this transfer failed");
	if (n && !rg)
		st = vmm_fail(err, VMM_E_INVALID, 0, "copy: no ranges");
	for (size_t i = 0; i < n && !st; i++)
		if (rg[i].size && (!rg[i].host || !rg[i].dev))
			st = vmm_fail(err, VMM_E_INVALID, 0, "copy range %zu has a null address", i);
	if (!st)
		st = plan_provisioning(ce, rg, n, &run->prov_s, err);
	if (st) {
		run->st = st;
		return st;
	}
	for (size_t i = 0; i < n; i++)
		total += rg[i].size;
	vmm_progress_plan(total);
	for (size_t i = 0; i < n && !st; i++) {
		struct hb_rec *r = rg[i].size ? hb_find(rg[i].host) : NULL;
		size_t off = 0;

		while (off < rg[i].size && !st) {
			char *host = (char *)rg[i].host + off;
			size_t len = rg[i].size - off;
			bool staged = false;
			int k = (int)(run->chunk_no++ % (unsigned long)ce->nstreams);

			if (len > ce->chunk)
				len = ce->chunk;
			if (r) {
				size_t seg = hb_seg_index(r, host);
				char *s0;
				size_t slen;
				hb_seg_bounds(r, seg, &s0, &slen);
				if (host + len > s0 + slen)
					len = (size_t)(s0 + slen - host);
				staged = hb_wait(r, seg, &run->wait_s) != HB_PINNED;
			}
			st = issue(ce, run->dir, k, rg[i].dev + off, host, len, staged,
				   &run->staged_bytes, err);
			if (!st) {
				run->bytes += len;
				vmm_progress_advance(len);
			}
			off += len;
		}
	}
	run->st = st;
	return st;
}

/* Wait for everything issued (always, whatever happened), deliver staged chunks, give the
 * engine back. Returns the transfer's first failure (an add's: its message went with it). */
vmm_status vmm_copy_end(vmm_copy_engine *ce, vmm_copy_stats *stats, vmm_error *err)
{
	struct ce_run *run = &ce->run;
	vmm_status st = run->st, sst;
	struct ce_run done;
	bool unsettled = false;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	/* A failed add already said why (err is left alone for it). */
	/* Nothing stays in flight on return, whatever happened. */
	for (int k = 0; k < ce->nstreams; k++) {
		vmm_error serr;
		bool idle;

		sst = settle_stream(ce, k, &idle, &serr);
		if (!idle)
			unsettled = true;
		if (sst && !st) {
			st = sst;
			if (err)
				*err = serr;
		}
	}
	atomic_store(&ce->unsettled, unsettled);
	if (unsettled)
		vmm_log(VMM_LOG_ERROR, "copy %s dev %d: the copy streams could not be synchronized "
			"(%d attempts each): their copies may still run, so the memory they touch is "
			"kept as it is", run->dir == D2H ? "out" : "in", ce->dev, CE_SYNC_ATTEMPTS);
	for (int k = 0; k < ce->nstreams; k++) {
		if (!st)
			flush_staged(ce, k);
		ce->pend[k].n = 0;
	}
	if (ce->pool) {
		run->prov_s += prov_pool_drain(ce->pool);
		prov_pool_destroy(ce->pool);
		ce->pool = NULL;
	}
	done = *run; /* the engine may be taken again once unlocked */
	run = &done;
	pthread_mutex_unlock(&ce->lock);
	if (stats) {
		stats->bytes = st ? 0 : run->bytes;
		stats->seconds = vmm_now_s() - run->t0;
		stats->provision_seconds = run->prov_s;
		stats->provision_wait_seconds = run->wait_s;
		stats->staged_bytes = run->staged_bytes;
	}
	if (!st && vmm_log_enabled(VMM_LOG_DEBUG))
		vmm_log(VMM_LOG_DEBUG,
			"copy %s dev %d: %llu bytes in %.3f s (provisioning %.3f s, waited %.3f s, "
			"staged %llu bytes)", run->dir == D2H ? "out" : "in", ce->dev,
			(unsigned long long)run->bytes, vmm_now_s() - run->t0, run->prov_s,
			run->wait_s, (unsigned long long)run->staged_bytes);
	return st;
}

static vmm_status transfer(vmm_copy_engine *ce, enum dir d, const vmm_copy_range *rg, size_t n,
			   vmm_copy_stats *stats, vmm_error *err)
{
	vmm_status st;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (!ce || (n && !rg))
		return vmm_fail(err, VMM_E_INVALID, 0, "copy: no engine or no ranges");
	for (size_t i = 0; i < n; i++)
		if (rg[i].size && (!rg[i].host || !rg[i].dev))
			return vmm_fail(err, VMM_E_INVALID, 0, "copy range %zu has a null address",
					i);
	st = vmm_copy_begin(ce, d == H2D, err);
	if (st)
		return st;
	st = vmm_copy_add(ce, rg, n, err);
	if (st) {
		vmm_copy_end(ce, stats, NULL); /* err keeps the add's message */
		return st;
	}
	return vmm_copy_end(ce, stats, err);
}

vmm_status vmm_copy_out(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
			vmm_copy_stats *stats, vmm_error *err)
{
	return transfer(ce, D2H, ranges, n, stats, err);
}

vmm_status vmm_copy_in(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
		       vmm_copy_stats *stats, vmm_error *err)
{
	return transfer(ce, H2D, ranges, n, stats, err);
}
