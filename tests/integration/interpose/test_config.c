/* The shim's settings (shim/config.h): sizes, defaults, and invalid values that get a message and
 * the default instead of stopping the program. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdint.h>
#include <stdlib.h>

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
	cr_assert(c.run_dir[0] == '/');
}

Test(config, values_from_the_environment)
{
	shim_config c;

	clear_env();
	setenv("VMMSHIM_DISABLE", "yes", 1);
	setenv("VMMSHIM_LOG", "debug", 1);
	setenv("VMMSHIM_CACHE_LIMIT", "256M", 1);
	setenv("VMMSHIM_MAX_HANDLE", "64m", 1);
	setenv("VMMSHIM_RUN_DIR", "/run/x", 1);
	setenv("VMMSHIM_AUTOWAKE", "1", 1);
	shim_config_load(&c);
	cr_assert(c.disable && c.autowake);
	cr_assert_eq(c.log_level, VMM_LOG_DEBUG);
	cr_assert_eq(c.core.cache_limit, (size_t)256 << 20);
	cr_assert_eq(c.core.max_handle_bytes, (size_t)64 << 20);
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
