/* See harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Targets and fake servers not yet freed, for harness_cleanup. */
#define MAX_LIVE 8
static struct target *live[MAX_LIVE];
static struct fake *live_fakes[MAX_LIVE];

static void track(struct target *t, bool on)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (on && !live[i]) {
			live[i] = t;
			return;
		}
		if (!on && live[i] == t)
			live[i] = NULL;
	}
}

void harness_cleanup(void)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (live[i])
			target_kill(live[i]); /* untracks it */
		if (live_fakes[i])
			fake_stop(live_fakes[i]);
	}
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

long long proc_kb_bytes(const char *path, const char *key)
{
	FILE *f = fopen(path, "re");
	size_t klen = strlen(key);
	long long kb = -1;
	char line[256];

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':' &&
		    sscanf(line + klen + 1, "%lld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

double ctl_slow(void)
{
	const char *v = getenv("CTL_SLOW");
	double f = v ? atof(v) : 1;

	return f >= 1 ? f : 1;
}

/* In a child: die with the test, so that a test that times out (and never runs its fini) leaves
 * no program behind. */
static void die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

static const char *need_env(const char *name)
{
	const char *v = getenv(name);

	if (!v || !*v) {
		fprintf(stderr, "harness: %s is not set (run through meson test)\n", name);
		return "/nonexistent";
	}
	return v;
}

static struct target *start(const char *const *env, bool channel)
{
	struct target *t = calloc(1, sizeof(*t));
	int in[2], out[2], chan[2] = { -1, -1 };
	char line[256];

	if (!t)
		return NULL;
	t->chan_fd = -1;
	snprintf(t->run_dir, sizeof(t->run_dir), "/tmp/vmmshim-ctltest-XXXXXX");
	if (!mkdtemp(t->run_dir) || pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) ||
	    (channel && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan))) {
		free(t);
		return NULL;
	}
	snprintf(t->err_path, sizeof(t->err_path), "%s/stderr", t->run_dir);
	pid_t parent = getpid();
	t->pid = fork();
	if (t->pid == 0) {
		int err = open(t->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		die_with_parent(parent);
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (err >= 0)
			dup2(err, 2);
		if (channel) {
			char fd[16];

			snprintf(fd, sizeof(fd), "%d", dup(chan[1])); /* without close-on-exec */
			setenv("CTL_CHANNEL_FD", fd, 1);
		}
		setenv("LD_PRELOAD", need_env("CTL_SHIM"), 1);
		setenv("VMMSHIM_RUN_DIR", t->run_dir, 1);
		if (!getenv("VMMSHIM_LOG"))
			setenv("VMMSHIM_LOG", "warn", 1);
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execl(need_env("CTL_TARGET"), "ctl_target", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if (channel) {
		close(chan[1]);
		t->chan_fd = chan[0];
	}
	track(t, true);
	t->in_fd = in[1];
	t->out_fd = out[0];
	if (t->pid < 0 || target_read(t, line, sizeof(line), 10000) || strncmp(line, "ready", 5)) {
		target_kill(t);
		return NULL;
	}
	return t;
}

struct target *target_start(const char *const *env)
{
	return start(env, false);
}

struct target *target_start_with_channel(const char *const *env)
{
	return start(env, true);
}

void target_busy_end(const struct target *t)
{
	kill(t->pid, SIGUSR1);
}

int target_send(struct target *t, const char *cmd)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "%s\n", cmd);

	return write(t->in_fd, line, (size_t)n) == n ? 0 : -1;
}

int target_read(struct target *t, char *reply, size_t cap, int timeout_ms)
{
	double deadline = now_s() + timeout_ms / 1000.0;

	for (;;) {
		char *nl = memchr(t->pending, '\n', t->npending);

		if (nl) {
			size_t n = (size_t)(nl - t->pending);

			snprintf(reply, cap, "%.*s", (int)n, t->pending);
			memmove(t->pending, nl + 1, t->npending - n - 1);
			t->npending -= n + 1;
			return 0;
		}
		double left = deadline - now_s();
		struct pollfd p = { .fd = t->out_fd, .events = POLLIN };

		if (left <= 0 || t->npending == sizeof(t->pending))
			return -1;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		ssize_t k = read(t->out_fd, t->pending + t->npending,
				 sizeof(t->pending) - t->npending);
		if (k <= 0)
			return -1;
		t->npending += (size_t)k;
	}
}

int target_cmd(struct target *t, const char *cmd, char *reply, size_t cap, int timeout_ms)
{
	if (target_send(t, cmd))
		return -1;
	return target_read(t, reply, cap, timeout_ms);
}

static int wait_exit(pid_t pid, int timeout_ms)
{
	double deadline = now_s() + timeout_ms / 1000.0;
	int st;

	while (now_s() < deadline) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	return -1;
}

void target_free(struct target *t)
{
	char cmd[400];

	if (!t)
		return;
	track(t, false);
	close(t->in_fd);
	close(t->out_fd);
	if (t->chan_fd >= 0)
		close(t->chan_fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->run_dir);
	if (system(cmd))
		fprintf(stderr, "harness: could not remove %s\n", t->run_dir);
	free(t);
}

int target_stop(struct target *t, int timeout_ms)
{
	int rc;

	target_send(t, "quit");
	rc = wait_exit(t->pid, timeout_ms);
	if (rc < 0) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
	}
	return rc;
}

