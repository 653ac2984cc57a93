/* Streams of simdev's libcuda.so.1: one worker thread per stream runs its work in order.
 * The legacy default stream waits for the blocking streams of its context and they wait for it.
 * Events, host functions, "kernels" (host functions, see simdev.h), stream-ordered allocation and a
 * simple stream capture into graphs that replay the recorded work. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"
#include "simdev.h"

pthread_mutex_t sim_sched_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER; /* some stream completed an op */
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;     /* some stream got an op */

/* Every stream ever made (kept allocated: events and stale handles may still name them). */
static struct CUstream_st **streams;
static size_t nstreams, capstreams;
static atomic_ullong stream_ids;

static struct CUmemPoolHandle_st pools[SIM_MAX_DEVICES];

/* The per-thread default stream of each context this thread used. */
#define PT_MAX 32
static __thread struct { struct CUctx_st *ctx; struct CUstream_st *s; } per_thread[PT_MAX];
static __thread int worker_dev = -1;

int sim_worker_device(void)
{
	return worker_dev;
}

struct CUmemPoolHandle_st *sim_default_pool(int dev)
{
	pools[dev].dev = dev;
	return &pools[dev];
}

bool sim_pool_valid(const struct CUmemPoolHandle_st *pool)
{
	for (int d = 0; d < sim_device_count(); d++)
		if (pool == &pools[d])
			return true;
	return false;
}

/* fork: the child has no worker threads. Its streams start empty and get new workers on first
 * use (the parent's queued work stays the parent's), and no lock is left held by a thread that
 * does not exist there. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&sim_lock);
	pthread_mutex_lock(&sim_sched_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&sim_sched_lock);
	pthread_mutex_unlock(&sim_lock);
}

static void fork_child(void)
{
	for (size_t i = 0; i < nstreams; i++) {
		struct CUstream_st *s = streams[i];
		while (s->head) {
			struct sim_op *next = s->head->next;
			free(s->head);
			s->head = next;
		}
		s->tail = NULL;
		s->completed = s->submitted;
		s->started = false;
	}
	/* The parent's waiters do not exist here; a condvar that counts them would block. */
	pthread_cond_init(&work, NULL);
	pthread_cond_init(&progress, NULL);
	fork_parent();
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Append item to a growable list of pointers (caller holds sim_sched_lock); false: no memory. */
static bool list_push(void ***list, size_t *n, size_t *cap, void *item)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 32;
		void **v = realloc(*list, c * sizeof(*v));

		if (!v)
			return false;
		*list = v;
		*cap = c;
	}
	(*list)[(*n)++] = item;
	return true;
}

struct CUstream_st *sim_stream_new(struct CUctx_st *ctx, unsigned flags, int priority, bool legacy)
{
	pthread_once(&atfork_once, register_atfork);
	struct CUstream_st *s = calloc(1, sizeof(*s));
	bool ok;
	if (!s)
		return NULL;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = priority;
	s->legacy = legacy;
	s->alive = true;
	s->id = atomic_fetch_add(&stream_ids, 1) + 1;
	pthread_mutex_lock(&sim_sched_lock);
	ok = list_push((void ***)&streams, &nstreams, &capstreams, s);
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok) {
		free(s);
		return NULL;
	}
	return s;
}

static bool stream_known(struct CUstream_st *s)
{
	bool ok = false;
	pthread_mutex_lock(&sim_sched_lock);
	for (size_t i = 0; i < nstreams && !ok; i++)
		ok = streams[i] == s && s->alive;
	pthread_mutex_unlock(&sim_sched_lock);
	return ok;
}

