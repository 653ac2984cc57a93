/* Making room on a GPU for a sharing process (share.h): under the GPU's lock, first the caller's
 * own caches, then the peers' caches (trim; the GPU's members are looked at side by side,
 * share_members.c and share_look.c), then eligible peers put to sleep one by one (lower
 * priority first, then the longest idle), each followed by an attempt. When nothing is eligible
 * now but a peer will be within the wait (its time slice or minimum residency ends, or it may turn
 * idle), the lock is let go and the caller blocks on the GPU's event (share_event.c): it is woken
 * when a sharing process of the GPU frees memory, is slept or exits (even killed), or when a peer
 * may have become eligible, and looks again; every wait ends by the deadline
 * (VMMSHIM_SHARE_WAIT). When nothing ever could free enough, it fails at once. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "../control/control_internal.h"
#include "../gate.h"
#include "../protocol/peer_client.h"
#include "share_internal.h"

#define SLEEP_TIMEOUT_MIN_MS 10000 /* a peer's sleep: at least this long */
#define BUSY_RECHECK_MS 100        /* how soon a round that found a busy peer looks again */
#define MAX_PAUSE_MS 200           /* without the GPU's event: the longest pause between looks */
/* The longest wait between two looks even with events: memory freed by a process outside
 * sharing (not under the shim, or without VMMSHIM_SHARE) sends none. */
#define RECHECK_MS 1000
/* A peer that frees all the time signals the waiter at every free. Woken by frees, looks are at
 * least this far apart, the gap doubling while frees keep waking it: each look asks every peer
 * twice and trims their caches, so one per free would load the peers and the lock for nothing
 * (a look after a quiet spell still comes at once). */
#define FREE_GAP_MIN_MS 5
#define FREE_GAP_MAX_MS 100
/* Under the GPU's lock a round waits this long at most for its own device (what it freed since
 * its drain before the lock): every other sharing process of the GPU waits on the lock
 * meanwhile, for this process's kernels. */
#define OWN_WAIT_UNDER_LOCK_MS 100

static int by_preference(const void *a, const void *b)
{
	const struct share_peer *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	if (x->idle_ms != y->idle_ms)
		return x->idle_ms > y->idle_ms ? -1 : 1;
	return x->releasable > y->releasable ? -1 : x->releasable < y->releasable;
}

/* May we sleep p now? If not, *later: the monotonic time it may become eligible (0: never). */
static bool eligible(const struct share_peer *p, long long now, long long *later)
{
	const share_settings *ss = share_settings_get();
	long long t;

	*later = 0;
	if (!p->awake || !p->releasable || p->priority > ss->priority)
		return false;
	if (p->priority < ss->priority)
		return true;
	if (p->resident_ms < ss->residency_ms) {
		*later = now + ss->residency_ms - p->resident_ms;
		return false;
	}
	if (p->idle_ms >= ss->idle_ms || p->resident_ms >= ss->slice_ms)
		return true;
	/* It may turn idle any time (at the soonest once the idle time passes without work); at
	 * the latest its slice ends. */
	t = now + ss->slice_ms - p->resident_ms;
	if (now + ss->idle_ms - p->idle_ms < t)
		t = now + ss->idle_ms - p->idle_ms;
	*later = t;
	return false;
}

static uint64_t device_free(int dev)
{
	shim_runtime *rt = shim_runtime_peek();
	vmm_backend *be = rt ? rt->side[SHIM_CUDA].be : NULL;
	size_t fr = 0, tot = 0;

	if (!be || be->mem_info(be, dev, &fr, &tot, NULL))
		return 0;
	return fr;
}

/* This process's quarantine made reusable, its sync (when one is needed) ending by deadline;
 * with give_back, its cache then goes back to the driver (under the GPU's lock only: another
 * process could take it before this one's attempt). VMM_E_BUSY: the device had not finished
 * by then, and what it was waited for stays quarantined. */
static vmm_status settle_own(int dev, long long deadline, bool give_back)
{
	shim_runtime *rt = shim_runtime_peek();
	vmm_core *core = rt ? rt->side[SHIM_CUDA].core : NULL;
	vmm_limits lim = { .deadline = deadline / 1e3 };

	if (!core)
		return VMM_OK;
	return give_back ? vmm_trim_within(core, dev, &lim, NULL) :
			   vmm_reclaim_within(core, dev, &lim, NULL);
}

