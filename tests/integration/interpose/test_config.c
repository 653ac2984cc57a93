/* The shim's settings (shim/config.h): sizes, defaults, and invalid values that get a message and
 * the default instead of stopping the program. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../../shim/config.h"

Test(config, sizes)
{
	size_t v = 7;

	cr_assert(shim_parse_size("4096", &v) && v == 4096);
	cr_assert(shim_parse_size("64M", &v) && v == (size_t)64 << 20);
	cr_assert(shim_parse_size("2GiB", &v) && v == (size_t)2 << 30);
	cr_assert(shim_parse_size("1.5g", &v) && v == (size_t)3 << 29);
	cr_assert(shim_parse_size("unlimited", &v) && v == SIZE_MAX);
	v = 7;
	cr_assert(!shim_parse_size("", &v));
	cr_assert(!shim_parse_size("-1", &v));
	cr_assert(!shim_parse_size("12Q", &v));
	cr_assert(!shim_parse_size("lots", &v));
	cr_assert(!shim_parse_size(" 5", &v));
	cr_assert(!shim_parse_size("99999999999T", &v));
	cr_assert_eq(v, 7, "a rejected value changed the output");
}

static void clear_env(void)
{
	static const char *const vars[] = { "VMMSHIM_DISABLE", "VMMSHIM_LOG", "VMMSHIM_CACHE_LIMIT",
					    "VMMSHIM_RESERVE", "VMMSHIM_MAX_HANDLE",
					    "VMMSHIM_WHOLE_HANDLE_MIN",
					    "VMMSHIM_SMALL_MAX", "VMMSHIM_RUN_DIR",
					    "VMMSHIM_AUTOWAKE", "VMMSHIM_PROVISION_BACKUP",
					    "VMMSHIM_CONTROL" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

Test(config, defaults)
{
	shim_config c;
	vmm_config core;

	clear_env();
	shim_config_load(&c);
	vmm_config_defaults(&core);
	cr_assert(!c.disable && !c.autowake && c.control);
	cr_assert_eq(c.log_level, VMM_LOG_WARN);
	cr_assert_eq(c.core.cache_limit, core.cache_limit);
	cr_assert_eq(c.core.max_handle_bytes, core.max_handle_bytes);
	cr_assert_eq(c.core.whole_handle_min, core.whole_handle_min);
	cr_assert_eq(c.core.small_max, core.small_max);
	cr_assert_eq(c.core.reserve_bytes, core.reserve_bytes);
	cr_assert(c.run_dir[0] == '/');
}

/* What the docs show (README, vmmshim(7): made from the same table) is what the shim does: a
 * default written as a value, set explicitly, changes nothing; every setting has a default and a
 * meaning, and its variable is a VMMSHIM_ name. */
struct doc_check {
	shim_config base;
	int values, computed;
};

static void documented_default_is_applied(const char *env, const char *def, const char *help,
					  void *arg)
{
	struct doc_check *d = arg;
	shim_config c;

	cr_assert(!strncmp(env, "VMMSHIM_", 8), "%s is not a VMMSHIM_ variable", env);
	cr_assert(def && def[0], "%s has no documented default", env);
	cr_assert(help && strlen(help) > 10, "%s has no meaning written", env);
	if (def[0] == '(') {
		cr_assert(def[strlen(def) - 1] == ')', "%s: a computed default is \"(how)\"", env);
		d->computed++;
		return;
	}
	setenv(env, def, 1);
	shim_config_load(&c);
	unsetenv(env);
	cr_assert(!memcmp(&c, &d->base, sizeof(c)),
		  "%s=%s (its documented default) is not what the shim uses without it", env, def);
	d->values++;
}

Test(config, documented_defaults_are_the_defaults, .init = cr_redirect_stderr)
{
	struct doc_check d = { 0 };

	clear_env();
	shim_config_load(&d.base);
	shim_config_each(documented_default_is_applied, &d);
	cr_assert_geq(d.values, 8);
	cr_assert_geq(d.computed, 2);
	fflush(stderr);
	cr_assert_stderr_eq_str("", "a documented default was refused as invalid");
}

