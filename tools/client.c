/* Finding a process's control socket and talking to it. */
#include "client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "run_dir.h"

static int set_error(client_error *e, int code, const char *status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int set_error(client_error *e, int code, const char *status, const char *fmt, ...)
{
	va_list ap;

	e->exit_code = code;
	snprintf(e->status, sizeof(e->status), "%s", status);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return code;
}

/* Value of name in an environ block (NUL-separated), or NULL. */
static const char *env_lookup(const char *env, size_t n, const char *name)
{
	size_t nl = strlen(name);

	for (size_t i = 0; i < n;) {
		const char *s = env + i;
		size_t l = strnlen(s, n - i);

		if (l > nl && !memcmp(s, name, nl) && s[nl] == '=')
			return s + nl + 1;
		i += l + 1;
	}
	return NULL;
}

static bool is_socket(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISSOCK(st.st_mode);
}

/* Look for pid's socket in dir when dir is a trustworthy folder of owner. */
static bool try_dir(const char *dir, uid_t owner, pid_t pid, char *path, size_t cap)
{
	return run_dir_trusted(dir, owner) && !run_dir_socket_path(dir, pid, path, cap) &&
	       is_socket(path);
}

int client_find_socket(pid_t pid, char *path, size_t cap, client_error *e)
{
	char procdir[64], dir[512], tried[1024] = "";
	struct stat st;
	char *env = NULL;
	size_t envlen = 0;
	uid_t owner;

	if (kill(pid, 0) && errno == ESRCH)
		return set_error(e, EXIT_NO_PROCESS, "no_process", "no process with pid %ld",
				 (long)pid);
	snprintf(procdir, sizeof(procdir), "/proc/%ld", (long)pid);
	if (stat(procdir, &st))
		return set_error(e, EXIT_NO_PROCESS, "no_process", "no process with pid %ld",
				 (long)pid);
	owner = st.st_uid;
	if (owner != geteuid() && geteuid() != 0)
		return set_error(e, EXIT_PERMISSION, PROTO_ERR_PERMISSION,
				 "process %ld belongs to uid %u: only that user or root may drive "
				 "it", (long)pid, (unsigned)owner);

	/* The folder the target's own environment names comes first. */
	snprintf(procdir, sizeof(procdir), "/proc/%ld/environ", (long)pid);
	FILE *f = fopen(procdir, "re");
	if (f) {
		size_t capacity = 0;
		char chunk[4096];
		size_t k;

		while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0 && envlen < (1u << 20)) {
			if (envlen + k > capacity) {
				capacity = (envlen + k) * 2;
				char *ne = realloc(env, capacity);
				if (!ne)
					break;
				env = ne;
			}
			memcpy(env + envlen, chunk, k);
			envlen += k;
		}
		fclose(f);
	}
	if (env && !run_dir_resolve(env_lookup(env, envlen, "VMMSHIM_RUN_DIR"),
				    env_lookup(env, envlen, "XDG_RUNTIME_DIR"), owner, dir,
				    sizeof(dir))) {
		free(env);
		env = NULL;
		if (try_dir(dir, owner, pid, path, cap))
			return 0;
		snprintf(tried, sizeof(tried), "%s", dir);
	}
	free(env);
	if (!run_dir_default(dir, sizeof(dir))) {
		if (try_dir(dir, owner, pid, path, cap))
			return 0;
		if (strcmp(tried, dir))
			snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s",
				 tried[0] ? ", " : "", dir);
	}
	return set_error(e, EXIT_NO_PROCESS, "not_shimmed",
			 "process %ld is not running under vmmshim, or has not allocated device "
			 "memory yet (no control socket in %s)", (long)pid, tried);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_reply(char *buf, size_t len, pid_t pid, client_reply *out, client_error *e)
{
	size_t pos = 0;
	bool ended = false;
	char why[160];

	memset(out, 0, sizeof(*out));
	while (pos < len && !ended) {
		char *nl = memchr(buf + pos, '\n', len - pos);
		size_t n;

		if (!nl)
			break;
		n = (size_t)(nl - (buf + pos));
		if (!out->word) {
			out->word = proto_parse_header(buf + pos, n);
			if (!out->word)
				return set_error(e, EXIT_REPORTED, "protocol",
						 "process %ld answered in a protocol this vmmctl "
						 "does not speak", (long)pid);
		} else if (n == 3 && !memcmp(buf + pos, "end", 3)) {
			ended = true;
		} else {
			proto_record *r = realloc(out->records,
						  sizeof(*r) * (size_t)(out->nrecords + 1));
			if (!r)
				return set_error(e, EXIT_REPORTED, "internal", "out of memory");
			out->records = r;
			if (proto_parse_record(buf + pos, n, &r[out->nrecords], why, sizeof(why)))
				return set_error(e, EXIT_REPORTED, "protocol",
						 "bad reply from process %ld: %s", (long)pid, why);
			out->nrecords++;
		}
		pos += n + 1;
	}
	if (!ended)
		return set_error(e, EXIT_REPORTED, "protocol",
				 "process %ld closed the connection before its reply was complete",
				 (long)pid);
	return 0;
}