static void ask_trim(const struct share_peer *p, long long deadline)
{
	proto_request req = { .verb = PROTO_TRIM, .device = p->ordinal };
	int call_ms = share_call_ms(deadline);
	peer_client_reply r;
	char why[160];

	/* Its drain ends well before this call does: what it gives back without one still comes. */
	req.timeout_ms = call_ms / 2;
	if (!peer_client_call(share_settings_get()->run_dir, p->pid, &req, call_ms, &r, why,
			      sizeof(why)))
		peer_client_free(&r);
}

/* Sleep p's memory on this GPU; true when it is asleep. */
static bool put_to_sleep(const struct share_peer *p, const char *uuid, uint64_t need,
			 const char *what, long long deadline)
{
	const share_settings *ss = share_settings_get();
	proto_request req = { .verb = PROTO_SLEEP, .device = p->ordinal, .autowake = true };
	long long left = deadline - vmm_now_ms(), t0 = vmm_now_ms();
	const proto_record *res;
	const char *msg;
	uint64_t released = 0;
	peer_client_reply r;
	char why[200];

	req.timeout_ms = (int)(left > SLEEP_TIMEOUT_MIN_MS ? left : SLEEP_TIMEOUT_MIN_MS);
	snprintf(req.reason, sizeof(req.reason), "pid %ld (priority %d) needed %llu bytes on %s",
		 (long)getpid(), ss->priority, (unsigned long long)need, uuid);
	if (peer_client_call(ss->run_dir, p->pid, &req, req.timeout_ms + SHARE_PEER_TIMEOUT_MS, &r, why,
		      sizeof(why))) {
		vmm_log(VMM_LOG_INFO, "share: could not sleep pid %ld: %s", (long)p->pid, why);
		return false;
	}
	if ((msg = peer_client_error(&r))) {
		vmm_log(VMM_LOG_INFO, "share: pid %ld refused to sleep: %s", (long)p->pid, msg);
		peer_client_free(&r);
		return false;
	}
	res = peer_client_find(&r, "result");
	if (res)
		proto_record_u64(res, "released", &released);
	vmm_log(VMM_LOG_INFO, "share: slept pid %ld (priority %d, %s) for %s on %s: %llu bytes "
		"released in %.3f s", (long)p->pid, p->priority,
		p->priority < ss->priority ? "lower" : p->idle_ms >= ss->idle_ms ? "idle" :
		"past its time slice", what, uuid, (unsigned long long)released,
		(vmm_now_ms() - t0) / 1000.0);
	peer_client_free(&r);
	return true;
}

static bool held_without_autowake(void)
{
	control_state cs;

	control_state_get(&cs);
	return cs.held && !cs.autowake;
}

/* What a round saw: when a peer may become eligible (0: never) and the sharing processes of the
 * GPU (a waiter is woken when one of them exits; malloc'd, freed by make_room). own_busy lasts
 * across rounds: a round found its own device still busy under the lock, and let the lock go for
 * that once. */
struct round_seen {
	long long later;
	pid_t *pids;
	int npids;
	bool own_busy;
};

/* What room is made for (make_room). */
struct room_ask {
	int dev;              /* a driver ordinal */
	uint64_t need;        /* bytes */
	share_try_fn attempt; /* called with arg once room may be there */
	void *arg;
	const char *what;     /* for the log ("an allocation of 4 GiB") */
	bool patient;         /* wait the whole wait even when no peer can be slept now */
	bool ends_hold;       /* the attempt wakes a process held asleep (vmmctl's wake) */
	long long until_ms;   /* an end before the sharing wait's (0: none) */
};

/* One round under the lock. Returns 1: attempt succeeded; 0: not now (seen says what may change
 * that); -1: the lock could not be had before the deadline. */
static int one_round(const struct room_ask *a, const char *uuid, long long deadline,
		     struct round_seen *seen)
{
	long long *later = &seen->later;
	struct share_round rl = { .pids = NULL };
	struct share_peer *peers;
	int n = 0, rc = 0;
	uint64_t could = 0;
	bool busy = false;
	long long now, own_until;
	bool own_busy;

