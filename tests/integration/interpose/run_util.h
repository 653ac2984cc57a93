/* Running a test program the way a user would (LD_PRELOAD=libvmmshim.so, simdev on
 * LD_LIBRARY_PATH) and reading what it left: exit status, stdout, stderr (the shim's log) and
 * simdev's SIMDEV_STATS counters. */
#ifndef RUN_UTIL_H
#define RUN_UTIL_H

#include <stdbool.h>

#define RUN_TEXT_MAX (256 * 1024)

struct run {
	int status;               /* exit status; 128 + signal when killed */
	char out[RUN_TEXT_MAX];
	char err[RUN_TEXT_MAX];
	char stats[RUN_TEXT_MAX]; /* SIMDEV_STATS (or SIMDEV_ACL_STATS) file */
	char dir[256];            /* a fresh folder: cwd of the program; run/ is VMMSHIM_RUN_DIR */
};

/* Run argv with `preload` as LD_PRELOAD (NULL: none) and extra "K=V" settings (NULL-ended).
 * Returns r (allocated; free with free()). Paths: tests pass "@BIN/name" for a program built here. */
struct run *run_program(const char *preload, const char *const *argv, const char *const *env);

/* A simdev counter from the run's stats ("live_bytes", "cuMemAlloc_v2", ...); 0 when absent. */
long long run_stat(const struct run *r, const char *name);

/* The shim library and the folder of the test programs. */
const char *shim_path(void);
const char *bin_path(const char *name);

bool run_dir_exists(const struct run *r);
/* Remove the run's folder and free it. */
void run_free(struct run *r);

#endif
