/* The sharing processes of one GPU (share_internal.h): <run dir>/share-<UUID>.members, a table
 * of slots that every sharing process of the GPU maps. A process takes a slot at its first
 * allocation on the GPU; a round of making room asks only the processes named there. Before, a
 * round asked every process of the control folder (on a node of eight GPUs mostly processes of
 * the other seven, two calls each, under the GPU's lock) and read only the first 64, so a peer
 * that could have made room was never asked on a busy node.
 *
 * A slot holds a pid and its start time (/proc, clock ticks since boot). A slot is free again once
 * its process has no listener on its control socket and has ended, or its pid belongs to a later
 * process (the socket first: a member in another pid namespace sharing the folder is unknown to
 * this /proc but still listens). Slots change by compare-and-swap only, with a take count in the
 * word's high half, so that a slot freed and taken again meanwhile is never freed by a stale look;
 * nothing here blocks, and a process killed at any moment leaves at worst a slot that the next
 * round or joiner frees. */
#include "share_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../protocol/peer_client.h"
#include "../protocol/proc_start.h"

#define MEMBERS_MAGIC 0x31736d656d727368ULL /* "hsrmems1" */

struct member_slot {
	_Atomic uint64_t who;        /* pid in the low 32 bits (0: free), the take count above */
	_Atomic uint64_t start;      /* the pid's start time, */
	_Atomic uint64_t start_take; /* for this take count (another: not written yet) */
};

struct members_page {
	uint64_t magic;
	uint64_t reserved[7];
	struct member_slot slot[SHARE_MEMBER_SLOTS];
};

struct share_members {
	int fd;
	struct members_page *page;
	char dir[256]; /* the control folder (its sockets say who still serves) */
};

static pid_t pid_of(uint64_t who)
{
	return (pid_t)(uint32_t)who;
}

static uint64_t taken_by(uint64_t old, pid_t pid)
{
	return (((old >> 32) + 1) << 32) | (uint32_t)pid;
}

struct share_members *share_members_open(const char *dir, const char *uuid)
{
	struct share_members *m = calloc(1, sizeof(*m));
	char path[SHARE_PATH_MAX];

	if (!m)
		return NULL;
	if (snprintf(m->dir, sizeof(m->dir), "%s", dir) >= (int)sizeof(m->dir) ||
	    !(m->page = share_gpu_file_map(dir, uuid, "members", sizeof(struct members_page),
					   &m->fd, path))) {
		free(m);
		return NULL;
	}
	if (m->page->magic != MEMBERS_MAGIC) /* new (zeros): the same value whoever writes it */
		m->page->magic = MEMBERS_MAGIC;
	return m;
}

void share_members_close(struct share_members *m)
{
	if (!m)
		return;
	munmap(m->page, sizeof(struct members_page));
	close(m->fd);
	free(m);
}

/* Slot s's process is gone for good (above). A slot whose start is not written yet for its
 * take is judged by its socket and /proc alone. */
static bool slot_stale(const struct share_members *m, struct member_slot *s, uint64_t who)
{
	pid_t pid = pid_of(who);
	uint64_t start = atomic_load(&s->start);
	bool known = atomic_load(&s->start_take) == who >> 32;

	if (!pid || peer_client_serving(m->dir, pid))
		return false;
	return proc_ended(pid) || (known && start && proc_start_time(pid) != start);
}

bool share_members_join(struct share_members *m, pid_t pid, uint64_t start)
{
	struct member_slot *s = m->page->slot;

	/* Already there (a slot of this process: an exec'd image keeps its pid and start). */
	for (int i = 0; i < SHARE_MEMBER_SLOTS; i++)
		if (pid_of(atomic_load(&s[i].who)) == pid && atomic_load(&s[i].start) == start)
			return true;
	/* A free slot; failing that one whose process is gone. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < SHARE_MEMBER_SLOTS; i++) {
			uint64_t old = atomic_load(&s[i].who), mine;

			if (pid_of(old) && (!pass || !slot_stale(m, &s[i], old)))
				continue;
			mine = taken_by(old, pid);
			if (!atomic_compare_exchange_strong(&s[i].who, &old, mine))
				continue; /* taken meanwhile */
			atomic_store(&s[i].start, start);
			atomic_store(&s[i].start_take, mine >> 32);
			return true;
		}
	}
	return false;
}

void share_members_leave(struct share_members *m, pid_t pid)
{
	struct member_slot *s = m->page->slot;

	for (int i = 0; i < SHARE_MEMBER_SLOTS; i++) {
		uint64_t old = atomic_load(&s[i].who);

		if (pid_of(old) == pid)
			atomic_compare_exchange_strong(&s[i].who, &old, taken_by(old, 0));
	}
}

int share_members_list(struct share_members *m, pid_t self, pid_t *out, int max)
{
	struct member_slot *s = m->page->slot;
	int n = 0;

	for (int i = 0; i < SHARE_MEMBER_SLOTS && n < max; i++) {
		pid_t pid = pid_of(atomic_load(&s[i].who));
		bool seen = false;

		if (!pid || pid == self)
			continue;
		for (int j = 0; j < n && !seen; j++)
			seen = out[j] == pid;
		if (!seen)
			out[n++] = pid;
	}
	return n;
}

int share_members_prune(struct share_members *m, pid_t pid)
{
	struct member_slot *s = m->page->slot;
	int freed = 0;

	for (int i = 0; i < SHARE_MEMBER_SLOTS; i++) {
		uint64_t old = atomic_load(&s[i].who);

		if (pid_of(old) == pid && slot_stale(m, &s[i], old) &&
		    atomic_compare_exchange_strong(&s[i].who, &old, taken_by(old, 0)))
			freed++;
	}
	return freed;
}
