/* simdev's environment (read at first use), call counters, fault injection, injected slowness
 * and the stats file. Device capacity is counted by sim_group.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim_internal.h"

#define SIM_MAX_FAILS 32

struct sim_fail {
	char name[64]; /* an exported name, or a base name matching all its variants */
	unsigned long nth;
	atomic_ulong seen;
};

/* SIMDEV_DELAY: every call of a function waits this long before it does anything. */
struct sim_delay {
	char name[64]; /* an exported name, or a base name matching all its variants */
	unsigned long ms;
};

static struct sim_config config;
static struct sim_fail fails[SIM_MAX_FAILS];
static int nfails;
static struct sim_delay delays[SIM_MAX_FAILS];
static int ndelays;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic(struct sim_counter *) counters;
static atomic_int used;

static atomic_ullong ids;
/* Contexts made on each device: on a real GPU each one holds device memory (a primary context
 * about 500 MiB on an H200), so a process must make none on a device it does not use. */
static atomic_ulong contexts_made[SIM_MAX_DEVICES];

/* "16G", "512M", "4096": bytes with an optional K/M/G/T suffix (binary). */
static bool parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno || s[0] == '-')
		return false;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' && shift)
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v == 0 || (shift && v > (~0ULL >> shift)))
		return false;
	*out = (size_t)(v << shift);
	return true;
}

/* cuMemAlloc_v2_ptds -> cuMemAlloc: a SIMDEV_FAIL entry naming the base counts every variant. */
static void base_name(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s", name);
	size_t n = strlen(out);
	if (n > 5 && (!strcmp(out + n - 5, "_ptsz") || !strcmp(out + n - 5, "_ptds")))
		out[n -= 5] = 0;
	size_t i = n;
	while (i > 0 && out[i - 1] >= '0' && out[i - 1] <= '9')
		i--;
	if (i < n && i >= 2 && out[i - 1] == 'v' && out[i - 2] == '_')
		out[i - 2] = 0;
}

static bool add_fail(const char *name, unsigned long n)
{
	if (nfails == SIM_MAX_FAILS)
		return false;
	snprintf(fails[nfails].name, sizeof(fails[nfails].name), "%s", name);
	fails[nfails++].nth = n;
	return true;
}

static bool add_delay(const char *name, unsigned long n)
{
	if (ndelays == SIM_MAX_FAILS)
		return false;
	snprintf(delays[ndelays].name, sizeof(delays[ndelays].name), "%s", name);
	delays[ndelays++].ms = n;
	return true;
}

/* "name:N,name:N": add(name, N) for each entry with 1 <= N <= max; the others are reported on
 * stderr (as entries of `var`, `want` saying the form) and ignored. */
static void parse_entries(const char *spec, const char *var, const char *want, unsigned long max,
			  bool (*add)(const char *name, unsigned long n))
{
	char *copy = strdup(spec), *save = NULL;
	if (!copy)
		return;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':'), *end = NULL;
		unsigned long n = colon ? strtoul(colon + 1, &end, 10) : 0;
		if (colon && colon != tok && n >= 1 && n <= max && !*end) {
			*colon = 0;
			if (add(tok, n))
				continue;
			*colon = ':';
		}
		fprintf(stderr, "simdev: %s entry '%s' ignored (want %s)\n", var, tok, want);
	}
	free(copy);
}

/* A number of milliseconds 0..max from the environment; 0 when unset or bad (a message says so). */
static unsigned env_ms(const char *var, unsigned long max)
{
	const char *s = getenv(var);
	char *end;
	unsigned long ms;

	if (!s || !*s)
		return 0;
	ms = strtoul(s, &end, 10);
	if (*end || ms > max) {
		fprintf(stderr, "simdev: %s='%s' is not 0..%lu ms; ignored\n", var, s, max);
		return 0;
	}
	return (unsigned)ms;
}

