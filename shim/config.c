/* Every setting and its environment variable, in one table: the code reads it, and the README's
 * and vmmshim(7)'s settings tables are made from it (shim/settings_doc.c). */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum setting_kind { SET_BOOL, SET_SIZE, SET_LOG, SET_STRING, SET_SECONDS, SET_INT, SET_COUNT };

struct setting {
	const char *env;
	enum setting_kind kind;
	size_t offset;            /* into shim_config */
	/* The default: a value in the variable's own syntax, applied at start, or "(text)" for
	 * one computed at run time, text saying how. The docs show it as written (README, man). */
	const char *def;
	const char *help;         /* what it does; also named in the warning for a bad value */
};

#define AT(field) offsetof(shim_config, field)

static const struct setting settings[] = {
	{ "VMMSHIM_DISABLE", SET_BOOL, AT(disable), "0",
	  "1: pass every call through to the driver untouched" },
	{ "VMMSHIM_LOG", SET_LOG, AT(log_level), "warn",
	  "error, warn, info, debug or off: one 'vmmshim[pid] level:' line per event on stderr; "
	  "info also prints what was served at exit" },
	{ "VMMSHIM_CACHE_LIMIT", SET_SIZE, AT(core.cache_limit), "unlimited",
	  "free physical memory kept per device for reuse (K/M/G/T suffixes, or 'unlimited')" },
	{ "VMMSHIM_RESERVE", SET_SIZE, AT(core.reserve_bytes), "(4 x device memory)",
	  "virtual address space reserved per device" },
	{ "VMMSHIM_MAX_HANDLE", SET_SIZE, AT(core.max_handle_bytes), "unlimited",
	  "largest physical handle created (K/M/G/T suffixes, or 'unlimited')" },
	{ "VMMSHIM_WHOLE_HANDLE_MIN", SET_SIZE, AT(core.whole_handle_min), "32M",
	  "allocations of this size or more get new device memory as one handle (copies run faster "
	  "on it); smaller ones get 2 MiB pieces that move on their own once freed" },
	{ "VMMSHIM_GRANULE_START_MIN", SET_SIZE, AT(core.granule_start_min), "unlimited",
	  "allocations of this size or more start a 2 MiB granule and are rounded up to whole "
	  "granules (as cudaMalloc does), so that cuMemRetainAllocationHandle (NCCL's "
	  "ncclCommRegister) works on any of them; others share their edge granules with their "
	  "neighbours" },
	{ "VMMSHIM_EDGE_CUT_MIN", SET_SIZE, AT(core.edge_cut_min), "unlimited",
	  "a freed handle of up to 64 MiB that an allocation of this size or more would share "
	  "with free memory is re-created cut at the allocation's edges (3 handles or so); for a "
	  "smaller allocation, as 2 MiB pieces ('unlimited': always pieces)" },
	{ "VMMSHIM_ALIGNED_CUTS", SET_BOOL, AT(core.aligned_cuts), "0",
	  "1: a freed handle of up to 64 MiB that a smaller allocation would share is re-created "
	  "as handles of power-of-two sizes aligned within it (about 6, at most ~10), a 2 MiB piece "
	  "where the allocation's edge falls inside a granule; 0: as 32 pieces of 2 MiB (faster: "
	  "aligned cuts made the H200 PyTorch benchmark's mean step 7-9% slower)" },
	{ "VMMSHIM_ALIGNED_CUT_MAX", SET_SIZE, AT(core.aligned_cut_max), "64M",
	  "with VMMSHIM_ALIGNED_CUTS=1, the largest handle an aligned cut makes (whole 2 MiB "
	  "granules); below 64M a large allocation gives such free handles back to the driver, as "
	  "it does 2 MiB pieces, instead of moving them, and an allocation that would leave less "
	  "than 2 MiB free in one does not cut it (4M, on an H100 before that last rule: the three "
	  "largest PyTorch steps 5-18% faster, most others 10-33% slower, the mean step unchanged)" },
	{ "VMMSHIM_UNCUT_SCAN", SET_COUNT, AT(core.uncut_scan), "16",
	  "a request that would cut a freed handle into 2 MiB pieces takes instead the first of up "
	  "to this many other fitting free blocks where it cuts nothing (0..1000; 0: it cuts at "
	  "once, the layout before 6 Dec 2026)" },
	{ "VMMSHIM_REFILL_AHEAD", SET_BOOL, AT(core.refill_ahead), "0",
	  "1: a freed handle of 64 MiB that an allocation cuts into 2 MiB pieces is made again "
	  "on the program's thread only where the allocation lies; a thread of the shim makes the "
	  "free rest while the program goes on; 0: all of it on the program's thread" },
	{ "VMMSHIM_GIVE_BACK_LATE", SET_BOOL, AT(core.give_back_late), "0",
	  "1: a large allocation that must wait for a device synchronization gives the free "
	  "2 MiB pieces it is made from back to the driver only after it; 0: before it, while "
	  "the GPU still runs the program's queued work" },
	{ "VMMSHIM_SMALL_MAX", SET_SIZE, AT(core.small_max), "64K",
	  "allocations up to this size are packed by size into slabs of 64 KiB to 2 MiB" },
	{ "VMMSHIM_SYNC_AHEAD", SET_SIZE, AT(core.sync_ahead_min), "16M",
	  "once this much freed memory waits to be reused on a CUDA device, a thread of the shim "
	  "synchronizes the device while the program goes on, so that the program's allocations "
	  "seldom wait for the GPU themselves; 0: never (the program's thread synchronizes)" },
	{ "VMMSHIM_SYNC_WHOLE", SET_BOOL, AT(core.sync_whole), "0",
	  "1: an allocation that needs freed memory still waiting for the GPU synchronizes the whole "
	  "device; 0: it first waits for the shim's synchronization already under way, which "
	  "leaves the work queued after that one running on the GPU" },
	{ "VMMSHIM_LONE_STREAM", SET_BOOL, AT(lone_stream), "1",
	  "1: while all of the program's CUDA work goes to one stream, memory it frees is reused at "
	  "once in that stream's order, with no wait for the device; a second stream first waits "
	  "for the first's work. 0: freed memory waits for a device synchronization" },
	{ "VMMSHIM_RUN_DIR", SET_STRING, AT(run_dir),
	  "($XDG_RUNTIME_DIR/vmmshim, else /tmp/vmmshim-UID)",
	  "folder of the control sockets, an absolute path (created with mode 0700)" },
	{ "VMMSHIM_AUTOWAKE", SET_BOOL, AT(autowake), "0",
	  "1: device work submitted while asleep wakes the process instead of waiting" },
	{ "VMMSHIM_PROVISION_BACKUP", SET_BOOL, AT(provision_backup), "0",
	  "1: allocate and pin the host backup ahead of the first sleep, so that it runs at "
	  "link speed" },
	{ "VMMSHIM_CONTROL", SET_BOOL, AT(control), "1",
	  "0: no control socket (vmmctl cannot reach this process)" },
	{ "VMMSHIM_SLEEP_TIMEOUT", SET_SECONDS, AT(sleep_timeout_s), "30",
	  "seconds (2.5 or 500ms also) a sleep waits for each device to finish its work before it "
	  "gives up, rolls back and says why; a request's own timeout bounds the whole sleep too" },
	{ "VMMSHIM_OP_WAIT", SET_SECONDS, AT(op_wait_s), "60",
	  "seconds the program's own sleep or wake (the API, an automatic wake) waits for one "
	  "already in progress before it answers busy; vmmctl's requests wait as their timeout "
	  "says" },
	{ "VMMSHIM_SHARE", SET_BOOL, AT(share), "0",
	  "1: share the GPU with the other VMMSHIM_SHARE=1 processes of this user: an allocation "
	  "that finds no device memory sleeps eligible ones (their memory to host) and they wake "
	  "by themselves at their next device work" },
	{ "VMMSHIM_PRIORITY", SET_INT, AT(priority), "0",
	  "sharing priority (-1000..1000): a process sleeps lower priorities first, equal ones only "
	  "when idle or past their time slice, never higher ones" },
	{ "VMMSHIM_SHARE_IDLE", SET_SECONDS, AT(share_idle_s), "2",
	  "seconds without device work after which an equal-priority sharing process counts as "
	  "idle (may be slept)" },
	{ "VMMSHIM_SHARE_SLICE", SET_SECONDS, AT(share_slice_s), "10",
	  "seconds a sharing process may keep the GPU resident while an equal-priority one waits" },
	{ "VMMSHIM_SHARE_RESIDENCY", SET_SECONDS, AT(share_residency_s), "1",
	  "seconds a sharing process stays resident after a wake before equal or lower "
	  "priorities may sleep it again (against thrashing; higher priorities need not wait)" },
	{ "VMMSHIM_SHARE_WAIT", SET_SECONDS, AT(share_wait_s), "15",
	  "the longest an allocation of a sharing process waits for memory (a time slice to end, "
	  "a peer to sleep) before it gets the driver's out-of-memory error" },
	{ "VMMSHIM_SLOW_LOG", SET_SECONDS, AT(core.slow_log_s), "0.05ms",
	  "at VMMSHIM_LOG=debug, a device allocation that takes this long or longer (seconds, or "
	  "e.g. 2ms) logs what the heap did for it: syncs, handles made, moved, cut, given back" },
	{ "VMMSHIM_ALLOC_TRACE", SET_STRING, AT(alloc_trace), "(none)",
	  "an absolute file name ('%p' becomes the pid): every CUDA allocation and free the shim "
	  "serves is written there, one line each, for bench_core --replay (a write per call: "
	  "for diagnosis, not for timing)" },
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static const char *const log_names[] = { "off", "error", "warn", "info", "debug" };

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off", "" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return true;
		}
	}
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

