/* Criterion assertions over the control harness (harness.h) that every control test uses: a
 * target that must start, a command that must be answered as expected. A failure names the
 * command and the reply. */
#ifndef CTL_HARNESS_ASSERT_H
#define CTL_HARNESS_ASSERT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* Long enough for a loaded 2-core machine under a sanitizer; a hung target still fails. */
#define CMD_TIMEOUT_MS 30000

static inline struct target *start_under_shim(const char *const *env)
{
	struct target *t = target_start(env);

	cr_assert(t, "the target did not start under the shim");
	return t;
}

/* A target under the shim holding n buffers of `bytes` each, written by ctl_target's alloc. */
static inline struct target *start_holding(const char *const *env, int n, size_t bytes)
{
	struct target *t = target_start(env);
	char cmd[64], line[64];

	cr_assert(t, "ctl_target did not start under the shim");
	snprintf(cmd, sizeof(cmd), "alloc %d %zu", n, bytes);
	cr_assert_eq(target_cmd(t, cmd, line, sizeof(line), 20000), 0, "no reply to '%s'", cmd);
	cr_assert_str_eq(line, "ok");
	return t;
}

/* The target must exit cleanly; then it is freed. */
static inline void stop_cleanly(struct target *t)
{
	cr_expect_eq(target_stop(t, 10000), 0, "the program did not exit cleanly");
	target_free(t);
}

static inline void cmd_ok_within(struct target *t, const char *cmd, const char *want,
				 int timeout_ms)
{
	char reply[256];

	cr_assert_eq(target_cmd(t, cmd, reply, sizeof(reply), timeout_ms), 0,
		     "no reply to '%s'", cmd);
	cr_assert(!strncmp(reply, want, strlen(want)), "'%s' answered '%s', expected '%s...'",
		  cmd, reply, want);
}

static inline void cmd_ok(struct target *t, const char *cmd, const char *want)
{
	cmd_ok_within(t, cmd, want, CMD_TIMEOUT_MS);
}

#endif