static void init_once(void)
{
	const char *s = getenv("SIMDEV_MEMORY");
	config.memory = SIM_DEFAULT_MEMORY;
	if (s && !parse_size(s, &config.memory)) {
		fprintf(stderr, "simdev: SIMDEV_MEMORY='%s' is not a size (bytes, K/M/G/T); using 16G\n",
			s);
		config.memory = SIM_DEFAULT_MEMORY;
	}
	config.devices = 1;
	s = getenv("SIMDEV_DEVICES");
	if (s) {
		char *end;
		long n = strtol(s, &end, 10);
		if (end == s || *end || n < 1 || n > SIM_MAX_DEVICES)
			fprintf(stderr, "simdev: SIMDEV_DEVICES='%s' is not 1..%d; using 1\n", s,
				SIM_MAX_DEVICES);
		else
			config.devices = (int)n;
	}
	s = getenv("SIMDEV_FAIL");
	if (s && *s)
		parse_entries(s, "SIMDEV_FAIL", "name:N, N >= 1", ~0ul, add_fail);
	s = getenv("SIMDEV_DELAY");
	if (s && *s)
		parse_entries(s, "SIMDEV_DELAY", "name:MS, 1 <= MS <= 600000", 600000, add_delay);
	s = NULL;
	if (!strcmp(sim_lib_name, "acl"))
		s = getenv("SIMDEV_ACL_STATS");
	if (!s)
		s = getenv("SIMDEV_STATS");
	config.stats_path = (s && *s) ? strdup(s) : NULL;
	s = getenv("SIMDEV_SHARED");
	config.shared = (s && *s) ? strdup(s) : NULL;
	config.lock_stall_ms = env_ms("SIMDEV_LOCK_STALL", 60000);
	config.copy_delay_ms = env_ms("SIMDEV_COPY_DELAY", 60000);
	s = getenv("SIMDEV_PARTIAL_MAP");
	config.partial_map = s && !strcmp(s, "1");

	sim_group_init(&config);
}

const struct sim_config *sim_config(void)
{
	pthread_once(&once, init_once);
	return &config;
}

bool sim_enter(struct sim_counter *c)
{
	pthread_once(&once, init_once);
	atomic_store(&used, 1);
	atomic_fetch_add(&c->calls, 1);
	if (!atomic_exchange(&c->linked, 1)) {
		struct sim_counter *head = atomic_load(&counters);
		do
			c->next = head;
		while (!atomic_compare_exchange_weak(&counters, &head, c));
	}
	if (!nfails && !ndelays)
		return false;
	char base[64];
	base_name(c->name, base, sizeof(base));
	for (int i = 0; i < ndelays; i++) {
		if (strcmp(delays[i].name, c->name) && strcmp(delays[i].name, base))
			continue;
		struct timespec ts = { (time_t)(delays[i].ms / 1000),
				       (long)(delays[i].ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	bool fail = false;
	for (int i = 0; i < nfails; i++)
		if ((!strcmp(fails[i].name, c->name) || !strcmp(fails[i].name, base)) &&
		    atomic_fetch_add(&fails[i].seen, 1) + 1 == fails[i].nth)
			fail = true;
	return fail;
}

int sim_device_count(void)
{
	return sim_config()->devices;
}

void sim_note_context(int dev)
{
	if (dev >= 0 && dev < SIM_MAX_DEVICES)
		atomic_fetch_add(&contexts_made[dev], 1);
}

uint64_t sim_next_id(void)
{
	return atomic_fetch_add(&ids, 1) + 1;
}

size_t sim_round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

/* A destructor, not atexit: it runs after the atexit handlers registered by other libraries, so
 * frees done there are counted. */
__attribute__((destructor)) static void write_stats(void)
{
	if (!atomic_load(&used) || !config.stats_path)
		return;
	FILE *f = fopen(config.stats_path, "w");
	if (!f) {
		fprintf(stderr, "simdev: cannot write SIMDEV_STATS file %s: %s\n", config.stats_path,
			strerror(errno));
		return;
	}
	for (struct sim_counter *c = atomic_load(&counters); c; c = c->next)
		fprintf(f, "%s %lu\n", c->name, atomic_load(&c->calls));
	size_t live, peak;
	sim_group_bytes(&live, &peak);
	fprintf(f, "peak_bytes %zu\nlive_bytes %zu\n", peak, live);
	for (int d = 0; d < SIM_MAX_DEVICES; d++)
		if (atomic_load(&contexts_made[d]))
			fprintf(f, "contexts_on_device_%d %lu\n", d, atomic_load(&contexts_made[d]));
	fclose(f);
}
