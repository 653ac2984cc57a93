/* Stream capture, graphs and stream-ordered allocation.
 * Simplifications (README): a capture records the work of one stream (event records and waits are
 * not recorded); memory allocated with cuMemAllocAsync during a capture exists at once, belongs to
 * the graph, and is freed when the graph and all its instantiations are destroyed (a free of it
 * recorded in the capture does nothing on replay). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

static struct CUgraph_st **graphs;
static size_t ngraphs, capgraphs;
/* Instantiations ever made (kept allocated, so stale handles are refused, not dereferenced). */
static struct CUgraphExec_st **execs;
static size_t nexecs, capexecs;

static bool exec_known(struct CUgraphExec_st *x)
{
	bool ok = false;
	for (size_t i = 0; i < nexecs && !ok; i++)
		ok = execs[i] == x && x->alive;
	return ok;
}

static bool graph_known(struct CUgraph_st *g)
{
	bool ok = false;
	for (size_t i = 0; i < ngraphs && !ok; i++)
		ok = graphs[i] == g && g->alive;
	return ok;
}

static struct CUgraph_st *graph_new(void)
{
	struct CUgraph_st *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	if (ngraphs == capgraphs) {
		size_t cap = capgraphs ? capgraphs * 2 : 16;
		struct CUgraph_st **v = realloc(graphs, cap * sizeof(*v));
		if (!v) {
			free(g);
			return NULL;
		}
		graphs = v;
		capgraphs = cap;
	}
	graphs[ngraphs++] = g;
	g->alive = true;
	g->refs = 1;
	return g;
}

/* Drop a reference (sched lock held). The last one detaches the graph's memory into *owned for
 * graph_free_memory, which runs after the sched lock is released (lock order: sim, then sched). */
static void graph_put(struct CUgraph_st *g, uintptr_t **owned, size_t *nowned)
{
	*owned = NULL;
	*nowned = 0;
	if (--g->refs > 0)
		return;
	g->alive = false;
	*owned = g->owned;
	*nowned = g->nowned;
	free(g->ops);
	g->owned = NULL;
	g->ops = NULL;
	g->n = g->nowned = 0;
}

static void graph_free_memory(struct CUgraph_st *g, uintptr_t *owned, size_t n)
{
	pthread_mutex_lock(&sim_lock);
	for (size_t i = 0; i < n; i++) {
		struct sim_native *nat = sim_native_exact(owned[i]);
		if (nat && nat->graph == g)
			sim_native_device_free(nat);
	}
	pthread_mutex_unlock(&sim_lock);
	free(owned);
}

static CUresult begin_capture(CUstream h, bool ptsz, CUstreamCaptureMode mode)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	(void)mode;
	if (s->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	pthread_mutex_lock(&sim_sched_lock);
	if (s->capture) {
		r = CUDA_ERROR_ILLEGAL_STATE;
	} else {
		s->capture = graph_new();
		s->capture_invalid = false;
		if (!s->capture)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else
			s->capture_id = s->id * 1000003u + ngraphs;
	}
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

SIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
	SIM_BEGIN("cuStreamBeginCapture_v2", CUDA_ERROR_UNKNOWN);
	return begin_capture(h, false, mode);
}

SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
	SIM_BEGIN("cuStreamBeginCapture_v2_ptsz", CUDA_ERROR_UNKNOWN);
	return begin_capture(h, true, mode);
}

/* A broken capture ends without a graph (what it recorded is dropped, its memory freed). */
static CUresult end_capture(CUstream h, bool ptsz, CUgraph *pg)
{
	struct CUstream_st *s;
	struct CUgraph_st *broken = NULL;
	uintptr_t *owned = NULL;
	size_t n = 0;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!pg)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_sched_lock);
	if (!s->capture) {
		r = CUDA_ERROR_ILLEGAL_STATE;
	} else if (s->capture_invalid) {
		broken = s->capture;
		graph_put(broken, &owned, &n);
		*pg = NULL;
		r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	} else {
		*pg = s->capture;
	}
	if (s->capture) {
		s->capture = NULL;
		s->capture_invalid = false;
	}
	pthread_mutex_unlock(&sim_sched_lock);
	if (broken)
		graph_free_memory(broken, owned, n);
	return r;
}

SIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph *pg)
{
	SIM_BEGIN("cuStreamEndCapture", CUDA_ERROR_UNKNOWN);
	return end_capture(h, false, pg);
}

SIM_API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *pg)
{
	SIM_BEGIN("cuStreamEndCapture_ptsz", CUDA_ERROR_UNKNOWN);
	return end_capture(h, true, pg);
}

static CUresult capture_info(CUstream h, bool ptsz, CUstreamCaptureStatus *status,
			     cuuint64_t *id, CUgraph *graph)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_sched_lock);
	*status = !s->capture	     ? CU_STREAM_CAPTURE_STATUS_NONE
		  : s->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
				       : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (id && s->capture)
		*id = s->capture_id;
	if (graph)
		*graph = s->capture;
	pthread_mutex_unlock(&sim_sched_lock);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
	SIM_BEGIN("cuStreamIsCapturing", CUDA_ERROR_UNKNOWN);
	return capture_info(h, false, status, NULL, NULL);
}

SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status)
{
	SIM_BEGIN("cuStreamIsCapturing_ptsz", CUDA_ERROR_UNKNOWN);
	return capture_info(h, true, status, NULL, NULL);
}

static void no_deps(const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (ndeps)
		*ndeps = 0;
}

SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *status,
					   cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps, const CUgraphEdgeData **edges,
					   size_t *ndeps)
{
	SIM_BEGIN("cuStreamGetCaptureInfo_v3", CUDA_ERROR_UNKNOWN);
	no_deps(deps, edges, ndeps);
	return capture_info(h, false, status, id, graph);
}

SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *status,
						cuuint64_t *id, CUgraph *graph,
						const CUgraphNode **deps,
						const CUgraphEdgeData **edges, size_t *ndeps)
{
	SIM_BEGIN("cuStreamGetCaptureInfo_v3_ptsz", CUDA_ERROR_UNKNOWN);
	no_deps(deps, edges, ndeps);
	return capture_info(h, true, status, id, graph);
}

SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status,
					   cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps, size_t *ndeps)
{
	SIM_BEGIN("cuStreamGetCaptureInfo_v2", CUDA_ERROR_UNKNOWN);
	no_deps(deps, NULL, ndeps);
	return capture_info(h, false, status, id, graph);
}

SIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *status,
						cuuint64_t *id, CUgraph *graph,
						const CUgraphNode **deps, size_t *ndeps)
{
	SIM_BEGIN("cuStreamGetCaptureInfo_v2_ptsz", CUDA_ERROR_UNKNOWN);
	no_deps(deps, NULL, ndeps);
	return capture_info(h, true, status, id, graph);
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *pexec, CUgraph g,
					     unsigned long long flags)
{
	SIM_BEGIN("cuGraphInstantiateWithFlags", CUDA_ERROR_OUT_OF_MEMORY);
	(void)flags;
	if (!pexec)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = graph_known(g) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!r && nexecs == capexecs) {
		size_t cap = capexecs ? capexecs * 2 : 16;
		struct CUgraphExec_st **v = realloc(execs, cap * sizeof(*v));
		if (v) {
			execs = v;
			capexecs = cap;
		} else {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (!r) {
		g->refs++;
		x->graph = g;
		x->alive = true;
		execs[nexecs++] = x;
		*pexec = x;
	}
	pthread_mutex_unlock(&sim_sched_lock);
	if (r)
		free(x);
	return r;
}

static CUresult graph_launch(CUgraphExec x, CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_sched_lock);
	bool ok = exec_known(x);
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	/* The graph's ops do not change once captured; each launch queues copies of them. */
	for (size_t i = 0; i < x->graph->n && !r; i++)
		r = sim_enqueue(s, &x->graph->ops[i]);
	return r;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec x, CUstream h)
{
	SIM_BEGIN("cuGraphLaunch", CUDA_ERROR_UNKNOWN);
	return graph_launch(x, h, false);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec x, CUstream h)
{
	SIM_BEGIN("cuGraphLaunch_ptsz", CUDA_ERROR_UNKNOWN);
	return graph_launch(x, h, true);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec x)
{
	SIM_BEGIN("cuGraphExecDestroy", CUDA_ERROR_UNKNOWN);
	pthread_mutex_lock(&sim_sched_lock);
	bool ok = exec_known(x);
	if (ok)
		x->alive = false; /* kept allocated: stale handles stay detectable */
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	/* Launched work may still use the graph's memory, which may go with this reference. */
	sim_device_sync(-1);
	uintptr_t *owned;
	size_t n;
	pthread_mutex_lock(&sim_sched_lock);
	graph_put(x->graph, &owned, &n);
	pthread_mutex_unlock(&sim_sched_lock);
	graph_free_memory(x->graph, owned, n);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphDestroy(CUgraph g)
{
	SIM_BEGIN("cuGraphDestroy", CUDA_ERROR_UNKNOWN);
	uintptr_t *owned = NULL;
	size_t n = 0;
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = graph_known(g) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!r)
		graph_put(g, &owned, &n);
	pthread_mutex_unlock(&sim_sched_lock);
	if (!r)
		graph_free_memory(g, owned, n);
	return r;
}

