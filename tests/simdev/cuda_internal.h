/* Internals of simdev's libcuda.so.1: contexts, streams, events, graphs. Hidden symbols. */
#ifndef SIMDEV_CUDA_INTERNAL_H
#define SIMDEV_CUDA_INTERNAL_H

#include <cuda.h>
#include <time.h>

#include "sim_internal.h"

#pragma GCC visibility push(hidden)

#define SIM_API __attribute__((visibility("default")))
#define SIM_DRIVER_VERSION 13000

struct CUctx_st {
	int dev;
	bool primary;
	bool green;          /* a green context's CUcontext (cuCtxFromGreenCtx) */
	atomic_bool alive;   /* checked without sim_lock by every call that needs a context */
	int retains;         /* primary contexts: cuDevicePrimaryCtxRetain count */
	/* primary contexts: reset and not retained since. Every call with it current then fails
	 * CONTEXT_IS_DESTROYED and its state is inactive, until a retain makes it again with the
	 * same handle (the H100, tests/gpu/probe_reset.c). */
	atomic_bool reset;
	unsigned flags;
	unsigned long long id;
	struct CUstream_st *legacy;
};

enum sim_op_kind { OP_COPY, OP_SET, OP_HOSTFN, OP_KERNEL, OP_RECORD, OP_WAIT, OP_FREE };

struct sim_op {
	enum sim_op_kind kind;
	void *dst;
	const void *src;
	size_t n;          /* bytes (copy) or elements (set) */
	unsigned value;    /* set: the pattern */
	unsigned elem;     /* set: element size 1, 2 or 4 */
	void (*fn)(void *);
	void *arg;
	void (*kfn)(void **);
	void **params;
	struct CUevent_st *event;
	struct CUstream_st *wait_stream;
	uint64_t wait_seq;
	struct sim_op *next;
};

struct CUstream_st {
	struct CUctx_st *ctx;
	unsigned flags;
	int priority;
	bool legacy;
	bool alive;
	unsigned long long id;
	struct sim_op *head, *tail;
	uint64_t submitted, completed;
	bool started;
	pthread_t worker;
	struct CUgraph_st *capture; /* non-NULL while capturing */
	bool capture_invalid;       /* a context synchronization broke the capture */
	unsigned long long capture_id;
};

struct CUevent_st {
	unsigned flags;
	bool alive;
	struct CUstream_st *stream; /* last record, NULL if never recorded */
	uint64_t seq;
	struct timespec when;
	bool when_valid;
};

struct CUgraph_st {
	struct sim_op *ops;
	size_t n, cap;
	uintptr_t *owned;  /* stream-ordered allocations made during capture */
	size_t nowned, capowned;
	int refs;          /* the graph itself and each instantiation */
	bool alive;
};

struct CUgraphExec_st {
	struct CUgraph_st *graph;
	bool alive;
};

struct CUmemPoolHandle_st {
	int dev;
};

/* contexts (cuda_ctx.c) */
CUresult sim_require_init(void);
struct CUctx_st *sim_current_ctx(void);
CUresult sim_current(struct CUctx_st **ctx); /* INVALID_CONTEXT when none */
bool sim_ctx_valid(struct CUctx_st *ctx);
struct CUctx_st *sim_primary_ctx(int dev);
/* Retain / release the primary context of dev (green contexts hold one reference each). */
CUresult sim_primary_retain(int dev, struct CUctx_st **out);
void sim_primary_release(int dev);
/* Make ctx (zeroed but for dev and flags) a live context with its own default stream. */
CUresult sim_ctx_init(struct CUctx_st *ctx);

/* streams (cuda_stream.c) */
extern pthread_mutex_t sim_sched_lock;
/* Resolve a stream handle; ptsz: the NULL stream means the per-thread default stream. */
CUresult sim_stream_resolve(CUstream h, bool ptsz, struct CUstream_st **out);
/* Queue op (copied) on s, or record it into the graph s is capturing. */
CUresult sim_enqueue(struct CUstream_st *s, const struct sim_op *op);
/* Queue op on s and wait for it to finish (synchronous copies and memsets). */
CUresult sim_enqueue_sync(struct CUstream_st *s, const struct sim_op *op);
CUresult sim_stream_sync(struct CUstream_st *s);
/* Wait for every stream of every context on dev (dev < 0: all devices). */
CUresult sim_device_sync(int dev);
/* Wait for the work of one context, as cuCtxSynchronize does: its own streams, and for a primary
 * context also those of the green contexts on its device. */
CUresult sim_ctx_sync(struct CUctx_st *ctx);
bool sim_ctx_invalidate_captures(struct CUctx_st *ctx);
/* Every stream made in ctx but its default one is dead (a reset of the primary context); the
 * caller has synchronized it. */
void sim_streams_end(struct CUctx_st *ctx);
struct CUstream_st *sim_stream_new(struct CUctx_st *ctx, unsigned flags, int priority, bool legacy);
struct CUmemPoolHandle_st *sim_default_pool(int dev);
bool sim_pool_valid(const struct CUmemPoolHandle_st *pool); /* one of the default pools */
int sim_worker_device(void);

/* memory (cuda_mem.c): free the plain device allocations (cuMemAlloc, managed) made in ctx and
 * end its host registrations and host allocations, as a reset of the primary context does; the
 * caller has synchronized it. */
void sim_natives_end(struct CUctx_st *ctx);

/* Check that the stream's device may touch [p, p+n); map to a CUresult. */
CUresult sim_check(struct CUstream_st *s, const void *p, size_t n, bool write);

#pragma GCC visibility pop

#endif
