/* Lone-stream ordering (lone_stream.h). States, in the order a program meets them:
 *   UNSET      no submission yet;
 *   ON         every submission since the episode began went to S (fast path: a compare);
 *   JOINING    another stream got work: each stream that gets work first waits for the event
 *              recorded on S after the last block taken back, until it has completed;
 *   REARMABLE  plain rules; every submission is tracked (lone_stream_others.h; from JOINING
 *              on) so that once one stream has had REARM_RUN submissions in a row and every
 *              other has finished its work, that stream becomes S of a new episode;
 *   DONE       plain rules for good: after a capture, a context's end, a stream no other thread
 *              can name, more than OTHERS_MAX streams, EPISODES_MAX episodes or TRACK_MAX
 *              tracked submissions without a new episode.
 * The state is read without the lock on every submission; every change, join and record happens
 * under the lock; host waits for the join event happen outside it. */
#include "lone_stream.h"

#include <pthread.h>
#include <stdatomic.h>

#include "../core/log.h"
#include "config.h"
#include "hooks_common.h"
#include "lone_stream_others.h"
#include "submit_count.h"

DRIVER_EXTRA_SLOT(cuCtxGetCurrent);
DRIVER_EXTRA_SLOT(cuStreamWaitEvent);
DRIVER_EXTRA_SLOT(cuEventQuery);
DRIVER_EXTRA_SLOT(cuEventSynchronize);

enum { LONE_UNSET, LONE_ON, LONE_JOINING, LONE_REARMABLE, LONE_DONE };

/* Submissions in a row to one stream before it may become lone again, and between tries. A
 * program that writes once to a stream of its own (PyTorch does at start) gets its main stream
 * back soon after; one that keeps several streams busy pays a join per episode, a bounded few. */
#define REARM_RUN 256
#define REARM_RETRY 64
#define EPISODES_MAX 8
/* Tracked submissions without a new episode before plain rules for good: a program that keeps
 * several streams busy would otherwise take the lock twice per submission for ever. */
#define TRACK_MAX (1u << 16)
/* JOINING, submissions to S itself: every JOIN_POLL of them, is the join over? */
#define JOIN_POLL 16

static pthread_mutex_t lone_lock = PTHREAD_MUTEX_INITIALIZER;
/* Sequentially consistent: a free that read ON comes before the store that ends the episode,
 * hence before the event recorded after that store (end_lone). */
static _Atomic int state = LONE_UNSET;
static _Atomic uintptr_t lone_key;    /* S's key (resolve); the heap orders on it */
static struct stream_name lone;       /* S (lock held) */
static CUevent reuse_event;           /* ON: recorded on S after the last block taken back */
static uint64_t reuse_recorded_at;    /* the submission count read just before that record */
static CUevent join_event;            /* JOINING: what other streams wait for (lock held) */
static bool no_rearm;                 /* after this join: DONE, not REARMABLE */
static int episodes;
static uintptr_t run_key;             /* REARMABLE: the stream of the last submissions */
static int run_len;
static unsigned join_polls;
static unsigned tracked;              /* submissions tracked since the last episode began */

/* A fork waits for the lock, so that the child never finds it held by a thread it does not
 * have; the child's CUDA is not the parent's (the shim serves it nothing), so it is DONE there. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&lone_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lone_lock);
}

static void fork_child(void)
{
	atomic_store(&state, LONE_DONE);
	pthread_mutex_unlock(&lone_lock);
}

static void fork_handlers(void)
{
	if (pthread_atfork(fork_prepare, fork_parent, fork_child))
		vmm_log(VMM_LOG_WARN, "lone stream: no fork handlers; a child forked while another "
			"thread submits work could wait for ever on its first submission");
}

/* The entry points take the lock through here: the fork handlers are in place before it is
 * first held. */
static void lock_lone(void)
{
	pthread_once(&fork_once, fork_handlers);
	pthread_mutex_lock(&lone_lock);
}

enum target_kind { T_HANDLE, T_LEGACY, T_PER_THREAD, T_UNKNOWN };

struct target {
	enum target_kind kind;
	struct stream_name name; /* T_HANDLE, T_LEGACY (ctx: the calling thread's current one) */
};

/* A key for a stream every thread can name: its handle, or its context with the low bit set for
 * a legacy stream (contexts are aligned, handles are never odd). 0 for the others. */
static void resolve(CUstream s, bool per_thread, struct target *t)
{
	t->name = (struct stream_name){ 0 };
	if (s == SUBMIT_STREAM_UNKNOWN) {
		t->kind = T_UNKNOWN;
	} else if (s == CU_STREAM_PER_THREAD || (!s && per_thread)) {
		t->kind = T_PER_THREAD;
	} else if (!s || s == CU_STREAM_LEGACY) {
		t->kind = T_LEGACY;
		if (DRIVER_EXTRA(cuCtxGetCurrent) &&
		    DRIVER_EXTRA(cuCtxGetCurrent)(&t->name.ctx) == CUDA_SUCCESS && t->name.ctx)
			t->name.key = (uintptr_t)t->name.ctx | 1;
	} else {
		t->kind = T_HANDLE;
		t->name.h = s;
		t->name.key = (uintptr_t)s;
	}
}

