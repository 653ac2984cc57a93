/* The per-GPU event that ends a sharing process's wait for memory without polling:
 * <run dir>/share-<UUID>.event, beside the GPU's decision lock. Its first bytes are shared by
 * every sharing process of the GPU (mapped): how many wait and until when, how often memory was
 * given back and when last. A process that frees device memory (into its cache, which counts as
 * free, or back to the driver), trims, or is slept bumps it when anyone waits: one write, which
 * inotify turns into an event for the waiters. A waiter blocks in poll() on that inotify watch and
 * on pidfds of the sharing processes of the GPU (so that one killed at any moment, which bumps
 * nothing, still wakes it), with a timeout bounded by its deadline. Without inotify or pidfd_open
 * it falls back to bounded looks (FALLBACK_MS). A waiter that dies leaves its count behind; its
 * deadline bounds the cost (bumps that nobody reads). */
#include "share_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../core/log.h"
#include "../../core/mono_wait.h"

#define EVENT_MAGIC 0x3176657765727368ULL /* "hsrewev1" */
#define EVENT_BYTES 4096
#define PING_OFFSET 512  /* the byte a bump writes (its write is what inotify reports) */
#define FALLBACK_MS 200  /* the longest look without events (no inotify, no pidfd) */
/* A wait watches at most this many processes' exits (a descriptor each); with more, the others'
 * exits are seen by bounded looks (FALLBACK_MS). */
#define WATCHED_MAX 256

struct event_page {
	uint64_t magic;
	atomic_int waiters;
	int pad;
	atomic_llong waiting_until_ms; /* CLOCK_MONOTONIC: one clock for all processes */
	atomic_ullong bumps;
	atomic_llong last_bump_us;    /* CLOCK_MONOTONIC, for the latency a waiter logs */
};

struct share_event {
	int fd;
	struct event_page *page;
	char path[SHARE_PATH_MAX];
};

/* This process's events, by driver ordinal (a GPU's page is mapped once). */
static struct share_per_gpu events = SHARE_PER_GPU_INIT;

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *event_open(const char *dir, const char *uuid)
{
	struct share_event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	ev->page = share_gpu_file_map(dir, uuid, "event", EVENT_BYTES, &ev->fd, ev->path);
	if (!ev->page) {
		free(ev);
		return NULL;
	}
	if (ev->page->magic != EVENT_MAGIC) /* new (zeros): the same value whoever writes it */
		ev->page->magic = EVENT_MAGIC;
	return ev;
}

struct share_event *share_event_of(int dev)
{
	return share_per_gpu(&events, dev, share_settings_get()->run_dir, event_open);
}

static void bump(struct share_event *ev)
{
	struct event_page *pg = ev->page;
	char one = 1;

	if (atomic_load_explicit(&pg->waiters, memory_order_relaxed) <= 0 ||
	    vmm_now_ms() >= atomic_load_explicit(&pg->waiting_until_ms, memory_order_relaxed))
		return; /* nobody waits: a free costs a clock read */
	atomic_store(&pg->last_bump_us, now_us());
	atomic_fetch_add(&pg->bumps, 1);
	if (pwrite(ev->fd, &one, 1, PING_OFFSET) != 1)
		vmm_log(VMM_LOG_DEBUG, "share: could not signal %s: %s", ev->path, strerror(errno));
}

void share_note_freed(void)
{
	if (!share_enabled())
		return;
	/* Every GPU this process has an event for: a free does not say which cheaply, and a
	 * bump nobody needs only wakes a waiter for one more look. */
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		struct share_event *ev = atomic_load_explicit(&events.by_dev[d], memory_order_acquire);

		if (ev)
			bump(ev);
	}
}

bool share_event_begin(struct share_event *ev, long long deadline_ms, struct share_waiter *w)
{
	struct event_page *pg = ev->page;
	long long cur = atomic_load(&pg->waiting_until_ms);

	memset(w, 0, sizeof(*w));
	w->ev = ev;
	w->inotify = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (w->inotify >= 0 && inotify_add_watch(w->inotify, ev->path, IN_MODIFY) < 0) {
		close(w->inotify);
		w->inotify = -1;
	}
	/* Registered before the caller's first look: a free after it is never missed. */
	atomic_fetch_add(&pg->waiters, 1);
	while (cur < deadline_ms &&
	       !atomic_compare_exchange_weak(&pg->waiting_until_ms, &cur, deadline_ms))
		;
	return w->inotify >= 0;
}

void share_event_end(struct share_waiter *w)
{
	if (!w->ev)
		return;
	atomic_fetch_sub(&w->ev->page->waiters, 1);
	if (w->inotify >= 0)
		close(w->inotify);
	w->ev = NULL;
}

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Empty the inotify queue (what woke us is handled by the caller's next look). */
static bool drain(int fd)
{
	char buf[4096] __attribute__((aligned(8)));
	bool any = false;

	while (read(fd, buf, sizeof(buf)) > 0)
		any = true;
	return any;
}

enum share_woken share_event_wait(struct share_waiter *w, const pid_t *pids, int npids,
				  long long until_ms, pid_t *who, long long *latency_us)
{
	struct pollfd fds[1 + WATCHED_MAX];
	pid_t of[1 + WATCHED_MAX]; /* whose pidfd each entry is (0: the inotify watch) */
	int n = 0, rc;
	long long left = until_ms - vmm_now_ms();
	bool fallback = w->inotify < 0;
	enum share_woken why = SHARE_WOKEN_TIMEOUT;

	*who = 0;
	*latency_us = 0;
	if (w->inotify >= 0) {
		of[n] = 0;
		fds[n++] = (struct pollfd){ .fd = w->inotify, .events = POLLIN };
	}
	if (npids > WATCHED_MAX)
		fallback = true;
	for (int i = 0; i < npids && i < WATCHED_MAX; i++) {
		int fd = pidfd_of(pids[i]);

		if (fd < 0 && errno == ESRCH) {
			*who = pids[i]; /* gone since the look: its memory is back */
			why = SHARE_WOKEN_EXIT;
			goto out;
		}
		if (fd < 0) {
			fallback = true;
			continue;
		}
		of[n] = pids[i];
		fds[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	}
	if (left < 0)
		left = 0;
	if (fallback && left > FALLBACK_MS)
		left = FALLBACK_MS;
	do
		rc = poll(fds, (nfds_t)n, (int)left);
	while (rc < 0 && errno == EINTR && (left = until_ms - vmm_now_ms()) > 0);
	for (int i = 0; rc > 0 && i < n; i++) {
		if (!fds[i].revents)
			continue;
		if (!of[i]) {
			if (drain(w->inotify) && why == SHARE_WOKEN_TIMEOUT) {
				long long at = atomic_load(&w->ev->page->last_bump_us);

				why = SHARE_WOKEN_FREE;
				*latency_us = at ? now_us() - at : 0;
			}
		} else {
			why = SHARE_WOKEN_EXIT; /* an exit outranks a free: it says who */
			*who = of[i];
		}
	}
out:
	for (int i = 0; i < n; i++)
		if (of[i])
			close(fds[i].fd);
	return why;
}