static bool parse_log(const char *s, vmm_log_level *out)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
		if (!strcasecmp(s, log_names[i])) {
			*out = (vmm_log_level)i;
			return true;
		}
	}
	return false;
}

bool shim_parse_size(const char *s, size_t *out)
{
	unsigned shift = 0;
	long double v;
	char *end;

	if (!s || !*s)
		return false;
	if (!strcasecmp(s, "unlimited") || !strcasecmp(s, "max")) {
		*out = SIZE_MAX;
		return true;
	}
	if (s[0] < '0' || s[0] > '9')
		return false; /* no sign, no blanks, no hex */
	errno = 0;
	v = strtold(s, &end);
	if (errno || end == s)
		return false;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && *end == 'i')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return false;
	v *= (long double)((uint64_t)1 << shift);
	if (v >= (long double)SIZE_MAX)
		return false;
	*out = (size_t)v;
	return true;
}

/* "30", "2.5", "500ms", "10s": a positive number of seconds (at most a day). */
static bool parse_seconds(const char *s, double *out)
{
	double v, scale = 1;
	char *end;

	if (!s || s[0] < '0' || s[0] > '9')
		return false;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s)
		return false;
	if (!strcmp(end, "ms"))
		scale = 1e-3;
	else if (strcmp(end, "s") && *end)
		return false;
	v *= scale;
	if (!(v > 0) || v > 86400)
		return false;
	*out = v;
	return true;
}

