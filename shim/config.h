/* The shim's settings, all from the environment (one table in config.c names each variable, its
 * default and its meaning). Read once, when the runtime is created. An invalid value gets one
 * warning naming the variable and the default used instead; it never stops the program. */
#ifndef VMMSHIM_CONFIG_H
#define VMMSHIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/heap.h"
#include "../core/log.h"

#define SHIM_RUN_DIR_MAX 256

typedef struct shim_config {
	bool disable;              /* VMMSHIM_DISABLE: pure pass-through */
	vmm_log_level log_level;   /* VMMSHIM_LOG */
	vmm_config core;           /* VMMSHIM_CACHE_LIMIT, VMMSHIM_RESERVE, VMMSHIM_MAX_HANDLE,
	                            * VMMSHIM_WHOLE_HANDLE_MIN, VMMSHIM_SMALL_MAX */
	char run_dir[SHIM_RUN_DIR_MAX]; /* VMMSHIM_RUN_DIR: where the control socket lives */
	bool autowake;             /* VMMSHIM_AUTOWAKE: work submitted while asleep wakes it */
	bool provision_backup;     /* VMMSHIM_PROVISION_BACKUP: host backup made ahead of sleep */
	bool lone_stream;          /* VMMSHIM_LONE_STREAM: frees ordered on the program's only
	                            * stream while it has one (lone_stream.h) */
	bool control;              /* VMMSHIM_CONTROL: start the control server (default on) */
	double sleep_timeout_s;    /* VMMSHIM_SLEEP_TIMEOUT: the longest a sleep waits for the device
	                            * to finish its work before it gives up (a request's timeout
	                            * replaces it) */
	double op_wait_s;          /* VMMSHIM_OP_WAIT: the longest an in-process sleep or wake waits
	                            * for one in progress (control_internal.h) */
	bool share;                /* VMMSHIM_SHARE: take part in GPU sharing (shim/share*) */
	int priority;              /* VMMSHIM_PRIORITY */
	double share_idle_s;       /* VMMSHIM_SHARE_IDLE */
	double share_slice_s;      /* VMMSHIM_SHARE_SLICE */
	double share_residency_s;  /* VMMSHIM_SHARE_RESIDENCY */
	double share_wait_s;       /* VMMSHIM_SHARE_WAIT */
	char alloc_trace[SHIM_RUN_DIR_MAX]; /* VMMSHIM_ALLOC_TRACE: "" = none (alloc_trace.h) */
} shim_config;

/* Fill cfg from the environment (defaults for what is unset or invalid). Sets the log level first,
 * so that warnings about the other variables obey VMMSHIM_LOG. */
void shim_config_load(shim_config *cfg);

/* Only VMMSHIM_DISABLE, cheaply (for paths that must not create the runtime). */
bool shim_config_disabled(void);

/* "64M", "2G", "1048576", "1.5G": bytes with an optional K/M/G/T suffix (binary units);
 * "unlimited" / "max" = SIZE_MAX. False (out untouched) when s is not such a value. */
bool shim_parse_size(const char *s, size_t *out);

/* One line per setting: "VMMSHIM_X=value  (meaning)", for vmmctl and the README. */
typedef void (*shim_config_line_fn)(const char *line, void *arg);
void shim_config_describe(const shim_config *cfg, shim_config_line_fn fn, void *arg);

/* Every setting as documented: its variable, its default (a value, or "(how it is computed)")
 * and its meaning, in table order. For the generated docs (shim/settings_doc.c). */
typedef void (*shim_setting_fn)(const char *env, const char *def, const char *help, void *arg);
void shim_config_each(shim_setting_fn fn, void *arg);

#endif