CUresult sim_stream_resolve(CUstream h, bool ptsz, struct CUstream_st **out)
{
	struct CUctx_st *c;
	if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || !h) {
		CUresult r = sim_current(&c);
		if (r)
			return r;
		if (h == CU_STREAM_LEGACY || (!h && !ptsz)) {
			*out = c->legacy;
			return CUDA_SUCCESS;
		}
		for (int i = 0; i < PT_MAX; i++)
			if (per_thread[i].ctx == c) {
				*out = per_thread[i].s;
				return CUDA_SUCCESS;
			}
		for (int i = 0; i < PT_MAX; i++)
			if (!per_thread[i].ctx) {
				struct CUstream_st *s = sim_stream_new(c, 0, 0, false);
				if (!s)
					return CUDA_ERROR_OUT_OF_MEMORY;
				per_thread[i].ctx = c;
				per_thread[i].s = s;
				*out = s;
				return CUDA_SUCCESS;
			}
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!stream_known(h))
		return CUDA_ERROR_INVALID_HANDLE;
	*out = h;
	return CUDA_SUCCESS;
}

/* ---- running work ---- */

static void fill(void *dst, unsigned value, unsigned elem, size_t count)
{
	if (elem == 1) {
		memset(dst, (int)(value & 0xff), count);
	} else if (elem == 2) {
		uint16_t v = (uint16_t)value, *p = dst;
		for (size_t i = 0; i < count; i++)
			p[i] = v;
	} else {
		uint32_t *p = dst;
		for (size_t i = 0; i < count; i++)
			p[i] = value;
	}
}

static void free_native_now(uintptr_t p)
{
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact(p);
	if (n && n->kind == SIM_NATIVE_DEVICE)
		sim_native_device_free(n);
	pthread_mutex_unlock(&sim_lock);
}

/* SIMDEV_COPY_DELAY: a slow copy engine, so that a copy is still running when a call that
 * returns early (an injected failure) comes back. */
static void copy_delay(void)
{
	unsigned ms = sim_config()->copy_delay_ms;
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (ms && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void run_op(struct CUstream_st *s, struct sim_op *op)
{
	switch (op->kind) {
	case OP_COPY:
		copy_delay();
		memmove(op->dst, op->src, op->n);
		break;
	case OP_SET:
		copy_delay();
		fill(op->dst, op->value, op->elem, op->n);
		break;
	case OP_HOSTFN:
		op->fn(op->arg);
		break;
	case OP_KERNEL:
		op->kfn(op->params);
		break;
	case OP_RECORD:
		pthread_mutex_lock(&sim_sched_lock);
		if (op->event->stream == s && op->event->seq == s->completed + 1) {
			clock_gettime(CLOCK_MONOTONIC, &op->event->when);
			op->event->when_valid = true;
		}
		pthread_mutex_unlock(&sim_sched_lock);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&sim_sched_lock);
		while (op->wait_stream->completed < op->wait_seq)
			pthread_cond_wait(&progress, &sim_sched_lock);
		pthread_mutex_unlock(&sim_sched_lock);
		break;
	case OP_FREE:
		free_native_now((uintptr_t)op->dst);
		break;
	}
}

static void *worker(void *arg)
{
	struct CUstream_st *s = arg;
	worker_dev = s->ctx->dev;
	pthread_mutex_lock(&sim_sched_lock);
	for (;;) {
		while (!s->head) {
			if (!s->alive) { /* destroyed and drained: the thread goes */
				s->started = false;
				pthread_mutex_unlock(&sim_sched_lock);
				return NULL;
			}
			pthread_cond_wait(&work, &sim_sched_lock);
		}
		struct sim_op *op = s->head;
		pthread_mutex_unlock(&sim_sched_lock);
		run_op(s, op); /* user code: no lock held */
		pthread_mutex_lock(&sim_sched_lock);
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->completed++;
		free(op);
		pthread_cond_broadcast(&progress);
	}
	return NULL;
}

/* Append op to s (sched lock held). */
static CUresult push(struct CUstream_st *s, const struct sim_op *op)
{
	struct sim_op *o = malloc(sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = *op;
	o->next = NULL;
	if (!s->started) {
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&s->worker, &attr, worker, s);
		pthread_attr_destroy(&attr);
		if (e) {
			free(o);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		s->started = true;
	}
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	s->submitted++;
	return CUDA_SUCCESS;
}

static CUresult push_wait(struct CUstream_st *s, struct CUstream_st *on)
{
	if (on == s || on->completed >= on->submitted)
		return CUDA_SUCCESS;
	struct sim_op w = { .kind = OP_WAIT, .wait_stream = on, .wait_seq = on->submitted };
	return push(s, &w);
}

static bool blocking(const struct CUstream_st *s)
{
	return !s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING);
}

static CUresult graph_add(struct CUgraph_st *g, const struct sim_op *op)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct sim_op *v = realloc(g->ops, cap * sizeof(*v));
		if (!v)
			return CUDA_ERROR_OUT_OF_MEMORY;
		g->ops = v;
		g->cap = cap;
	}
	g->ops[g->n] = *op;
	g->ops[g->n++].next = NULL;
	return CUDA_SUCCESS;
}

