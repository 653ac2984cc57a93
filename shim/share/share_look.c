/* A round of GPU sharing's looks (share_internal.h, share_round_look): whom it asks (the GPU's
 * members, share_members.c, or without a table the control folder), hello to each, then the
 * status of its device for a sharing peer of the GPU, and the slots of members gone for good
 * freed. The looks run side by side on up to LOOK_THREADS threads. Each call is bounded by what
 * is left of the round's wait, but one after another, a few stopped processes early in the order
 * took the whole wait (up to 2 s a call), and the processes after them, which might have made
 * room, were never asked, while the GPU's lock was held. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/lib_thread.h"
#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "../protocol/peer_client.h"
#include "share_internal.h"

/* Up to this many looks at once: each is mostly a wait for a peer's answer. */
#define LOOK_THREADS 8
#define PEER_TIMEOUT_MIN_MS 100 /* a call's least time, even at the end of the wait */

/* How long a call to a peer may take: SHARE_PEER_TIMEOUT_MS, but not past the deadline by more
 * than PEER_TIMEOUT_MIN_MS. A peer that does not answer (stopped, or its answer held up) then
 * costs a round what is left of the wait, not 2 s per call while the GPU's lock is held. */
int share_call_ms(long long deadline)
{
	long long left = deadline - vmm_now_ms();

	return left > SHARE_PEER_TIMEOUT_MS ? SHARE_PEER_TIMEOUT_MS :
	       left > PEER_TIMEOUT_MIN_MS ? (int)left : PEER_TIMEOUT_MIN_MS;
}

/* The peer's ordinal for uuid in its "gpus" list, or -1. */
static int ordinal_of(const char *gpus, const char *uuid)
{
	size_t ul = strlen(uuid);
	int i = 0;

	for (const char *p = gpus; p && *p; i++) {
		const char *c = strchr(p, ',');
		size_t n = c ? (size_t)(c - p) : strlen(p);

		if (n == ul && !memcmp(p, uuid, n))
			return i;
		p = c ? c + 1 : NULL;
	}
	return -1;
}

static bool record_i64(const proto_record *r, const char *key, long long *out)
{
	double v;

	if (!proto_record_double(r, key, &v))
		return false;
	*out = (long long)v;
	return true;
}

/* What pid is on this GPU: hello, then the status of its device for a sharing peer of it. */
static enum share_look look_at(pid_t pid, const char *uuid, long long deadline,
				struct share_peer *out)
{
	const share_settings *ss = share_settings_get();
	proto_request req = { .verb = PROTO_HELLO, .device = -1 };
	const proto_record *info, *dev;
	peer_client_reply r;
	char why[160];
	long long prio;
	bool share = false;
	const char *gpus, *state;
	uint64_t mapped = 0, app_bytes = 0, app_asleep = 0, shared = 0, shared_asleep = 0,
		 app_kept = 0, resident, kept;

	memset(out, 0, sizeof(*out));
	out->pid = pid;
	if (peer_client_call(ss->run_dir, pid, &req, share_call_ms(deadline), &r, why, sizeof(why)))
		return SHARE_LOOK_NONE;
	info = peer_client_find(&r, "info");
	if (!info || !proto_record_bool(info, "share", &share) || !share ||
	    !record_i64(info, "priority", &prio) || !(gpus = proto_record_str(info, "gpus")) ||
	    (out->ordinal = ordinal_of(gpus, uuid)) < 0) {
		peer_client_free(&r);
		return SHARE_LOOK_NONE;
	}
	out->priority = (int)prio;
	record_i64(info, "idle_ms", &out->idle_ms);
	record_i64(info, "resident_ms", &out->resident_ms);
	state = proto_record_str(info, "state");
	out->awake = state && !strcmp(state, "awake");
	/* Its allocator waits for its device: no figures now (its status would wait for them);
	 * the caller looks again soon. */
	if (state && !strcmp(state, "busy")) {
		peer_client_free(&r);
		return SHARE_LOOK_BUSY;
	}
	peer_client_free(&r);
	req.verb = PROTO_STATUS;
	req.device = out->ordinal;
	if (peer_client_call(ss->run_dir, pid, &req, share_call_ms(deadline), &r, why, sizeof(why)))
		return SHARE_LOOK_NONE;
	dev = peer_client_find(&r, "device");
	if (dev) {
		proto_record_u64(dev, "mapped", &mapped);
		proto_record_u64(dev, "cached", &out->cached);
		proto_record_u64(dev, "app_bytes", &app_bytes);
		proto_record_u64(dev, "app_asleep", &app_asleep);
		proto_record_u64(dev, "ipc_shared", &shared);
		proto_record_u64(dev, "ipc_shared_asleep", &shared_asleep);
		proto_record_u64(dev, "app_unreleasable", &app_kept);
	}
	/* What its sleep alone cannot release stays out: memory other processes map (legacy IPC
	 * exports, the program's exported or imported handles). Sleeping a process for it would
	 * cost it its memory and bring nothing. */
	resident = mapped + (app_bytes > app_asleep ? app_bytes - app_asleep : 0);
	kept = (shared > shared_asleep ? shared - shared_asleep : 0) + app_kept;
	out->releasable = resident > kept ? resident - kept : 0;
	peer_client_free(&r);
	return SHARE_LOOK_PEER;
}