int client_call(const char *path, pid_t pid, const proto_request *req, double timeout,
		bool progress, client_reply *out, client_error *e)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char line[PROTO_MAX_REQUEST + 1];
	size_t n = proto_format_request(req, line, sizeof(line)), len = 0, cap = 0, sent = 0;
	double start = now(), deadline = timeout > 0 ? start + timeout : 0, last_shown = start;
	char *buf = NULL;
	int fd, rc = 0;
	bool shown = false, ended = false;

	memset(out, 0, sizeof(*out));
	if (!n)
		return set_error(e, EXIT_USAGE, "invalid", "cannot encode the request");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return set_error(e, EXIT_REPORTED, "internal", "socket: %s", strerror(errno));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(fd);
		if (err == EACCES || err == EPERM)
			return set_error(e, EXIT_PERMISSION, PROTO_ERR_PERMISSION,
					 "not allowed to connect to %s", path);
		return set_error(e, EXIT_NO_PROCESS, "not_shimmed",
				 "process %ld does not answer on %s (%s)", (long)pid, path,
				 strerror(err));
	}
	while (!ended) {
		struct pollfd p = { .fd = fd, .events = sent < n ? POLLOUT : POLLIN };
		double t = now();
		int wait_ms = 500;

		if (deadline && t >= deadline) {
			rc = set_error(e, EXIT_TIMEOUT, "timeout",
				       "no answer from process %ld within %.3g s (a sleep or wake "
				       "already started goes on in the process)", (long)pid,
				       timeout);
			break;
		}
		if (deadline && (deadline - t) * 1000 < wait_ms)
			wait_ms = (int)((deadline - t) * 1000) + 1;
		if (progress && t - start >= 1.0 && t - last_shown >= 0.5) {
			fprintf(stderr, "\r%s: waiting %.1f s ", proto_verb_name(req->verb),
				t - start);
			shown = true;
			last_shown = t;
		}
		if (poll(&p, 1, wait_ms) < 0 && errno != EINTR) {
			rc = set_error(e, EXIT_REPORTED, "internal", "poll: %s", strerror(errno));
			break;
		}
		if (sent < n && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t k = send(fd, line + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);

			if (k < 0 && errno != EAGAIN && errno != EINTR) {
				rc = set_error(e, EXIT_NO_PROCESS, "not_shimmed",
					       "process %ld closed the connection: %s", (long)pid,
					       strerror(errno));
				break;
			}
			sent += k > 0 ? (size_t)k : 0;
			continue;
		}
		if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (len + 4096 + 1 > cap) {
			char *nb;

			if (cap >= PROTO_MAX_RESPONSE + 8192) {
				rc = set_error(e, EXIT_REPORTED, "protocol", "reply too large");
				break;
			}
			cap = cap ? cap * 2 : 16384;
			nb = realloc(buf, cap);
			if (!nb) {
				rc = set_error(e, EXIT_REPORTED, "internal", "out of memory");
				break;
			}
			buf = nb;
		}
		ssize_t k = recv(fd, buf + len, cap - len - 1, MSG_DONTWAIT);
		if (k < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			rc = set_error(e, EXIT_REPORTED, "protocol", "reading the reply: %s",
				       strerror(errno));
			break;
		}
		if (k == 0)
			ended = true;
		len += (size_t)k;
		if (len >= 4 && !memcmp(buf + len - 4, "end\n", 4) &&
		    (len == 4 || buf[len - 5] == '\n'))
			ended = true;
	}
	close(fd);
	if (shown)
		fprintf(stderr, "\r%40s\r", "");
	if (!rc)
		rc = parse_reply(buf ? buf : (char *)"", len, pid, out, e);
	free(buf);
	return rc;
}

