/* What the sharing files share among themselves (not part of any contract). */
#ifndef VMMSHIM_SHARE_INTERNAL_H
#define VMMSHIM_SHARE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "share.h"

#define SHARE_UUID_MAX 64
#define SHARE_MAX_PEERS 64

long long share_now_ms(void);

/* The settings sharing runs with (copied from the runtime's configuration at share_init). */
typedef struct share_settings {
	int priority;
	long long idle_ms, slice_ms, residency_ms, wait_ms;
	char run_dir[256];
} share_settings;
const share_settings *share_settings_get(void);

/* The per-GPU decision lock (share_gpu.c): 0 once held (bounded by deadline_ms on the monotonic
 * clock), -1 when not. Re-entrant on one thread for one GPU; a thread never holds two. */
int share_lock(const char *dir, const char *uuid, long long deadline_ms);
void share_unlock(void);
bool share_lock_held(void);

/* Waiting for memory, for the info record. */
void share_wait_begin(void);
void share_wait_end(void);

#endif