/* One round's looks, shared by the threads that make them. */
struct look_job {
	const pid_t *pids;
	int n;
	const char *uuid;
	long long deadline;
	enum share_look *looks;
	struct share_peer *peers;
	atomic_int next;
};

/* Take the next process not looked at yet until none is left; past the deadline the caller's wait
 * has ended, and the rest are looked at by nobody. */
static void *look_some(void *arg)
{
	struct look_job *j = arg;

	for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
		if (vmm_now_ms() >= j->deadline) {
			memset(&j->peers[i], 0, sizeof(j->peers[i]));
			j->looks[i] = SHARE_LOOK_NONE;
			continue;
		}
		j->looks[i] = look_at(j->pids[i], j->uuid, j->deadline, &j->peers[i]);
	}
	return NULL;
}

/* Look at pids[0..n) side by side within deadline; looks[i] and peers[i] say what pids[i] is.
 * Returns once every look has ended. */
static void look_all(const pid_t *pids, int n, const char *uuid, long long deadline,
		     enum share_look *looks, struct share_peer *peers)
{
	struct look_job job = { .pids = pids, .n = n, .uuid = uuid, .deadline = deadline,
				.looks = looks, .peers = peers };
	pthread_t th[LOOK_THREADS - 1];
	int started = 0;

	atomic_init(&job.next, 0);
	/* A thread that cannot be had leaves its share to the others (this one at least). */
	while (started < LOOK_THREADS - 1 && started < n - 1 &&
	       !vmm_thread_create(&th[started], NULL, look_some, &job))
		started++;
	look_some(&job);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}

/* The folder held more processes than a round reads: said once per process. */
static atomic_bool said_folder_full;

/* Whom a round asks: the members of the GPU (share_members.c), or without a member table the
 * processes of the control folder (at most SHARE_FOLDER_MAX). Returns how many are in pids. */
static int round_candidates(struct share_members *m, pid_t *pids, int cap)
{
	const share_settings *ss = share_settings_get();
	int n;

	if (m)
		return share_members_list(m, getpid(), pids, cap);
	n = peer_client_list(ss->run_dir, getpid(), pids, cap);
	if (n == cap && !atomic_exchange(&said_folder_full, true))
		vmm_log(VMM_LOG_WARN, "share: the control folder %s holds %d processes or more: "
			"only %d are looked at for room", ss->run_dir, cap, cap);
	return n;
}

bool share_round_look(int dev, const char *uuid, long long deadline, struct share_round *r)
{
	struct share_members *m = share_members_of(dev);
	int cap = m ? SHARE_MEMBER_SLOTS : SHARE_FOLDER_MAX;

	memset(r, 0, sizeof(*r));
	r->pids = malloc((size_t)cap * sizeof(*r->pids));
	if (!r->pids)
		goto no_memory;
	r->npids = round_candidates(m, r->pids, cap);
	r->looks = calloc(r->npids ? (size_t)r->npids : 1, sizeof(*r->looks));
	r->peers = calloc(r->npids ? (size_t)r->npids : 1, sizeof(*r->peers));
	if (!r->looks || !r->peers)
		goto no_memory;
	look_all(r->pids, r->npids, uuid, deadline, r->looks, r->peers);
	share_note_looked(r->npids);
	for (int i = 0; i < r->npids; i++) {
		if (r->looks[i] == SHARE_LOOK_PEER)
			r->peers[r->npeers++] = r->peers[i]; /* in place: npeers <= i */
		else if (r->looks[i] == SHARE_LOOK_BUSY)
			r->busy = true;
		else if (m && share_members_prune(m, r->pids[i]))
			vmm_log(VMM_LOG_INFO, "share: pid %ld has ended: no longer a member of %s",
				(long)r->pids[i], uuid);
	}
	return true;
no_memory:
	vmm_log(VMM_LOG_WARN, "share: no memory to look at the processes of device %d", dev);
	share_round_free(r);
	return false;
}

void share_round_free(struct share_round *r)
{
	free(r->pids);
	free(r->looks);
	free(r->peers);
	memset(r, 0, sizeof(*r));
}