	*later = 0;
	seen->npids = 0;
	/* The wait for this process's own device comes first, without the GPU's lock: every other
	 * sharing process would wait for that lock meanwhile. Under it, the trim finds the
	 * quarantine drained (a sync then covers only what was freed in between, and only briefly),
	 * and gives the cache back where no other process can take it before the attempt. */
	settle_own(a->dev, deadline, false);
	if (share_lock(share_settings_get()->run_dir, uuid, deadline))
		return -1;
	own_until = vmm_now_ms() + OWN_WAIT_UNDER_LOCK_MS;
	own_busy = settle_own(a->dev, own_until < deadline ? own_until : deadline, true) ==
		   VMM_E_BUSY;
	/* Its device is still busy with what it freed since that drain: the attempt would wait for
	 * it (the heap synchronizes for its quarantine) under the lock, and its frees may be all it
	 * needs. The next round waits for them without the lock, before any peer is slept. Once
	 * only, so that a program freeing all the time beside a busy device still gets room. */
	if (own_busy && !seen->own_busy) {
		seen->own_busy = true;
		*later = vmm_now_ms();
		goto out;
	}
	if (a->attempt(a->arg)) {
		rc = 1;
		goto out;
	}
	/* Held asleep until someone wakes it (vmmctl, no autowake): sleeping peers now would free
	 * memory nobody here can use. */
	if (held_without_autowake() && !a->ends_hold)
		goto out;
	if (!share_round_look(a->dev, uuid, deadline, &rl)) {
		*later = vmm_now_ms() + BUSY_RECHECK_MS; /* no memory for the looks: soon again */
		goto out;
	}
	for (int i = 0; i < rl.npids; i++)
		if (rl.looks[i] != SHARE_LOOK_NONE)
			seen->pids[seen->npids++] = rl.pids[i]; /* its exit wakes the waiter */
	peers = rl.peers;
	n = rl.npeers;
	busy = rl.busy;
	/* Memory a peer keeps only in its cache counts as free: it goes back first. */
	for (int i = 0; i < n; i++) {
		if (peers[i].cached) {
			ask_trim(&peers[i], deadline);
			peers[i].releasable -= peers[i].releasable > peers[i].cached ?
						       peers[i].cached : peers[i].releasable;
		}
	}
	if (a->attempt(a->arg)) {
		rc = 1;
		goto out;
	}
	qsort(peers, (size_t)n, sizeof(peers[0]), by_preference);
	now = vmm_now_ms();
	/* A busy peer may hold what is needed, and may be eligible once it answers. */
	if (busy)
		*later = now + BUSY_RECHECK_MS;
	for (int i = 0; i < n; i++) {
		long long t;

		if (eligible(&peers[i], now, &t))
			could += peers[i].releasable;
		else if (t && (!*later || t < *later))
			*later = t;
	}
	/* Sleep only when it can be enough: a sleep that cannot make room is pure loss. */
	if (device_free(a->dev) + could < a->need)
		goto out;
	/* A peer's sleep may take past the wait (its copy needs the time), but past the deadline
	 * no further peer is slept: each could hold the GPU's lock that long again. */
	for (int i = 0; i < n && rc == 0 && vmm_now_ms() < deadline; i++) {
		long long t;

		if (!eligible(&peers[i], now, &t) || !put_to_sleep(&peers[i], uuid, a->need,
								  a->what, deadline))
			continue;
		if (a->attempt(a->arg))
			rc = 1;
	}
out:
	share_unlock();
	share_round_free(&rl);
	return rc;
}

/* When looks may come (make_room's loop): the start of the last, and the least gap
 * before the next when frees wake the waiter. */
struct look_pace {
	long long last_ms, free_gap_ms;
};

static void sleep_ms(long long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	if (ms > 0)
		nanosleep(&ts, NULL);
}

/* Woken by a free: wait out the gap since the last look (not past until), then widen it. */
static void pace_after_free(struct look_pace *p, long long until)
{
	long long next = p->last_ms + p->free_gap_ms;

	if (next > until)
		next = until;
	sleep_ms(next - vmm_now_ms());
	p->free_gap_ms = p->free_gap_ms * 2 < FREE_GAP_MAX_MS ? p->free_gap_ms * 2 : FREE_GAP_MAX_MS;
}

