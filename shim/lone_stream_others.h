/* The streams that got work since the last lone stream lost its place (lone_stream.h), each with
 * an event recorded after its last work: one stream may become lone again only once every other
 * has finished what it was given. Called with lone_stream.c's lock held. */
#ifndef VMMSHIM_LONE_STREAM_OTHERS_H
#define VMMSHIM_LONE_STREAM_OTHERS_H

#include <stdbool.h>
#include <stdint.h>

#include "driver_table.h"

/* More streams than this in one program: it uses many streams, and lone mode is not tried again. */
#define OTHERS_MAX 8

/* A stream any thread can name: its handle, or (ctx, NULL) for the legacy stream of ctx. key is
 * lone_stream.c's key for it (never 0). */
struct stream_name {
	uintptr_t key;
	CUstream h;
	CUcontext ctx;
};

/* Fill in the context of a created stream (events are recorded in their stream's context);
 * false when the driver does not know the stream. */
bool stream_name_context(struct stream_name *s);

/* Record *ev on s after its work so far, in s's context, making *ev first when it is NULL;
 * false when the driver refuses. */
bool stream_name_record(const struct stream_name *s, CUevent *ev);

/* Wait on the host for s's work so far (in s's context); the driver's answer. */
CUresult stream_name_sync(const struct stream_name *s);

/* A submission to s is about to reach the driver: a token for others_submitted, or -1 when the
 * table is full or s has no context. Fills in s->ctx. */
int others_submitting(struct stream_name *s);

/* That submission returned: the stream has work its event does not cover yet. A token from
 * before the table was last cleared is ignored. */
void others_submitted(int token);

/* Track s (the lone stream whose episode ended) with an event recorded now, after its work so
 * far. False when the table is full. */
bool others_note(const struct stream_name *s);

/* Stream h is being destroyed: its slot matches no later stream (its handle may come back as
 * another's), and its event is recorded now if its last work is not covered yet. */
void others_forget(CUstream h);

/* Has every stream but `key` finished its work? Records an event on each that has new work and
 * none in flight (a later call then sees whether it finished); no waiting. */
bool others_idle_except(uintptr_t key);

/* Empty the table (its events are left alive). */
void others_clear(void);

#endif