/* Work queued or captured so far (simdev_submissions). */
static _Atomic unsigned long long submissions;

SIM_API unsigned long long simdev_submissions(void)
{
	return atomic_load_explicit(&submissions, memory_order_acquire);
}

/* Counted once the work is queued, where any synchronization that begins later waits for it,
 * as the shim counts a call once the driver returned it (release: pairs with the acquire). */
static CUresult counted(CUresult r)
{
	if (r == CUDA_SUCCESS)
		atomic_fetch_add_explicit(&submissions, 1, memory_order_release);
	return r;
}

CUresult sim_enqueue(struct CUstream_st *s, const struct sim_op *op)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&sim_sched_lock);
	if (s->capture) {
		/* Event records and waits are not graph nodes here: a capture is one stream. */
		if (s->capture_invalid) {
			pthread_mutex_unlock(&sim_sched_lock);
			return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		}
		if (op->kind != OP_RECORD && op->kind != OP_WAIT)
			r = graph_add(s->capture, op);
		pthread_mutex_unlock(&sim_sched_lock);
		return counted(r);
	}
	/* Legacy stream semantics: the NULL stream and blocking streams wait for each other. */
	if (s->legacy) {
		for (size_t i = 0; i < nstreams && !r; i++)
			if (streams[i]->ctx == s->ctx && blocking(streams[i]))
				r = push_wait(s, streams[i]);
	} else if (blocking(s)) {
		r = push_wait(s, s->ctx->legacy);
	}
	if (!r)
		r = push(s, op);
	if (op->kind == OP_RECORD && !r) {
		op->event->stream = s;
		op->event->seq = s->submitted;
		op->event->when_valid = false;
	}
	pthread_cond_broadcast(&work);
	pthread_mutex_unlock(&sim_sched_lock);
	return counted(r);
}

static void wait_seq(struct CUstream_st *s, uint64_t seq)
{
	while (s->completed < seq)
		pthread_cond_wait(&progress, &sim_sched_lock);
}

CUresult sim_enqueue_sync(struct CUstream_st *s, const struct sim_op *op)
{
	if (s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	CUresult r = sim_enqueue(s, op);
	if (r)
		return r;
	return sim_stream_sync(s);
}

CUresult sim_stream_sync(struct CUstream_st *s)
{
	pthread_mutex_lock(&sim_sched_lock);
	if (s->capture) {
		pthread_mutex_unlock(&sim_sched_lock);
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	wait_seq(s, s->submitted);
	pthread_mutex_unlock(&sim_sched_lock);
	return CUDA_SUCCESS;
}

CUresult sim_device_sync(int dev)
{
	pthread_mutex_lock(&sim_sched_lock);
	for (size_t i = 0; i < nstreams; i++)
		if (dev < 0 || streams[i]->ctx->dev == dev)
			wait_seq(streams[i], streams[i]->submitted);
	pthread_mutex_unlock(&sim_sched_lock);
	return CUDA_SUCCESS;
}

CUresult sim_ctx_sync(struct CUctx_st *c)
{
	pthread_mutex_lock(&sim_sched_lock);
	for (size_t i = 0; i < nstreams; i++) {
		struct CUctx_st *o = streams[i]->ctx;
		if (o == c || (c->primary && o->green && o->dev == c->dev))
			wait_seq(streams[i], streams[i]->submitted);
	}
	pthread_mutex_unlock(&sim_sched_lock);
	return CUDA_SUCCESS;
}

bool sim_ctx_invalidate_captures(struct CUctx_st *ctx)
{
	bool any = false;
	pthread_mutex_lock(&sim_sched_lock);
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i]->ctx == ctx && streams[i]->capture) {
			streams[i]->capture_invalid = true;
			any = true;
		}
	pthread_mutex_unlock(&sim_sched_lock);
	return any;
}