/* An integer within lo..1000 (-1000 for the sharing priority, 0 for a count). */
static bool parse_int(const char *s, int lo, int *out)
{
	long v;
	char *end;

	if (!s || !*s)
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > 1000)
		return false;
	*out = (int)v;
	return true;
}

static void default_run_dir(char *dst, size_t n)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (xdg && xdg[0] == '/')
		snprintf(dst, n, "%s/vmmshim", xdg);
	else
		snprintf(dst, n, "/tmp/vmmshim-%u", (unsigned)getuid());
}

/* Apply one value; false when it is not valid for the setting. */
static bool apply(shim_config *cfg, const struct setting *s, const char *v)
{
	void *field = (char *)cfg + s->offset;

	switch (s->kind) {
	case SET_BOOL:
		return parse_bool(v, field);
	case SET_SIZE:
		return shim_parse_size(v, field);
	case SET_LOG:
		return parse_log(v, field);
	case SET_SECONDS:
		return parse_seconds(v, field);
	case SET_INT:
		return parse_int(v, -1000, field);
	case SET_COUNT:
		return parse_int(v, 0, field);
	case SET_STRING:
		if (v[0] != '/' || strlen(v) >= SHIM_RUN_DIR_MAX)
			return false; /* an absolute path that fits */
		memcpy(field, v, strlen(v) + 1);
		return true;
	}
	return false;
}