/* Wait for what may let the next round succeed: an event of the GPU (a free, a sleep, an exit of a
 * sharing process), a peer becoming eligible (seen->later), at most RECHECK_MS, never past the
 * deadline. Without the event, a pause that grows to MAX_PAUSE_MS. */
static void wait_for_change(struct share_waiter *w, const struct round_seen *seen,
			    long long deadline, long long *pause, struct look_pace *pace,
			    const char *what, const char *uuid)
{
	long long now = vmm_now_ms(), until = deadline, latency_us;
	pid_t who;

	if (seen->later && seen->later < until)
		until = seen->later > now ? seen->later : now + 1;
	if (!w->ev) {
		sleep_ms(until - now < *pause ? until - now : *pause);
		if (*pause < MAX_PAUSE_MS)
			*pause *= 2;
		return;
	}
	if (until > now + RECHECK_MS)
		until = now + RECHECK_MS;
	switch (share_event_wait(w, seen->pids, seen->npids, until, &who, &latency_us)) {
	case SHARE_WOKEN_FREE:
		vmm_log(VMM_LOG_INFO, "share: %s on %s: woken by a free (%.1f ms after it)", what,
			uuid, latency_us / 1000.0);
		pace_after_free(pace, until);
		break;
	case SHARE_WOKEN_EXIT:
		vmm_log(VMM_LOG_INFO, "share: %s on %s: woken by the exit of pid %ld", what, uuid,
			(long)who);
		pace->free_gap_ms = FREE_GAP_MIN_MS;
		break;
	case SHARE_WOKEN_TIMEOUT:
		pace->free_gap_ms = FREE_GAP_MIN_MS;
		break;
	}
}

/* Make room for a->need bytes on a->dev and call a->attempt, within the sharing rules and
 * VMMSHIM_SHARE_WAIT (or a->until_ms). VMM_OK once the attempt succeeded, else VMM_E_OOM with
 * why. The caller must not be inside the submission gate: others may sleep this process while
 * it waits. */
static vmm_status make_room(const struct room_ask *a, vmm_error *err)
{
	const share_settings *ss = share_settings_get();
	long long t0 = vmm_now_ms(), deadline = t0 + ss->wait_ms, pause = 10;
	struct look_pace pace = { .free_gap_ms = FREE_GAP_MIN_MS };
	char uuid[SHARE_UUID_MAX];
	struct share_event *ev;
	struct share_waiter w = { .ev = NULL, .inotify = -1 };
	struct round_seen seen = { .own_busy = false };
	bool waited = false;
	int rc;

	if (a->until_ms > 0 && a->until_ms < deadline)
		deadline = a->until_ms;
	if (!share_enabled() || !share_gpu_uuid(a->dev, uuid, sizeof(uuid)))
		return vmm_fail(err, VMM_E_OOM, 0, "device %d has too little free memory", a->dev);
	/* Listening before the first look: a free after it wakes the wait that follows. */
	if ((ev = share_event_of(a->dev)))
		share_event_begin(ev, deadline, &w);
	seen.pids = malloc(SHARE_MEMBER_SLOTS * sizeof(*seen.pids));
	if (!seen.pids) {
		share_event_end(&w);
		return vmm_fail(err, VMM_E_OOM, 0, "%s on %s: no memory to look for room", a->what,
				uuid);
	}
	for (;;) {
		share_note_look();
		pace.last_ms = vmm_now_ms();
		rc = one_round(a, uuid, deadline, &seen);
		if (rc == 1)
			break;
		/* Nothing will become eligible before the deadline: the answer is out of memory
		 * now, not after a wait that cannot help. */
		if (rc == 0 && !a->patient && (!seen.later || seen.later > deadline))
			break;
		if (vmm_now_ms() >= deadline)
			break;
		if (!waited) {
			waited = true;
			share_wait_begin();
		}
		wait_for_change(&w, &seen, deadline, &pause, &pace, a->what, uuid);
	}
	share_event_end(&w);
	free(seen.pids);
	if (waited)
		share_wait_end();
	if (rc == 1) {
		if (vmm_now_ms() - t0 > 100)
			vmm_log(VMM_LOG_INFO, "share: %s on %s served after %.3f s", a->what, uuid,
				(vmm_now_ms() - t0) / 1000.0);
		return VMM_OK;
	}
	return vmm_fail(err, VMM_E_OOM, 0, "%s on %s: no sharing process could make room within "
			"%.1f s", a->what, uuid, (vmm_now_ms() - t0) / 1000.0);
}

