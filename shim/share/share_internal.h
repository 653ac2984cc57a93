/* What the sharing files share among themselves (not part of any contract). */
#ifndef VMMSHIM_SHARE_INTERNAL_H
#define VMMSHIM_SHARE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "share.h"

#define SHARE_UUID_MAX 64
/* Without a member table (share_members.c), a round reads at most this many processes of the
 * control folder. */
#define SHARE_FOLDER_MAX 256
/* A GPU's member table holds this many processes at once. */
#define SHARE_MEMBER_SLOTS 1024

/* A file every sharing process of a GPU maps: <dir>/share-<uuid>.<suffix>, created with zeros
 * and grown to bytes when shorter, mapped shared; NULL (nothing left open) when it is another
 * user's, not a regular file, or cannot be had. *fd_out: its descriptor; path: its name. */
#define SHARE_PATH_MAX 400
void *share_gpu_file_map(const char *dir, const char *uuid, const char *suffix, size_t bytes,
			 int *fd_out, char path[SHARE_PATH_MAX]);
/* What this process opened once per driver ordinal (an event, a member table). */
struct share_per_gpu {
	void *_Atomic by_dev[VMM_MAX_DEVICES];
	pthread_mutex_t lock;
};
#define SHARE_PER_GPU_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }
/* c's entry for device dev, opened by open_fn(dir, the GPU's UUID) the first time; NULL when dev
 * is out of range, the driver does not say its UUID yet, or open_fn fails (asked again). */
void *share_per_gpu(struct share_per_gpu *c, int dev, const char *dir,
		    void *(*open_fn)(const char *dir, const char *uuid));

/* The settings sharing runs with (copied from the runtime's configuration at share_init). */
typedef struct share_settings {
	int priority;
	long long idle_ms, slice_ms, residency_ms, wait_ms;
	long long test_stall_ms; /* VMMSHIM_TEST_SHARE_STALL_MS: tests only (share_room.c) */
	char run_dir[256];
} share_settings;
const share_settings *share_settings_get(void);

/* A sharing peer of a GPU as a look found it. */
struct share_peer {
	pid_t pid;
	int priority, ordinal;
	long long idle_ms, resident_ms;
	/* bytes on this GPU its sleep alone would release (not those other processes map), and of
	 * them those in its cache */
	uint64_t releasable, cached;
	bool awake;
};

/* What a look at a process found. */
enum share_look {
	SHARE_LOOK_NONE,  /* not a sharing process of this GPU, no answer, or not looked at */
	SHARE_LOOK_PEER,  /* a peer: its share_peer says what it holds and may do */
	SHARE_LOOK_BUSY,  /* a peer whose allocator waits for its device: no figures now */
};

/* hello, status, trim: a call to a peer takes at most this, and not past the wait */
#define SHARE_PEER_TIMEOUT_MS 2000
/* The time a call to a peer may take now, for a wait that ends at deadline (monotonic ms). */
int share_call_ms(long long deadline);

/* One round's looks (share_look.c): whom it asked, what each is, and the sharing peers among
 * them (peers[0..npeers)). */
struct share_round {
	pid_t *pids;
	enum share_look *looks; /* for each of pids[0..npids) */
	struct share_peer *peers;
	int npids, npeers;
	bool busy; /* a peer whose allocator waits for its device: no figures now */
};
/* Ask the members of device dev's GPU uuid (or, without a member table, the processes of the
 * control folder) what they are, side by side within deadline; a member that did not answer and
 * is gone for good loses its slot. false when there was no memory for it (r empty). */
bool share_round_look(int dev, const char *uuid, long long deadline, struct share_round *r);
void share_round_free(struct share_round *r);

/* The sharing processes of a GPU (share_members.c): the table in <dir>/share-<uuid>.members,
 * mapped; NULL when it cannot be had (another user's file, no memory). */
struct share_members;
struct share_members *share_members_open(const char *dir, const char *uuid);
void share_members_close(struct share_members *m);
/* Take a slot for pid (start: its start time, proc_start.h); true when it has one (already had,
 * or a free one, or one of a process gone for good); false when every slot is live. */
bool share_members_join(struct share_members *m, pid_t pid, uint64_t start);
/* Give pid's slots back. */
void share_members_leave(struct share_members *m, pid_t pid);
/* The members but self, each once, up to max; returns how many. */
int share_members_list(struct share_members *m, pid_t self, pid_t *out, int max);
/* Free pid's slots when its process is gone for good (no listener on its socket, and ended or
 * its pid another process's now); returns how many were freed. */
int share_members_prune(struct share_members *m, pid_t pid);
/* This process's table of driver ordinal dev (opened once; NULL as above or without a UUID). */
struct share_members *share_members_of(int dev);

/* The per-GPU decision lock (share_gpu.c): 0 once held (bounded by deadline_ms on the monotonic
 * clock), -1 when not. Re-entrant on one thread for one GPU; a thread never holds two. */
int share_lock(const char *dir, const char *uuid, long long deadline_ms);
void share_unlock(void);
bool share_lock_held(void);

/* The GPU's event (share_event.c), mapped once per driver ordinal; NULL when it cannot be had
 * (the caller then waits in bounded looks). */
struct share_event;
struct share_event *share_event_of(int dev);

/* One wait for memory on a GPU: registered (share_event_begin) before the first look at the GPU,
 * so that a free after that look is never missed; ended once the caller stops waiting. */
struct share_waiter {
	struct share_event *ev;
	int inotify; /* -1: no inotify, bounded looks */
};
enum share_woken { SHARE_WOKEN_TIMEOUT, SHARE_WOKEN_FREE, SHARE_WOKEN_EXIT };
bool share_event_begin(struct share_event *ev, long long deadline_ms, struct share_waiter *w);
/* Block until a sharing process of the GPU bumps its event, one of pids exits (*who says which),
 * or until_ms (monotonic) comes; *latency_us: from the bump to now (0: unknown). */
enum share_woken share_event_wait(struct share_waiter *w, const pid_t *pids, int npids,
				  long long until_ms, pid_t *who, long long *latency_us);
void share_event_end(struct share_waiter *w);

/* Waiting for memory, for the info record. */
void share_wait_begin(void);
void share_wait_end(void);
/* One round of making room (looks, in the info record); the processes it asked (looked_at). */
void share_note_look(void);
void share_note_looked(int processes);

#endif
