/* Which device call each thread inside the submission gate is in, for the message of a close
 * that gives up ("1 thread(s) still inside a device call after 10000 ms (cuMemAlloc_v2)"): what a
 * user debugging a sleep that could not start needs to know. Each thread that enters gets a slot
 * at its first entry (given back when the thread ends); entering and leaving store a pointer in
 * it, relaxed. */
#ifndef VMMSHIM_GATE_WHO_H
#define VMMSHIM_GATE_WHO_H

#include <stddef.h>

/* This thread is now inside `what` (a string that lives for good: the hook's __func__); NULL:
 * it has left. */
void gate_who_set(const char *what);

/* The calls that threads other than the caller are inside now, distinct, joined by ", " into
 * buf (at most cap bytes, "..." when cut); "" when none is known. */
void gate_who_list(char *buf, size_t cap);

/* In a forked child: only this thread is left. */
void gate_who_after_fork(void);

#endif