/* The host waits for the stream named by n: where an event could not be recorded, or a block
 * was taken back in an episode that no longer joins others (a rare race with its end). */
static void sync_stream(struct stream_name n)
{
	CUresult r = stream_name_context(&n) ? stream_name_sync(&n) : CUDA_ERROR_INVALID_HANDLE;

	if (r != CUDA_SUCCESS)
		vmm_log(VMM_LOG_WARN, "lone stream: could not wait for the work of stream %#lx "
			"(CUresult %d)", (unsigned long)n.key, (int)r);
}

/* The join is over (the event completed, or can no longer be waited for). The event is kept: a
 * thread may still wait for it outside the lock. */
static void finish(void)
{
	join_event = NULL;
	if (no_rearm)
		others_clear();
	atomic_store(&state, no_rearm ? LONE_DONE : LONE_REARMABLE);
}

/* Host wait for the event, without the lock (S's queued work may wait for work another thread
 * is about to submit), then finish. Lock held on entry and on return. No bound, on purpose: it
 * is less than the device synchronize native cudaFree made when the last block was freed, and
 * past a bound the blocks handed out since could still be in use by their former owners. */
static void wait_and_finish(void)
{
	CUevent e = join_event;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_unlock(&lone_lock);
	if (e && DRIVER_EXTRA(cuEventSynchronize))
		r = DRIVER_EXTRA(cuEventSynchronize)(e);
	pthread_mutex_lock(&lone_lock);
	if (r != CUDA_SUCCESS)
		vmm_log(VMM_LOG_WARN, "lone stream: waiting for its last work failed (CUresult %d)",
			(int)r);
	if (atomic_load(&state) == LONE_JOINING)
		finish();
}

/* No further episode (lock held). */
static void give_up(void)
{
	no_rearm = true;
	if (atomic_load(&state) == LONE_REARMABLE) {
		others_clear();
		atomic_store(&state, LONE_DONE);
	}
}

/* ON -> JOINING (lock held): other streams wait for S's work up to the last block it took back
 * (what a former owner may still be doing there), not for all of S's work: a kernel on S may
 * wait for what another stream is about to write. No block taken back: nothing to wait for. */
static void end_lone(const char *why)
{
	atomic_store(&state, LONE_JOINING);
	if (episodes >= EPISODES_MAX)
		no_rearm = true;
	join_event = reuse_event;
	reuse_event = NULL;
	vmm_log(VMM_LOG_INFO, "lone stream: episode %d ends at %s; other streams wait for its "
		"work %s", episodes, why, join_event ? "up to the last block it took back" :
		"(none: no block was taken back)");
	if (!others_note(&lone))
		no_rearm = true;
	if (!join_event)
		finish();
}

/* S for a new episode; the streams tracked so far have all finished (lock held). */
static void begin_episode(const struct stream_name *s)
{
	lone = *s;
	reuse_event = NULL;
	run_key = 0;
	run_len = 0;
	tracked = 0;
	episodes++;
	others_clear();
	atomic_store(&lone_key, s->key);
	atomic_store(&state, LONE_ON);
	vmm_log(VMM_LOG_INFO, "lone stream: episode %d: all work goes to %s %p; frees are ordered "
		"on it", episodes, s->h ? "stream" : "the default stream of context",
		s->h ? (void *)s->h : (void *)s->ctx);
}

/* UNSET: the first submission's stream becomes S, or lone mode is never used (lock held). */
static void start(struct target *t)
{
	if (shim_config_disabled() || !t->name.key || !stream_name_context(&t->name)) {
		atomic_store(&state, LONE_DONE);
		return;
	}
	begin_episode(&t->name);
}

/* JOINING, a submission to t: t waits for the event on the device; a stream that cannot be
 * named, or a wait the driver refuses, waits on the host (lock held). */
static void join(const struct target *t)
{
	CUstream w = t->kind == T_PER_THREAD ? CU_STREAM_PER_THREAD : t->name.h;
	CUresult r;

	if (!join_event || !DRIVER_EXTRA(cuEventQuery)) {
		finish();
		return;
	}
	r = DRIVER_EXTRA(cuEventQuery)(join_event);
	if (r == CUDA_SUCCESS) {
		finish();
		return;
	}
	if (r == CUDA_ERROR_NOT_READY && t->kind != T_UNKNOWN && DRIVER_EXTRA(cuStreamWaitEvent) &&
	    DRIVER_EXTRA(cuStreamWaitEvent)(w, join_event, 0) == CUDA_SUCCESS)
		return;
	wait_and_finish();
}

/* JOINING, a submission to S itself: now and then, see whether the join is over (lock held). */
static void poll_join(void)
{
	if (++join_polls % JOIN_POLL == 0 && join_event && DRIVER_EXTRA(cuEventQuery) &&
	    DRIVER_EXTRA(cuEventQuery)(join_event) == CUDA_SUCCESS)
		finish();
}

/* JOINING or REARMABLE: note t's submission (a token, or -1), and when its stream has had a
 * long run with every other stream finished, make it S of a new episode (lock held). */