void target_kill(struct target *t)
{
	if (!t)
		return;
	if (t->pid > 0) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
	}
	target_free(t);
}

void target_log(const struct target *t, char *buf, size_t cap)
{
	FILE *f = fopen(t->err_path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

bool target_log_has(const struct target *t, const char *what, double timeout_s)
{
	static char log[65536];
	double end = now_s() + timeout_s;

	do {
		target_log(t, log, sizeof(log));
		if (strstr(log, what))
			return true;
		usleep(20000);
	} while (now_s() < end);
	return false;
}

void target_socket(const struct target *t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%ld.sock", t->run_dir, (long)t->pid);
}

static void read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t k;

	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	/* Drain the rest so that the child never blocks on a full pipe. */
	char sink[4096];
	while (read(fd, sink, sizeof(sink)) > 0)
		;
}

/* Split args at spaces into argv (argv[0] = "vmmctl"). */
static void split_args(char *args, char **argv, int max)
{
	char *save = NULL;
	int argc = 0;

	argv[argc++] = (char *)"vmmctl";
	for (char *a = strtok_r(args, " ", &save); a && argc < max - 1;
	     a = strtok_r(NULL, " ", &save))
		argv[argc++] = a;
	argv[argc] = NULL;
}

static void exec_vmmctl(const char *run_dir, int as_uid, char **argv)
{
	if (run_dir)
		setenv("VMMSHIM_RUN_DIR", run_dir, 1);
	else
		unsetenv("VMMSHIM_RUN_DIR");
	if (as_uid >= 0 && (setgid((gid_t)as_uid) || setuid((uid_t)as_uid)))
		_exit(126);
	execv(need_env("CTL_VMMCTL"), argv);
	_exit(127);
}

static void collect(struct ctl_out *o, pid_t pid, double t0)
{
	struct rusage ru;
	int st;

	memset(&ru, 0, sizeof(ru));
	wait4(pid, &st, 0, &ru);
	o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	o->maxrss_kb = ru.ru_maxrss;
	o->seconds = now_s() - t0;
}

int vmmctl_run(struct ctl_out *o, const char *run_dir, int as_uid, const char *fmt, ...)
{
	char args[1024], *argv[32];
	int out[2], err[2];
	double t0 = now_s();
	va_list ap;
	pid_t pid;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	split_args(args, argv, 32);
	memset(o, 0, sizeof(*o));
	/* Close-on-exec: a vmmctl that another thread starts meanwhile (a sleep, for seconds) must
	 * not keep this one's pipes open, or reading them to the end waits for it. */
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		o->code = -1;
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]);
		close(err[0]);
		exec_vmmctl(run_dir, as_uid, argv);
	}
	close(out[1]);
	close(err[1]);
	read_all(out[0], o->out, sizeof(o->out));
	read_all(err[0], o->err, sizeof(o->err));
	close(out[0]);
	close(err[0]);
	collect(o, pid, t0);
	return o->code;
}

