/* Criterion assertions over the control harness (harness.h) that every control test uses: a
 * target that must start, a command that must be answered as expected. A failure names the
 * command and the reply. */
#ifndef CTL_HARNESS_ASSERT_H
#define CTL_HARNESS_ASSERT_H

#include <criterion/criterion.h>
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