/* A wake of this process: the device with memory asleep and how much. */
struct wake_try {
	int dev;
	uint64_t need;
	long long deadline_ms; /* the wake waits for a sleep or wake in progress until then */
};

/* An allocation's attempt: inside the gate, as every allocation. */
struct alloc_try {
	vmm_core *core;
	int dev;
	size_t size, align;
	const char *tag;
	bool on_stream;            /* stream-ordered (cuMemAllocAsync): on `stream` */
	vmm_stream stream;
	bool *reused;              /* on_stream: a block freed on `stream` taken back (or NULL) */
	vmm_devptr *out;
	vmm_error *err;
};

static vmm_status alloc_once(const struct alloc_try *a)
{
	return a->on_stream ? vmm_malloc_ordered(a->core, a->dev, a->size, a->tag, a->stream,
						 a->out, a->reused, a->err) :
			      vmm_malloc(a->core, a->dev, a->size, a->align, a->tag, a->out, a->err);
}

static bool try_wake(void *arg);
static bool wake_need(struct wake_try *w);

/* Test hook (VMMSHIM_TEST_SHARE_STALL_MS): a pause where a sleep by a peer could come between an
 * attempt's look at the process's state and its entry into the gate. */
static void stall_for_test(void)
{
	long long ms = share_settings_get()->test_stall_ms;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	if (ms > 0)
		nanosleep(&ts, NULL);
}

static bool try_alloc(void *arg)
{
	struct alloc_try *a = arg;
	control_state cs;
	vmm_status st;

	stall_for_test();
	/* Enter the gate only if it is open, in one step: a look at the state and then
	 * gate_enter would let a sleep (by a peer of another GPU, or vmmctl) come between them,
	 * and the thread would wait at the closed gate holding this GPU's lock. Slept: wake first
	 * when the process may be woken by its own work (autowake), else try again later. */
	for (int tries = 0; tries < 2; tries++) {
		struct wake_try w;

		if (gate_try_enter()) {
			vmm_error_clear(a->err);
			st = alloc_once(a);
			gate_leave();
			return st == VMM_OK;
		}
		control_state_get(&cs);
		if (cs.changing || !cs.held || !cs.autowake || !wake_need(&w) || !try_wake(&w))
			return false;
	}
	return false;
}

#define PIECE (2u << 20)

static vmm_status alloc_sharing(struct alloc_try *a)
{
	vmm_status st = alloc_once(a);
	size_t size = a->size;
	char what[96];

	/* A member of the GPU from its first allocation there (asked by the others' rounds). */
	if (st == VMM_OK)
		share_join_gpu(a->dev);
	/* A thread already deciding for this GPU (its own autowake inside) does not recurse. */
	if (st != VMM_E_OOM || !share_enabled() || share_lock_held())
		return st;
	snprintf(what, sizeof(what), "an allocation of %zu bytes", size);
	/* Wait outside the gate: a peer may have to sleep this process meanwhile. */
	gate_leave();
	st = make_room(&(struct room_ask){ .dev = a->dev, .need = (size + PIECE - 1) / PIECE * PIECE,
					   .attempt = try_alloc, .arg = a, .what = what },
		       a->err);
	gate_enter();
	if (st == VMM_OK)
		share_join_gpu(a->dev);
	return st;
}

vmm_status share_malloc(vmm_core *core, int dev, size_t size, size_t align, const char *tag,
			vmm_devptr *out, vmm_error *err)
{
	struct alloc_try a = { .core = core, .dev = dev, .size = size, .align = align, .tag = tag,
			       .out = out, .err = err };

	return alloc_sharing(&a);
}

vmm_status share_malloc_on_stream(vmm_core *core, int dev, size_t size, const char *tag,
				  vmm_stream stream, vmm_devptr *out, bool *reused, vmm_error *err)
{
	struct alloc_try a = { .core = core, .dev = dev, .size = size, .tag = tag,
			       .on_stream = true, .stream = stream, .reused = reused, .out = out,
			       .err = err };

	return alloc_sharing(&a);
}

