/* After a group sleep: which memory the members share through the program's own exported and
 * imported VMM handles, who holds it, and why it stays resident (group_shares.c). */
#ifndef VMMCTL_GROUP_SHARES_H
#define VMMCTL_GROUP_SHARES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "client.h"

/* Ask each member (targets t[0..n)) for its app_share records, all at once, each within timeout
 * seconds;
 * match them across the members with kcmp(KCMP_FILE); look for other processes of this user that
 * hold the same memory; print one line per shared memory (text) or a "shared" JSON array value
 * (json: what follows `"shared": `). Prints nothing in text when nothing is shared. */
#define MAX_SHARES 256     /* handles over all members */
#define MAX_OUTSIDE 8      /* other processes named per memory */

/* One member's shared handle, from its app_share record. */
struct share {
	pid_t pid;
	uint64_t handle, size;
	bool exporter;
	bool released;         /* released by a group sleep (no descriptors: not matched) */
	int fds[8], nfds;      /* the shim's duplicates, in pid (an exporter: one per export) */
	long long program_fds, program_fd, kcmp_errno;
	int memory;            /* index of the memory it belongs to */
};

/* One memory, held by the shares whose `memory` is its index. */
struct memory {
	int first;             /* a share of it */
	int nholders;
	pid_t outside[MAX_OUTSIDE];
	int noutside;
	int kcmp_errno;        /* why it could not be matched, or 0 */
};

/* One member's app_share records (reply r of pid), appended to s from k on; the new count. */
int group_shares_take(pid_t pid, const client_reply *r, struct share *s, int k);
/* Group the shares into memories (m, returns how many): kcmp says which duplicates are one open
 * file; a released share is a memory of its own. */
int group_shares_match(struct share *s, int ns, struct memory *m);
/* Other processes of this user (not members t[0..n)) with a descriptor of one of the memories.
 * Only descriptors of the same inode as a share are compared with kcmp (a process holds many
 * descriptors, and this runs within the group's time); nothing is scanned when nothing is
 * shared. */
void group_shares_outside(const client_target *t, int n, struct share *s, int ns,
			  struct memory *m, int nm);

/* Each member that sel selects (NULL: all) asked for its status, all at once, each within
 * timeout seconds: r[i] (the caller frees each with client_reply_free) and answered[i]. */
void group_shares_status(const client_target *t, int n, const bool *sel, double timeout,
			 client_reply *r, bool *answered);

/* A memory vmmctl itself kept out of the release (its exporter's pid and value): too many
 * shared handles for a member's sleep request (group_release.h). */
struct share_kept {
	pid_t exporter;
	uint64_t handle;
};

void group_shares_report(const client_target *t, int n, double timeout,
			 const struct share_kept *kept, int nkept, bool json, FILE *out);

#endif
