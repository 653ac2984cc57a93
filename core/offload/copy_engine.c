/* The copy engine (copy_engine.h): ranges are cut into chunks (never across a host segment) and
 * issued round-robin on a few streams of the device. Host memory that is pinned is copied
 * straight; memory still raw is provisioned by the pool ahead of the copies (so that touching and
 * pinning overlap the transfer); memory that could not be pinned goes through a small pinned
 * staging ring, one slot per stream. Streams, staging slots and the pool live as long as the
 * engine, so that the next sleep or wake finds them ready. */
#include <pthread.h>
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

struct staged {
	void *dst;        /* host destination of a staged device->host chunk, copied after sync */
	size_t n;
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
};

enum dir { D2H, H2D };

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
			ce->pool = prov_pool_create(prov_default_threads());
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

static vmm_status transfer(vmm_copy_engine *ce, enum dir d, const vmm_copy_range *rg, size_t n,
			   vmm_copy_stats *stats, vmm_error *err)
{
	double t0 = vmm_now_s(), wait_s = 0, prov_s = 0;
	uint64_t bytes = 0, staged_bytes = 0;
	vmm_status st = VMM_OK, sst;
	unsigned long chunk_no = 0;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (!ce || (n && !rg))
		return vmm_fail(err, VMM_E_INVALID, 0, "copy: no engine or no ranges");
	for (size_t i = 0; i < n; i++)
		if (rg[i].size && (!rg[i].host || !rg[i].dev))
			return vmm_fail(err, VMM_E_INVALID, 0, "copy range %zu has a null address",
					i);
	pthread_mutex_lock(&ce->lock);
	st = start(ce, err);
	if (!st)
		st = plan_provisioning(ce, rg, n, &prov_s, err);
	if (st) {
		pthread_mutex_unlock(&ce->lock);
		return st;
	}
	{
		uint64_t total = 0; /* what this transfer adds to the operation's bytes to copy */

		for (size_t i = 0; i < n; i++)
			total += rg[i].size;
		vmm_progress_plan(total);
	}
	for (size_t i = 0; i < n && !st; i++) {
		struct hb_rec *r = rg[i].size ? hb_find(rg[i].host) : NULL;
		size_t off = 0;

		while (off < rg[i].size && !st) {
			char *host = (char *)rg[i].host + off;
			size_t len = rg[i].size - off;
			bool staged = false;
			int k = (int)(chunk_no++ % (unsigned long)ce->nstreams);

			if (len > ce->chunk)
				len = ce->chunk;
			if (r) {
				size_t seg = hb_seg_index(r, host);
				char *s0;
				size_t slen;
				hb_seg_bounds(r, seg, &s0, &slen);
				if (host + len > s0 + slen)
					len = (size_t)(s0 + slen - host);
				staged = hb_wait(r, seg, &wait_s) != HB_PINNED;
			}
			st = issue(ce, d, k, rg[i].dev + off, host, len, staged, &staged_bytes,
				   err);
			if (!st) {
				bytes += len;
				vmm_progress_advance(len);
			}
			off += len;
		}
	}
	/* Nothing stays in flight on return, whatever happened. */
	for (int k = 0; k < ce->nstreams; k++) {
		vmm_error serr;

		sst = ce->be->stream_synchronize(ce->be, ce->streams[k], &serr);
		if (sst && !st) {
			st = sst;
			if (err)
				*err = serr;
		}
	}
	for (int k = 0; k < ce->nstreams; k++) {
		if (!st)
			flush_staged(ce, k);
		ce->pend[k].n = 0;
	}
	if (ce->pool) {
		prov_s += prov_pool_drain(ce->pool);
		prov_pool_destroy(ce->pool);
		ce->pool = NULL;
	}
	pthread_mutex_unlock(&ce->lock);
	if (stats) {
		stats->bytes = st ? 0 : bytes;
		stats->seconds = vmm_now_s() - t0;
		stats->provision_seconds = prov_s;
		stats->provision_wait_seconds = wait_s;
		stats->staged_bytes = staged_bytes;
	}
	if (!st && vmm_log_enabled(VMM_LOG_DEBUG))
		vmm_log(VMM_LOG_DEBUG,
			"copy %s dev %d: %llu bytes in %.3f s (provisioning %.3f s, waited %.3f s, "
			"staged %llu bytes)", d == D2H ? "out" : "in", ce->dev,
			(unsigned long long)bytes, vmm_now_s() - t0, prov_s, wait_s,
			(unsigned long long)staged_bytes);
	return st;
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