CUresult sim_check(struct CUstream_st *s, const void *p, size_t n, bool write)
{
	pthread_mutex_lock(&sim_lock);
	int a = sim_access(s->ctx->dev, (uintptr_t)p, n, write);
	pthread_mutex_unlock(&sim_lock);
	return a < 0 ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

/* ---- stream API ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s = sim_stream_new(c, flags, priority, false);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = s;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	SIM_BEGIN("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY);
	return stream_create(ph, flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	SIM_BEGIN("cuStreamCreateWithPriority", CUDA_ERROR_OUT_OF_MEMORY);
	return stream_create(ph, flags, priority);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream h)
{
	SIM_BEGIN("cuStreamDestroy_v2", CUDA_ERROR_UNKNOWN);
	struct CUstream_st *s;
	if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = sim_stream_resolve(h, false, &s);
	if (r)
		return r;
	/* Like the driver, queued work still completes; the handle is dead at once. */
	pthread_mutex_lock(&sim_sched_lock);
	s->alive = false;
	pthread_cond_broadcast(&work); /* an idle worker ends */
	pthread_mutex_unlock(&sim_sched_lock);
	return CUDA_SUCCESS;
}

void sim_streams_end(struct CUctx_st *ctx)
{
	pthread_mutex_lock(&sim_sched_lock);
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i]->ctx == ctx && !streams[i]->legacy)
			streams[i]->alive = false;
	pthread_cond_broadcast(&work); /* idle workers end */
	pthread_mutex_unlock(&sim_sched_lock);
}

static CUresult stream_sync(CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	return r ? r : sim_stream_sync(s);
}

SIM_API CUresult cuStreamSynchronize(CUstream h)
{
	SIM_BEGIN("cuStreamSynchronize", CUDA_ERROR_UNKNOWN);
	return stream_sync(h, false);
}

SIM_API CUresult cuStreamSynchronize_ptsz(CUstream h)
{
	SIM_BEGIN("cuStreamSynchronize_ptsz", CUDA_ERROR_UNKNOWN);
	return stream_sync(h, true);
}

static CUresult stream_query(CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_sched_lock);
	r = s->capture ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	    : s->completed == s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

SIM_API CUresult cuStreamQuery(CUstream h)
{
	SIM_BEGIN("cuStreamQuery", CUDA_ERROR_UNKNOWN);
	return stream_query(h, false);
}

SIM_API CUresult cuStreamQuery_ptsz(CUstream h)
{
	SIM_BEGIN("cuStreamQuery_ptsz", CUDA_ERROR_UNKNOWN);
	return stream_query(h, true);
}

static CUresult stream_get_ctx(CUstream h, bool ptsz, CUcontext *pctx)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = s->ctx;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCtx(CUstream h, CUcontext *pctx)
{
	SIM_BEGIN("cuStreamGetCtx", CUDA_ERROR_UNKNOWN);
	return stream_get_ctx(h, false, pctx);
}