/* ---- stream-ordered allocation ---- */

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, struct CUmemPoolHandle_st *pool,
			    CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!dptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = pool ? pool->dev : s->ctx->dev;
	int oom;
	pthread_mutex_lock(&sim_sched_lock);
	struct CUgraph_st *g = s->capture;
	pthread_mutex_unlock(&sim_sched_lock);
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_device_alloc(dev, size, SIM_NATIVE_DEVICE, &oom);
	if (n) {
		n->ctx = s->ctx;
		n->pool = pool ? pool : sim_default_pool(dev);
		n->graph = g;
		*dptr = n->va;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (g) {
		pthread_mutex_lock(&sim_sched_lock);
		if (g->nowned == g->capowned) {
			size_t cap = g->capowned ? g->capowned * 2 : 8;
			uintptr_t *v = realloc(g->owned, cap * sizeof(*v));
			if (v) {
				g->owned = v;
				g->capowned = cap;
			}
		}
		if (g->nowned < g->capowned)
			g->owned[g->nowned++] = n->va;
		pthread_mutex_unlock(&sim_sched_lock);
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream h)
{
	SIM_BEGIN("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY);
	return alloc_async(dptr, size, NULL, h, false);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream h)
{
	SIM_BEGIN("cuMemAllocAsync_ptsz", CUDA_ERROR_OUT_OF_MEMORY);
	return alloc_async(dptr, size, NULL, h, true);
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
					 CUstream h)
{
	SIM_BEGIN("cuMemAllocFromPoolAsync", CUDA_ERROR_OUT_OF_MEMORY);
	if (!sim_pool_valid(pool))
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(dptr, size, pool, h, false);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
					      CUstream h)
{
	SIM_BEGIN("cuMemAllocFromPoolAsync_ptsz", CUDA_ERROR_OUT_OF_MEMORY);
	if (!sim_pool_valid(pool))
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(dptr, size, pool, h, true);
}

static CUresult free_async(CUdeviceptr p, CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_sched_lock);
	struct CUgraph_st *g = s->capture;
	pthread_mutex_unlock(&sim_sched_lock);
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	bool graph_owned = false;
	if (!n || n->kind != SIM_NATIVE_DEVICE || n->freeing) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (g && n->graph == g) {
		graph_owned = true; /* freed with the graph */
	} else if (!g) {
		n->freeing = true;
		n->graph = NULL;
	}
	pthread_mutex_unlock(&sim_lock);
	if (r || graph_owned)
		return r;
	struct sim_op op = { .kind = OP_FREE, .dst = (void *)(uintptr_t)p };
	return sim_enqueue(s, &op);
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream h)
{
	SIM_BEGIN("cuMemFreeAsync", CUDA_ERROR_UNKNOWN);
	return free_async(p, h, false);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream h)
{
	SIM_BEGIN("cuMemFreeAsync_ptsz", CUDA_ERROR_UNKNOWN);
	return free_async(p, h, true);
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	SIM_BEGIN("cuDeviceGetDefaultMemPool", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (dev < 0 || dev >= sim_device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	*pool = sim_default_pool(dev);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	SIM_BEGIN("cuDeviceGetMemPool", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (dev < 0 || dev >= sim_device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	*pool = sim_default_pool(dev);
	return CUDA_SUCCESS;
}

/* Freed stream-ordered memory goes back at once here, so there is never anything to trim. */
SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	SIM_BEGIN("cuMemPoolTrimTo", CUDA_ERROR_UNKNOWN);
	(void)keep;
	return sim_pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