static void set_defaults(shim_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	vmm_config_defaults(&cfg->core);
	for (size_t i = 0; i < NSETTINGS; i++) {
		if (settings[i].def[0] && settings[i].def[0] != '(')
			apply(cfg, &settings[i], settings[i].def);
	}
	default_run_dir(cfg->run_dir, sizeof(cfg->run_dir));
}

/* Put one setting back to its default. */
static void reset_field(shim_config *cfg, const struct setting *s)
{
	static const size_t widths[] = { [SET_BOOL] = sizeof(bool), [SET_SIZE] = sizeof(size_t),
					 [SET_LOG] = sizeof(vmm_log_level),
					 [SET_SECONDS] = sizeof(double),
					 [SET_INT] = sizeof(int), [SET_COUNT] = sizeof(int),
					 [SET_STRING] = SHIM_RUN_DIR_MAX };
	shim_config d;

	set_defaults(&d);
	memcpy((char *)cfg + s->offset, (char *)&d + s->offset, widths[s->kind]);
}

void shim_config_load(shim_config *cfg)
{
	set_defaults(cfg);
	/* The log level first, so that the other warnings obey it. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < NSETTINGS; i++) {
			const struct setting *s = &settings[i];
			const char *v = getenv(s->env);

			if ((s->kind == SET_LOG) != (pass == 0) || !v)
				continue;
			if (!apply(cfg, s, v)) {
				if (s->kind == SET_LOG)
					vmm_log_set_level(cfg->log_level);
				vmm_log(VMM_LOG_WARN, "%s=\"%s\" is not valid (%s); using the default",
					s->env, v, s->help);
				reset_field(cfg, s);
			}
		}
		if (pass == 0)
			vmm_log_set_level(cfg->log_level);
	}
}

bool shim_config_disabled(void)
{
	const char *v = getenv("VMMSHIM_DISABLE");
	bool on = false;

	return v && parse_bool(v, &on) && on;
}

void shim_config_describe(const shim_config *cfg, shim_config_line_fn fn, void *arg)
{
	char line[512], val[SHIM_RUN_DIR_MAX + 32];

	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *s = &settings[i];
		const void *field = (const char *)cfg + s->offset;

		switch (s->kind) {
		case SET_BOOL:
			snprintf(val, sizeof(val), "%d", *(const bool *)field ? 1 : 0);
			break;
		case SET_SIZE:
			if (*(const size_t *)field == SIZE_MAX)
				snprintf(val, sizeof(val), "unlimited");
			else
				snprintf(val, sizeof(val), "%zu", *(const size_t *)field);
			break;
		case SET_LOG:
			snprintf(val, sizeof(val), "%s", log_names[*(const vmm_log_level *)field]);
			break;
		case SET_STRING:
			snprintf(val, sizeof(val), "%s", (const char *)field);
			break;
		case SET_SECONDS:
			snprintf(val, sizeof(val), "%g", *(const double *)field);
			break;
		case SET_INT:
		case SET_COUNT:
			snprintf(val, sizeof(val), "%d", *(const int *)field);
			break;
		}
		snprintf(line, sizeof(line), "%s=%s  (%s)", s->env, val, s->help);
		fn(line, arg);
	}
}

void shim_config_each(shim_setting_fn fn, void *arg)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		fn(settings[i].env, settings[i].def, settings[i].help, arg);
}