Test(config, values_from_the_environment)
{
	shim_config c;

	clear_env();
	setenv("VMMSHIM_DISABLE", "yes", 1);
	setenv("VMMSHIM_LOG", "debug", 1);
	setenv("VMMSHIM_CACHE_LIMIT", "256M", 1);
	setenv("VMMSHIM_MAX_HANDLE", "64m", 1);
	setenv("VMMSHIM_WHOLE_HANDLE_MIN", "16M", 1);
	setenv("VMMSHIM_RUN_DIR", "/run/x", 1);
	setenv("VMMSHIM_AUTOWAKE", "1", 1);
	shim_config_load(&c);
	cr_assert(c.disable && c.autowake);
	cr_assert_eq(c.log_level, VMM_LOG_DEBUG);
	cr_assert_eq(c.core.cache_limit, (size_t)256 << 20);
	cr_assert_eq(c.core.max_handle_bytes, (size_t)64 << 20);
	cr_assert_eq(c.core.whole_handle_min, (size_t)16 << 20);
	cr_assert_str_eq(c.run_dir, "/run/x");
	cr_assert(shim_config_disabled());
}

Test(config, invalid_values_get_a_message_and_the_default, .init = cr_redirect_stderr)
{
	shim_config c, d;

	clear_env();
	shim_config_load(&d);
	setenv("VMMSHIM_CACHE_LIMIT", "plenty", 1);
	setenv("VMMSHIM_LOG", "loud", 1);
	setenv("VMMSHIM_RUN_DIR", "relative/dir", 1);
	setenv("VMMSHIM_DISABLE", "perhaps", 1);
	shim_config_load(&c);
	cr_assert_eq(c.core.cache_limit, d.core.cache_limit);
	cr_assert_eq(c.log_level, VMM_LOG_WARN);
	cr_assert_str_eq(c.run_dir, d.run_dir);
	cr_assert(!c.disable);
	fflush(stderr);
	cr_assert_stderr_neq_str("");
}

Test(config, the_sleep_timeout_takes_seconds, .init = cr_redirect_stderr)
{
	shim_config c;

	clear_env();
	unsetenv("VMMSHIM_SLEEP_TIMEOUT");
	shim_config_load(&c);
	cr_assert_eq(c.sleep_timeout_s, 30);
	setenv("VMMSHIM_SLEEP_TIMEOUT", "2.5", 1);
	shim_config_load(&c);
	cr_assert_eq(c.sleep_timeout_s, 2.5);
	setenv("VMMSHIM_SLEEP_TIMEOUT", "500ms", 1);
	shim_config_load(&c);
	cr_assert_eq(c.sleep_timeout_s, 0.5);
	setenv("VMMSHIM_SLEEP_TIMEOUT", "-1", 1);
	shim_config_load(&c);
	cr_assert_eq(c.sleep_timeout_s, 30, "a bad value gets the default");
	unsetenv("VMMSHIM_SLEEP_TIMEOUT");
	fflush(stderr);
	cr_assert_stderr_neq_str("");
}

Test(config, the_uncut_scan_is_a_count_from_0_to_1000, .init = cr_redirect_stderr)
{
	shim_config c;
	vmm_config core;

	clear_env();
	vmm_config_defaults(&core);
	unsetenv("VMMSHIM_UNCUT_SCAN");
	shim_config_load(&c);
	cr_assert_eq(c.core.uncut_scan, core.uncut_scan);
	cr_assert_gt(c.core.uncut_scan, 0, "on by default");
	setenv("VMMSHIM_UNCUT_SCAN", "0", 1);
	shim_config_load(&c);
	cr_assert_eq(c.core.uncut_scan, 0, "0 turns it off");
	setenv("VMMSHIM_UNCUT_SCAN", "256", 1);
	shim_config_load(&c);
	cr_assert_eq(c.core.uncut_scan, 256);
	setenv("VMMSHIM_UNCUT_SCAN", "-1", 1);
	shim_config_load(&c);
	cr_assert_eq(c.core.uncut_scan, core.uncut_scan, "a negative count gets the default");
	setenv("VMMSHIM_UNCUT_SCAN", "1001", 1);
	shim_config_load(&c);
	cr_assert_eq(c.core.uncut_scan, core.uncut_scan, "so does one over 1000");
	unsetenv("VMMSHIM_UNCUT_SCAN");
	fflush(stderr);
	cr_assert_stderr_neq_str("");
}
