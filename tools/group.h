/* vmmctl sleep PID PID... / wake PID PID...: several processes as one operation (group.c). */
#ifndef VMMCTL_GROUP_H
#define VMMCTL_GROUP_H

#include "cli.h"

/* How long a group operation may take when no --timeout is given (seconds). */
#define GROUP_DEFAULT_TIMEOUT 120.0
/* The first attempt's bound on each member's device drain; it doubles at each retry, up to
 * GROUP_DRAIN_MAX_MS (and never past the deadline). */
#define GROUP_DRAIN_FIRST_MS 500
#define GROUP_DRAIN_MAX_MS 8000

/* Sleep or wake a->pids[0..a->npids) as one operation; prints the outcome (text or JSON) and
 * returns vmmctl's exit code. */
int group_run(const vmmctl_args *a);

#endif