SIM_API CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx)
{
	SIM_BEGIN("cuStreamGetCtx_ptsz", CUDA_ERROR_UNKNOWN);
	return stream_get_ctx(h, true, pctx);
}

SIM_API CUresult cuStreamGetId(CUstream h, unsigned long long *id)
{
	SIM_BEGIN("cuStreamGetId", CUDA_ERROR_UNKNOWN);
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, false, &s);
	if (r)
		return r;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = s->id;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetFlags(CUstream h, unsigned int *flags)
{
	SIM_BEGIN("cuStreamGetFlags", CUDA_ERROR_UNKNOWN);
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, false, &s);
	if (r)
		return r;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = s->flags;
	return CUDA_SUCCESS;
}

/* ---- host functions and kernels ---- */

/* cuStreamAddCallback's callback also gets the stream and a status. */
struct callback {
	CUstreamCallback fn;
	CUstream stream;
	void *arg;
};

static void run_callback(void *arg)
{
	struct callback cb = *(struct callback *)arg;
	free(arg);
	cb.fn(cb.stream, CUDA_SUCCESS, cb.arg);
}

static CUresult add_callback(CUstream h, bool ptsz, CUstreamCallback fn, void *arg,
			     unsigned flags)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!fn || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* as on the driver */
	struct callback *cb = malloc(sizeof(*cb));
	if (!cb)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*cb = (struct callback){ fn, h, arg };
	struct sim_op op = { .kind = OP_HOSTFN, .fn = run_callback, .arg = cb };
	r = sim_enqueue(s, &op);
	if (r)
		free(cb);
	return r;
}

SIM_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback fn, void *arg, unsigned flags)
{
	SIM_BEGIN("cuStreamAddCallback", CUDA_ERROR_UNKNOWN);
	return add_callback(h, false, fn, arg, flags);
}

SIM_API CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn, void *arg,
					  unsigned flags)
{
	SIM_BEGIN("cuStreamAddCallback_ptsz", CUDA_ERROR_UNKNOWN);
	return add_callback(h, true, fn, arg, flags);
}

SIM_API CUresult cuStreamGetPriority(CUstream h, int *priority)
{
	SIM_BEGIN("cuStreamGetPriority", CUDA_ERROR_UNKNOWN);
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, false, &s);
	if (r)
		return r;
	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	*priority = s->priority;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	SIM_BEGIN("cuCtxGetStreamPriorityRange", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

static CUresult launch_host(CUstream h, bool ptsz, CUhostFn fn, void *arg)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_op op = { .kind = OP_HOSTFN, .fn = fn, .arg = arg };
	return sim_enqueue(s, &op);
}

SIM_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg)
{
	SIM_BEGIN("cuLaunchHostFunc", CUDA_ERROR_UNKNOWN);
	return launch_host(h, false, fn, arg);
}

SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *arg)
{
	SIM_BEGIN("cuLaunchHostFunc_ptsz", CUDA_ERROR_UNKNOWN);
	return launch_host(h, true, fn, arg);
}

static CUresult launch_kernel(CUfunction f, CUstream h, bool ptsz, void **params)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	struct sim_op op = { .kind = OP_KERNEL, .kfn = (simdev_kernel_fn)(void *)f, .params = params };
	return sim_enqueue(s, &op);
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
				CUstream h, void **params, void **extra)
{
	SIM_BEGIN("cuLaunchKernel", CUDA_ERROR_UNKNOWN);
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
	return launch_kernel(f, h, false, params);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
				     unsigned int gz, unsigned int bx, unsigned int by,
				     unsigned int bz, unsigned int shmem, CUstream h, void **params,
				     void **extra)
{
	SIM_BEGIN("cuLaunchKernel_ptsz", CUDA_ERROR_UNKNOWN);
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
	return launch_kernel(f, h, true, params);
}

/* ---- events ---- */

static struct CUevent_st **events;
static size_t nevents, capevents;

