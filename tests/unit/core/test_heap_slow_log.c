/* The log line of a slow allocation (heap_fit.c): at debug level, an allocation that took the
 * configuration's slow_log_s or more (here 1 ms, so that a sanitizer's slower sync stays under
 * it) says its size, its time and what the heap did for it; a fast one, one under a larger
 * threshold, or any one below debug level, says nothing. simdev's SIMDEV_DELAY makes handle
 * creation slow. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "log.h"

static char log_path[64];

/* The child's stderr goes to log_path (the parent reads it afterwards). */
static void stderr_to_file(void)
{
	if (!freopen(log_path, "w", stderr))
		exit(90);
	setvbuf(stderr, NULL, _IONBF, 0);
}

/* 64 MiB of new memory (one handle, created in 5 ms), then the same again from the cache (64 MiB
 * in quarantine: one sync makes it reusable). */
static int allocations(vmm_log_level level, double slow_log_s)
{
	struct tctx t;
	vmm_config cfg;
	vmm_devptr p;

	stderr_to_file();
	vmm_log_set_level(level);
	vmm_config_defaults(&cfg);
	cfg.slow_log_s = slow_log_s;
	t_open(&t, &cfg);
	if (vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &p, NULL))
		return 1;
	vmm_free(t.core, p, NULL);
	fprintf(stderr, "--- cached\n");
	if (vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &p, NULL))
		return 2;
	vmm_free(t.core, p, NULL);
	t_close(&t);
	return 0;
}

static int at_debug(void)
{
	return allocations(VMM_LOG_DEBUG, 1e-3);
}

static int at_debug_over_50ms(void)
{
	return allocations(VMM_LOG_DEBUG, 50e-3);
}

static int at_info(void)
{
	return allocations(VMM_LOG_INFO, 1e-3);
}

static char *read_log(void)
{
	static char buf[8192];

	return t_read_log(log_path, buf, sizeof(buf)); /* the child's */
}

static const char *const slow_create[] = { "SIMDEV_DELAY=cuMemCreate:5", NULL };

Test(heap_slow_log, debug_names_a_slow_allocation_and_what_it_did)
{
	long long live;
	char *log, *cached;

	snprintf(log_path, sizeof(log_path), "/tmp/vmm-slowlog-%d", (int)getpid());
	cr_assert_eq(t_run_child(at_debug, slow_create, &live), 0);
	log = read_log();
	cached = strstr(log, "--- cached");
	cr_assert(cached, "the scenario ran to its end: %s", log);
	*cached = 0;
	cr_assert(strstr(log, "a block of 67108864 bytes took "), "no line for the slow one: %s",
		  log);
	cr_assert(strstr(log, ": 0 syncs, 1 handles created, 0 released, 0 moved"),
		  "the line says what the heap did: %s", log);
	cr_assert_null(strstr(cached + 1, "a block of"), "the cached one is fast: %s", cached + 1);
}

Test(heap_slow_log, silent_below_debug)
{
	long long live;

	snprintf(log_path, sizeof(log_path), "/tmp/vmm-slowlog-%d", (int)getpid());
	cr_assert_eq(t_run_child(at_info, slow_create, &live), 0);
	cr_assert_null(strstr(read_log(), "a block of"));
}

/* The 5 ms creation is under a 50 ms threshold (wide, for a loaded machine): nothing is
 * logged. */
Test(heap_slow_log, silent_under_the_threshold)
{
	long long live;

	snprintf(log_path, sizeof(log_path), "/tmp/vmm-slowlog-%d", (int)getpid());
	cr_assert_eq(t_run_child(at_debug_over_50ms, slow_create, &live), 0);
	cr_assert_null(strstr(read_log(), "a block of"));
}