static int track(struct target *t)
{
	int token = t->name.key ? others_submitting(&t->name) : -1;

	if (token < 0 || ++tracked > TRACK_MAX) {
		/* a stream another thread cannot record on, too many streams or too long */
		give_up();
		return token;
	}
	run_len = t->name.key == run_key ? run_len + 1 : 1;
	run_key = t->name.key;
	if (atomic_load(&state) == LONE_REARMABLE && run_len >= REARM_RUN && !no_rearm) {
		if (others_idle_except(run_key)) {
			begin_episode(&t->name);
			return -1;
		}
		run_len = REARM_RUN - REARM_RETRY;
	}
	return token;
}

int lone_stream_before_submit(CUstream s, bool per_thread, const char *what)
{
	int st = atomic_load(&state), token = -1;
	struct target t;

	if (st == LONE_DONE)
		return -1;
	resolve(s, per_thread, &t);
	if (t.kind == T_LEGACY && !t.name.key)
		return -1; /* no context: the driver refuses the call, nothing is queued */
	if (st == LONE_ON && t.name.key == atomic_load(&lone_key))
		return -1;
	lock_lone();
	switch (atomic_load(&state)) {
	case LONE_UNSET:
		start(&t);
		break;
	case LONE_ON:
		if (t.name.key == lone.key)
			break;
		end_lone(what);
		/* fall through */
	case LONE_JOINING:
		if (atomic_load(&state) == LONE_JOINING && t.name.key != lone.key)
			join(&t);
		else if (atomic_load(&state) == LONE_JOINING)
			poll_join();
		/* fall through */
	case LONE_REARMABLE:
		if (atomic_load(&state) == LONE_JOINING || atomic_load(&state) == LONE_REARMABLE)
			token = track(&t);
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&lone_lock);
	return token;
}

void lone_stream_after_submit(int token)
{
	if (token < 0)
		return;
	lock_lone();
	others_submitted(token);
	pthread_mutex_unlock(&lone_lock);
}

/* The stream a key names (resolve's encoding); its context is looked up when needed. */
static struct stream_name named_by(uintptr_t key)
{
	struct stream_name n = { .key = key };

	if (key & 1)
		n.ctx = (CUcontext)(key & ~(uintptr_t)1);
	else
		n.h = (CUstream)key;
	return n;
}

void lone_stream_reused(vmm_stream key)
{
	uint64_t now;

	lock_lone();
	if ((uintptr_t)key == lone.key && atomic_load(&state) == LONE_ON) {
		/* Work counted before the free that gave the block back was in the driver before
		 * the count was read: when the count has not moved since the last record, that
		 * record already comes after it (submit_count.h). */
		now = submit_count_read(NULL);
		if (!reuse_event || now != reuse_recorded_at) {
			if (stream_name_record(&lone, &reuse_event))
				reuse_recorded_at = now;
			else
				sync_stream(lone);
		}
	} else if ((uintptr_t)key == lone.key && atomic_load(&state) == LONE_JOINING) {
		CUevent fresh = NULL; /* the old one may be waited for outside the lock */

		if (stream_name_record(&lone, &fresh))
			join_event = fresh;
		else
			sync_stream(lone);
	} else {
		sync_stream(named_by((uintptr_t)key));
	}
	pthread_mutex_unlock(&lone_lock);
}

bool lone_stream_key(vmm_stream *key)
{
	if (atomic_load(&state) != LONE_ON)
		return false;
	*key = (vmm_stream)atomic_load(&lone_key);
	return true;
}

void lone_stream_end_and_wait(const char *why)
{
	if (atomic_load(&state) == LONE_DONE)
		return;
	lock_lone();
	no_rearm = true;
	switch (atomic_load(&state)) {
	case LONE_ON:
		end_lone(why);
		if (atomic_load(&state) == LONE_JOINING)
			wait_and_finish();
		break;
	case LONE_JOINING:
		wait_and_finish();
		break;
	default:
		others_clear();
		atomic_store(&state, LONE_DONE);
		break;
	}
	pthread_mutex_unlock(&lone_lock);
}

/* Events belong to contexts, and the table's may be in the one going away: plain rules for good
 * (contexts are seldom destroyed while work runs). */
void lone_stream_context_ends(const char *why)
{
	int st = atomic_load(&state);

	if (st != LONE_UNSET && st != LONE_DONE)
		lone_stream_end_and_wait(why);
}

void lone_stream_forget(CUstream s)
{
	int st = atomic_load(&state);

	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || st == LONE_UNSET ||
	    st == LONE_DONE)
		return;
	lock_lone();
	if (atomic_load(&state) == LONE_ON && lone.key == (uintptr_t)s)
		end_lone("the destruction of the lone stream");
	others_forget(s);
	pthread_mutex_unlock(&lone_lock);
}

/* Called before the heap exists: nothing was freed in the lone stream's order, so nothing needs
 * to be joined or waited for. */
void lone_stream_disable(void)
{
	lock_lone();
	join_event = NULL;
	others_clear();
	atomic_store(&state, LONE_DONE);
	pthread_mutex_unlock(&lone_lock);
}
