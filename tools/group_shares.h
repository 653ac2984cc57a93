/* After a group sleep: which memory the members share through the program's own exported and
 * imported VMM handles, who holds it, and why it stays resident (group_shares.c). */
#ifndef VMMCTL_GROUP_SHARES_H
#define VMMCTL_GROUP_SHARES_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "client.h"

/* Ask each member (targets t[0..n)) for its app_share records, all at once, each within timeout
 * seconds;
 * match them across the members with kcmp(KCMP_FILE); look for other processes of this user that
 * hold the same memory; print one line per shared memory (text) or a "shared" JSON array value
 * (json: what follows `"shared": `). Prints nothing in text when nothing is shared. */
void group_shares_report(const client_target *t, int n, double timeout, bool json, FILE *out);

#endif
