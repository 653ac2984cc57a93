/* The control tests' harness: ctl_target running under the shim with its own socket folder,
 * driven line by line; vmmctl runs with their output captured; a raw socket client for protocol
 * abuse. Paths come from the environment meson sets (CTL_SHIM, CTL_VMMCTL, CTL_TARGET). */
#ifndef CTL_HARNESS_H
#define CTL_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct target {
	pid_t pid;
	int in_fd, out_fd;
	int chan_fd;          /* a SOCK_SEQPACKET socket to it (target_start_with_channel), or -1 */
	char run_dir[256];
	char err_path[300];
	char pending[8192];   /* bytes read from stdout beyond the last line returned */
	size_t npending;
};

/* Start ctl_target under the shim with extra "K=V" settings (NULL-ended, may be NULL) and wait
 * for its "ready" line. NULL on failure. */
struct target *target_start(const char *const *env);
/* The same with a SOCK_SEQPACKET socket beside stdin, for descriptors (shim/protocol's
 * fd_pass.h): t->chan_fd here, its other end in the target as the descriptor named by
 * CTL_CHANNEL_FD. */
struct target *target_start_with_channel(const char *const *env);
/* Send one command line and wait (timeout_ms) for one reply line. 0, or -1 on timeout / EOF. */
int target_cmd(struct target *t, const char *cmd, char *reply, size_t cap, int timeout_ms);
int target_send(struct target *t, const char *cmd);
int target_read(struct target *t, char *reply, size_t cap, int timeout_ms);
/* "quit", wait for the exit (timeout_ms), return the exit status (-1: had to be killed). */
int target_stop(struct target *t, int timeout_ms);
/* Kill without asking, then clean up. */
void target_kill(struct target *t);
void target_free(struct target *t);
/* Kill every target still running and remove its folder: a test's fini, so that a failed
 * assertion leaves nothing behind. */
void harness_cleanup(void);
/* End the target's busy work (its `busy MS`) now: for a test done with what it checks while the
 * work runs, which need not wait out the rest (MS is sized for TSan's slowest hosts). */
void target_busy_end(const struct target *t);
/* The shim's log (the target's stderr). */
void target_log(const struct target *t, char *buf, size_t cap);
/* Wait until the target's log has `what` (at most timeout_s). */
bool target_log_has(const struct target *t, const char *what, double timeout_s);
/* The text of the file at path (cut at cap - 1 bytes; empty when there is none); the file is
 * removed. */
void slurp(const char *path, char *buf, size_t cap);
/* How many times text holds what. */
int count_in(const char *text, const char *what);
/* The target's socket path. */
void target_socket(const struct target *t, char *buf, size_t cap);

/* The environment of targets that share one simdev device and are started by hand: a fresh
 * run folder (/tmp/vmmshim-NAME-XXXXXX), SIMDEV_SHARED=NAME-<test pid>, the shim preloaded, as
 * "K=V" strings. false when the folder cannot be made. */
struct shared_env {
	char run_dir[64], group[96], preload[512], run[128];
};
bool shared_env_setup(struct shared_env *e, const char *name);

#define CTL_OUT_MAX (256 * 1024)

struct ctl_out {
	int code;               /* exit status */
	char out[CTL_OUT_MAX];
	char err[16384];
	long maxrss_kb;         /* vmmctl's peak resident memory */
	double seconds;         /* how long it ran */
};

/* Run vmmctl with the arguments (printf-style, split at spaces), VMMSHIM_RUN_DIR set to run_dir
 * (NULL: unset). Returns o->code. as_uid >= 0: run as that uid (root only). */
int vmmctl_run(struct ctl_out *o, const char *run_dir, int as_uid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* vmmctl in the background (same arguments as vmmctl_run, output kept in files); returns its
 * pid, or -1. vmmctl_wait collects it: its exit status, or -1 when it has not ended within
 * timeout_ms (it is then killed). */
pid_t vmmctl_spawn(const char *run_dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int vmmctl_wait(pid_t pid, struct ctl_out *o, int timeout_ms);

/* A fake control server in a child process, on DIR/NAME.sock where NAME is name_pid (0: the
 * child's own pid), running as as_uid (-1: ours; root only). It never answers (FAKE_SILENT),
 * never accepts with its queue full (FAKE_FULL), or answers every request with reply, every
 * "@PID@" in it replaced by its pid (FAKE_REPLY). */
enum fake_mode { FAKE_SILENT, FAKE_FULL, FAKE_REPLY };
struct fake {
	pid_t pid;
	long name_pid;
	char path[300];
};
int fake_start(struct fake *f, const char *dir, long name_pid, int as_uid, enum fake_mode mode,
	       const char *reply, size_t reply_len);
void fake_stop(struct fake *f);

/* The number after "key": in json, looking from the first occurrence of section (NULL: from
 * the start). -1 when absent. */
long long json_num(const char *json, const char *section, const char *key);
/* The same for a number with a fraction (seconds). */
double json_double(const char *json, const char *section, const char *key);
/* The string after "key": (copied into buf); false when absent. */
bool json_str(const char *json, const char *section, const char *key, char *buf, size_t cap);

/* A raw request on the socket: writes `len` bytes of req (then, if shut, shuts down writing),
 * reads the reply into buf until EOF or timeout_ms. Returns the reply length or -1. */
ssize_t raw_request(const char *sock, const char *req, size_t len, bool shut, int delay_ms,
		    char *buf, size_t cap, int timeout_ms);

/* A connection to sock that has sent `partial` (no newline) and then says nothing; -1 on error.
 * The server drops it after its read deadline. */
int raw_stall(const char *sock, const char *partial);

double now_s(void);
/* The "KEY: N kB" line of a /proc file (/proc/meminfo, /proc/PID/status), in bytes; -1 when
 * the file or the line is missing. */
long long proc_kb_bytes(const char *path, const char *key);
/* How much slower than usual the programs under test run (CTL_SLOW, e.g. 4 under
 * ThreadSanitizer; default 1): time and memory limits in the tests are multiplied by it. */
double ctl_slow(void);

#endif