/* The autowake's attempt: only when the driver has the memory (a wake that cannot fit would
 * only log its refusal). */

static bool try_wake(void *arg)
{
	const struct wake_try *w = arg;
	vmm_sleep_opts all = { .tag = NULL, .device = -1 };
	/* The GPU's lock may be held: a sleep or wake of this process in progress is waited for
	 * only within the wait (the copies of the wake itself are bounded by the link). */
	long long left = w->deadline_ms - vmm_now_ms();
	control_limits lim = { .begin_ms = left > 100 ? (int)left : 100 };
	vmm_transfer_result res;
	vmm_error err;
	vmm_status s;

	/* The process's own cache counts as free (the wake trims it too). */
	if (device_free(w->dev) < w->need)
		settle_own(w->dev, w->deadline_ms, true);
	if (device_free(w->dev) < w->need)
		return false;
	vmm_error_clear(&err);
	s = control_wake(&all, &lim, &res, &err);
	if (s == VMM_OK)
		vmm_log(VMM_LOG_INFO, "share: woke by itself: %llu bytes back in %.3f s",
			(unsigned long long)res.bytes_copied, res.seconds);
	return s == VMM_OK || s == VMM_E_ALREADY;
}

/* The first CUDA device with memory of this process asleep, and how much; false when none. */
/* The first device (of `only`, when >= 0) with memory of tag (every tag: NULL; the program's
 * own mappings count then) asleep, and how much. */
static bool wake_need_of(struct wake_try *w, int only, const char *tag)
{
	shim_runtime *rt = shim_runtime_peek();
	const shim_side *cuda = rt ? &rt->side[SHIM_CUDA] : NULL;

	w->dev = -1;
	w->need = 0;
	for (int d = 0; cuda && cuda->core && d < VMM_MAX_DEVICES && w->dev < 0; d++) {
		vmm_stats st;
		vmm_app_stats as = { 0 };

		if ((only >= 0 && d != only) || !(vmm_devices_used(cuda->core) & (1u << d)) ||
		    vmm_stats_get(cuda->core, d, tag, &st, NULL))
			continue;
		if (cuda->app && !tag)
			vmm_app_stats_get(cuda->app, d, &as);
		if (st.asleep_bytes + as.asleep_bytes) {
			w->dev = d;
			w->need = st.asleep_bytes + as.asleep_bytes;
		}
	}
	return w->dev >= 0;
}

static bool wake_need(struct wake_try *w)
{
	return wake_need_of(w, -1, NULL);
}

vmm_status share_wake_from_outside(int dev, const char *tag, share_try_fn wake, void *arg,
				   long long until_ms, vmm_error *err)
{
	struct wake_try w;

	if (!share_enabled() || !wake_need_of(&w, dev, tag))
		return vmm_fail(err, VMM_E_OOM, 0, "too little free device memory to wake");
	return make_room(&(struct room_ask){ .dev = w.dev, .need = w.need, .attempt = wake,
					     .arg = arg, .what = "a wake asked by vmmctl",
					     .patient = true, .ends_hold = true,
					     .until_ms = until_ms },
			 err);
}

void share_autowake(void)
{
	struct wake_try w;
	vmm_error err;

	vmm_error_clear(&err);
	/* Nothing asleep on a CUDA device (the app mappings of another side), or this thread
	 * already decides for a GPU (its own allocation met its own sleep): one plain attempt,
	 * never a wait under the lock. */
	if (!wake_need(&w) || share_lock_held()) {
		if (w.dev < 0)
			w.dev = 0;
		w.deadline_ms = vmm_now_ms(); /* the least wait (try_wake's floor) */
		try_wake(&w);
		return;
	}
	w.deadline_ms = vmm_now_ms() + share_settings_get()->wait_ms;
	if (make_room(&(struct room_ask){ .dev = w.dev, .need = w.need, .attempt = try_wake,
					  .arg = &w, .what = "a wake", .patient = true },
		      &err))
		vmm_log(VMM_LOG_INFO, "share: still asleep (will retry at the next device work): %s",
			err.msg);
}