static bool event_known(struct CUevent_st *e)
{
	bool ok = false;
	for (size_t i = 0; i < nevents && !ok; i++)
		ok = events[i] == e && e->alive;
	return ok;
}

SIM_API CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	SIM_BEGIN("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	bool ok;
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->flags = flags;
	e->alive = true;
	pthread_mutex_lock(&sim_sched_lock);
	ok = list_push((void ***)&events, &nevents, &capevents, e);
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ph = e;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy_v2(CUevent e)
{
	SIM_BEGIN("cuEventDestroy_v2", CUDA_ERROR_UNKNOWN);
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = event_known(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	if (!r)
		e->alive = false; /* kept: queued records and waits may still name it */
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

static CUresult event_record(CUevent e, CUstream h, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_sched_lock);
	bool ok = event_known(e);
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	struct sim_op op = { .kind = OP_RECORD, .event = e };
	return sim_enqueue(s, &op);
}

SIM_API CUresult cuEventRecord(CUevent e, CUstream h)
{
	SIM_BEGIN("cuEventRecord", CUDA_ERROR_UNKNOWN);
	return event_record(e, h, false);
}

SIM_API CUresult cuEventRecord_ptsz(CUevent e, CUstream h)
{
	SIM_BEGIN("cuEventRecord_ptsz", CUDA_ERROR_UNKNOWN);
	return event_record(e, h, true);
}

SIM_API CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags)
{
	SIM_BEGIN("cuEventRecordWithFlags", CUDA_ERROR_UNKNOWN);
	(void)flags;
	return event_record(e, h, false);
}

SIM_API CUresult cuEventQuery(CUevent e)
{
	SIM_BEGIN("cuEventQuery", CUDA_ERROR_UNKNOWN);
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = !event_known(e) ? CUDA_ERROR_INVALID_HANDLE
		     : !e->stream || e->stream->completed >= e->seq ? CUDA_SUCCESS
								    : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

SIM_API CUresult cuEventSynchronize(CUevent e)
{
	SIM_BEGIN("cuEventSynchronize", CUDA_ERROR_UNKNOWN);
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = event_known(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	if (!r && e->stream)
		wait_seq(e->stream, e->seq);
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_sched_lock);
	CUresult r = CUDA_SUCCESS;
	if (!event_known(a) || !event_known(b) || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) ||
	    !a->stream || !b->stream)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (a->stream->completed < a->seq || b->stream->completed < b->seq)
		r = CUDA_ERROR_NOT_READY;
	else if (!a->when_valid || !b->when_valid)
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		*ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 +
			      (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6);
	pthread_mutex_unlock(&sim_sched_lock);
	return r;
}

#undef cuEventElapsedTime /* cuda.h renames it to _v2; the old name is exported too */
SIM_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	SIM_BEGIN("cuEventElapsedTime", CUDA_ERROR_UNKNOWN);
	return elapsed(ms, a, b);
}

SIM_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	SIM_BEGIN("cuEventElapsedTime_v2", CUDA_ERROR_UNKNOWN);
	return elapsed(ms, a, b);
}

static CUresult stream_wait_event(CUstream h, CUevent e, bool ptsz)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_sched_lock);
	bool ok = event_known(e);
	struct sim_op op = { .kind = OP_WAIT };
	if (ok) {
		op.wait_stream = e->stream;
		op.wait_seq = e->seq;
	}
	pthread_mutex_unlock(&sim_sched_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!op.wait_stream)
		return CUDA_SUCCESS; /* never recorded: nothing to wait for */
	return sim_enqueue(s, &op);
}

SIM_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
	SIM_BEGIN("cuStreamWaitEvent", CUDA_ERROR_UNKNOWN);
	(void)flags;
	return stream_wait_event(h, e, false);
}

SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags)
{
	SIM_BEGIN("cuStreamWaitEvent_ptsz", CUDA_ERROR_UNKNOWN);
	(void)flags;
	return stream_wait_event(h, e, true);
}