static void bg_paths(pid_t pid, char *out, char *err, size_t cap)
{
	snprintf(out, cap, "/tmp/vmmctl-bg-%ld.out", (long)pid);
	snprintf(err, cap, "/tmp/vmmctl-bg-%ld.err", (long)pid);
}

pid_t vmmctl_spawn(const char *run_dir, const char *fmt, ...)
{
	char args[1024], *argv[32];
	va_list ap;
	pid_t pid;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	split_args(args, argv, 32);
	pid_t parent = getpid();
	pid = fork();
	if (pid == 0) {
		char po[64], pe[64];
		int fo, fe;

		die_with_parent(parent);
		bg_paths(getpid(), po, pe, sizeof(po));
		fo = open(po, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fo < 0 || fe < 0)
			_exit(125);
		dup2(fo, 1);
		dup2(fe, 2);
		exec_vmmctl(run_dir, -1, argv);
	}
	return pid;
}

void slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
	unlink(path);
}

int count_in(const char *text, const char *what)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, what)); at++)
		n++;
	return n;
}

int vmmctl_wait(pid_t pid, struct ctl_out *o, int timeout_ms)
{
	double t0 = now_s(), deadline = t0 + timeout_ms / 1000.0;
	char po[64], pe[64];
	int st;

	memset(o, 0, sizeof(*o));
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (now_s() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			o->code = -1;
			break;
		}
		usleep(10000);
	}
	if (!o->code)
		o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	bg_paths(pid, po, pe, sizeof(po));
	slurp(po, o->out, sizeof(o->out));
	slurp(pe, o->err, sizeof(o->err));
	return o->code;
}

/* The fake server's child: serve until killed. ready: written once listening. */
static void fake_serve(const char *path, int as_uid, enum fake_mode mode, const char *reply,
		       size_t reply_len, int ready)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char pidtxt[32], *text = NULL;
	size_t tlen = 0;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		_exit(2);
	chmod(path, 0666);
	/* SO_PEERCRED reports who called listen(): become that user first. */
	if (as_uid >= 0 && (setgid((gid_t)as_uid) || setuid((uid_t)as_uid)))
		_exit(3);
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* a change of uid cleared it */
	if (listen(fd, mode == FAKE_FULL ? 0 : 16))
		_exit(4);
	if (mode == FAKE_FULL) {
		/* Fill the queue with connections nobody accepts. */
		for (int i = 0; i < 8; i++) {
			int c = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);

			if (connect(c, (struct sockaddr *)&sa, sizeof(sa)))
				break;
		}
	}
	if (mode == FAKE_REPLY) {
		/* "@PID@" becomes our pid. */
		snprintf(pidtxt, sizeof(pidtxt), "%ld", (long)getpid());
		text = malloc(reply_len * 2 + 64);
		if (!text)
			_exit(5);
		for (size_t i = 0; i < reply_len;) {
			if (reply_len - i >= 5 && !memcmp(reply + i, "@PID@", 5)) {
				memcpy(text + tlen, pidtxt, strlen(pidtxt));
				tlen += strlen(pidtxt);
				i += 5;
			} else {
				text[tlen++] = reply[i++];
			}
		}
	}
	if (write(ready, "r", 1) != 1)
		_exit(6);
	for (;;) {
		char req[4096];
		size_t off = 0;
		int c;

		if (mode == FAKE_FULL) {
			pause();
			continue;
		}
		c = accept(fd, NULL, NULL);
		if (c < 0)
			continue;
		if (mode == FAKE_SILENT)
			continue; /* keep it open, say nothing */
		for (ssize_t k; off < sizeof(req) && !memchr(req, '\n', off) &&
				(k = read(c, req + off, sizeof(req) - off)) > 0;)
			off += (size_t)k;
		for (size_t sent = 0; sent < tlen;) {
			ssize_t k = send(c, text + sent, tlen - sent, MSG_NOSIGNAL);

			if (k <= 0)
				break;
			sent += (size_t)k;
		}
		close(c);
	}
}

