/* Which of the program's own shared VMM memories a group sleep releases (group_release.c). */
#ifndef VMMCTL_GROUP_RELEASE_H
#define VMMCTL_GROUP_RELEASE_H

#include <stdbool.h>

#include "cli.h"
#include "client.h"
#include "group_shares.h"

#define GROUP_RELEASE_MAX_IMPORTERS VMMCTL_MAX_GROUP   /* per memory: every other member */

struct release_memory {
	int exporter;                        /* member index */
	uint64_t handle;                     /* the exporter's value */
	uint64_t exporter_start;             /* its start time, to tell a reused pid (0: unknown) */
	int importer[GROUP_RELEASE_MAX_IMPORTERS];
	uint64_t import_handle[GROUP_RELEASE_MAX_IMPORTERS];
	int nimporters;
	bool dropped;                        /* stays resident after all */
	bool over;                           /* ...because a member's request had no room for it */
	bool confirmed;                      /* this attempt: every importer released it */
};

struct group_release {
	struct release_memory mem[MAX_SHARES];
	int nmem;
	bool exporter[VMMCTL_MAX_GROUP];     /* exports a memory the group releases */
	bool importer[VMMCTL_MAX_GROUP];     /* imports one */
};

/* From the members' status replies (r[i] of member t[i]; NULL: no answer): the memories whose
 * every holder is a member that lets it go in this sleep: matched (kcmp), exported by a member,
 * no descriptor held open by a program, no process outside the group holding it, and no
 * importer that sleeps only in the second phase (second[i]: it exports legacy-IPC memory, and so
 * drains only then). A member may export one memory and import another (NCCL's ranks): it
 * releases its imports in the first phase and its exports in the second. A memory that one of
 * its members' requests has no more room for (app_release, PROTO_APP_RELEASE_MAX) stays
 * resident, marked over. */
void group_release_plan(const client_target *t, const client_reply *const *r, int n,
			const bool *second, struct group_release *g);
/* After the first phase: which memories every importer has released (its status lists the
 * import as released; r[i]: member i's status reply, NULL when it was not asked or did not
 * answer). An importer that was asleep already, or skipped the handle, kept its mapping: then
 * the exporter must keep the memory too. */
void group_release_confirm(struct group_release *g, const client_reply *const *r, int n);
/* Member i's app_release value for its sleep (into out, "" when it releases nothing): its
 * imports (the first phase), or its exports that group_release_confirm confirmed (exports:
 * the second phase). group_release_plan left out what would not fit. */
void group_release_request(const struct group_release *g, int i, const client_target *t,
			   bool exports, char *out, size_t cap);

#endif