const proto_record *client_reply_find(const client_reply *r, const char *kind)
{
	for (int i = 0; i < r->nrecords; i++)
		if (!strcmp(r->records[i].kind, kind))
			return &r->records[i];
	return NULL;
}

int client_reply_error(const client_reply *r, client_error *e)
{
	const proto_record *er;
	const char *status, *msg;

	if (!r->word || strcmp(r->word, "error"))
		return 0;
	er = client_reply_find(r, "error");
	status = er ? proto_record_str(er, "status") : NULL;
	msg = er ? proto_record_str(er, "message") : NULL;
	return set_error(e, status && !strcmp(status, PROTO_ERR_PERMISSION) ? EXIT_PERMISSION :
		       EXIT_REPORTED, status ? status : "error", "%s",
		       msg ? msg : "the process reported an error");
}

void client_reply_free(client_reply *r)
{
	free(r->records);
	memset(r, 0, sizeof(*r));
}

static void scan_dir(const char *dir, void (*fn)(const char *, pid_t, void *), void *arg,
		     char (*seen)[512], int *nseen)
{
	DIR *d;
	struct dirent *de;

	for (int i = 0; i < *nseen; i++)
		if (!strcmp(seen[i], dir))
			return;
	if (*nseen < 64)
		snprintf(seen[(*nseen)++], 512, "%s", dir);
	if (!run_dir_trusted(dir, geteuid()) && geteuid() != 0)
		return;
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[512], *end;
		long pid = strtol(de->d_name, &end, 10);

		if (pid <= 0 || strcmp(end, ".sock"))
			continue;
		if (kill((pid_t)pid, 0) && errno == ESRCH)
			continue; /* stale: its process is gone */
		if (!run_dir_socket_path(dir, (pid_t)pid, path, sizeof(path)) && is_socket(path))
			fn(path, (pid_t)pid, arg);
	}
	closedir(d);
}

void client_each_socket(void (*fn)(const char *path, pid_t pid, void *arg), void *arg)
{
	static char seen[64][512];
	char dir[512];
	int nseen = 0;

	if (!run_dir_default(dir, sizeof(dir)))
		scan_dir(dir, fn, arg, seen, &nseen);
	/* Processes started with another environment (no XDG_RUNTIME_DIR, from cron, ...) use the
	 * other default folders of the same user. */
	if (!run_dir_resolve(NULL, getenv("XDG_RUNTIME_DIR"), getuid(), dir, sizeof(dir)))
		scan_dir(dir, fn, arg, seen, &nseen);
	if (!run_dir_resolve(NULL, NULL, getuid(), dir, sizeof(dir)))
		scan_dir(dir, fn, arg, seen, &nseen);
	if (geteuid() != 0)
		return;
	/* root may drive everyone: look in every user's default folders too. */
	const char *bases[] = { "/tmp", "/run/user" };
	for (int b = 0; b < 2; b++) {
		DIR *d = opendir(bases[b]);
		struct dirent *de;

		if (!d)
			continue;
		while ((de = readdir(d))) {
			if (b == 0 && !strncmp(de->d_name, "vmmshim-", 8))
				snprintf(dir, sizeof(dir), "/tmp/%s", de->d_name);
			else if (b == 1 && de->d_name[0] != '.')
				snprintf(dir, sizeof(dir), "/run/user/%s/vmmshim", de->d_name);
			else
				continue;
			scan_dir(dir, fn, arg, seen, &nseen);
		}
		closedir(d);
	}
}