int fake_start(struct fake *f, const char *dir, long name_pid, int as_uid, enum fake_mode mode,
	       const char *reply, size_t reply_len)
{
	int ready[2];
	char c;

	memset(f, 0, sizeof(*f));
	if (pipe2(ready, O_CLOEXEC))
		return -1;
	pid_t parent = getpid();
	f->pid = fork();
	if (f->pid == 0) {
		char path[300];

		die_with_parent(parent);
		close(ready[0]);
		snprintf(path, sizeof(path), "%s/%ld.sock", dir, name_pid ? name_pid :
								    (long)getpid());
		fake_serve(path, as_uid, mode, reply, reply_len, ready[1]);
		_exit(0);
	}
	close(ready[1]);
	f->name_pid = name_pid ? name_pid : (long)f->pid;
	snprintf(f->path, sizeof(f->path), "%s/%ld.sock", dir, f->name_pid);
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!live_fakes[i]) {
			live_fakes[i] = f;
			break;
		}
	}
	if (f->pid < 0 || read(ready[0], &c, 1) != 1) {
		close(ready[0]);
		fake_stop(f);
		return -1;
	}
	close(ready[0]);
	return 0;
}

void fake_stop(struct fake *f)
{
	for (int i = 0; i < MAX_LIVE; i++)
		if (live_fakes[i] == f)
			live_fakes[i] = NULL;
	if (f->pid > 0) {
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
		f->pid = 0;
	}
	if (f->path[0])
		unlink(f->path);
}

static const char *find_key(const char *json, const char *section, const char *key)
{
	char pat[80];
	const char *p = json;

	if (section) {
		p = strstr(json, section);
		if (!p)
			return NULL;
	}
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(p, pat);
	return p ? p + strlen(pat) : NULL;
}

long long json_num(const char *json, const char *section, const char *key)
{
	const char *p = find_key(json, section, key);

	return p && ((*p >= '0' && *p <= '9') || *p == '-') ? strtoll(p, NULL, 10) : -1;
}

double json_double(const char *json, const char *section, const char *key)
{
	const char *p = find_key(json, section, key);

	return p && ((*p >= '0' && *p <= '9') || *p == '-') ? strtod(p, NULL) : -1;
}

bool json_str(const char *json, const char *section, const char *key, char *buf, size_t cap)
{
	const char *p = find_key(json, section, key);
	const char *end;

	if (!p || *p != '"' || !(end = strchr(p + 1, '"')))
		return false;
	snprintf(buf, cap, "%.*s", (int)(end - p - 1), p + 1);
	return true;
}

ssize_t raw_request(const char *sock, const char *req, size_t len, bool shut, int delay_ms,
		    char *buf, size_t cap, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	double deadline;
	size_t n = 0;

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	if (len && send(fd, req, len, MSG_NOSIGNAL) < 0) {
		/* The server may refuse before reading everything: read what it said. */
	}
	if (delay_ms)
		usleep((useconds_t)delay_ms * 1000);
	if (shut)
		shutdown(fd, SHUT_WR);
	deadline = now_s() + timeout_ms / 1000.0;
	while (n + 1 < cap) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left = deadline - now_s();
		ssize_t k;

		if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			break;
		k = read(fd, buf + n, cap - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	buf[n] = '\0';
	close(fd);
	return (ssize_t)n;
}

int raw_stall(const char *sock, const char *partial)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, partial, strlen(partial), MSG_NOSIGNAL) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

bool shared_env_setup(struct shared_env *e, const char *name)
{
	snprintf(e->run_dir, sizeof(e->run_dir), "/tmp/vmmshim-%s-XXXXXX", name);
	if (!mkdtemp(e->run_dir))
		return false;
	snprintf(e->group, sizeof(e->group), "SIMDEV_SHARED=%s-%d", name, (int)getpid());
	snprintf(e->preload, sizeof(e->preload), "LD_PRELOAD=%s", getenv("CTL_SHIM"));
	snprintf(e->run, sizeof(e->run), "VMMSHIM_RUN_DIR=%s", e->run_dir);
	return true;
}
