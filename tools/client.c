/* Finding a process's control socket and talking to it. Every step has a deadline (connecting
 * included: a server whose queue is full is waited for, never blocked on); who answers is
 * checked before anything is sent (trust.h); a reply is bounded in bytes, records and the memory
 * its records take. */
#include "client.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../core/mono_wait.h"
#include "cli.h"
#include "run_dir.h"
#include "proc_start.h"
#include "stale_socket.h"
#include "trust.h"

#define MAX_LIST_SOCKETS 4096

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

/* Does pid have libvmmshim loaded? 1 yes, 0 no, -1 cannot tell. */
static int has_shim(pid_t pid)
{
	char path[64], line[4096];
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "libvmmshim") != NULL;
	fclose(f);
	return found;
}

/* The target's own VMMSHIM_RUN_DIR / XDG_RUNTIME_DIR, as its environment names them. */
static int target_env_dir(pid_t pid, uid_t owner, char *dir, size_t cap)
{
	char path[64], chunk[4096], *env = NULL;
	size_t envlen = 0, capacity = 0, k;
	int rc = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0 && envlen < (1u << 20)) {
		if (envlen + k > capacity) {
			char *ne = realloc(env, (envlen + k) * 2);

			if (!ne)
				break;
			env = ne;
			capacity = (envlen + k) * 2;
		}
		memcpy(env + envlen, chunk, k);
		envlen += k;
	}
	fclose(f);
	if (env)
		rc = run_dir_resolve(env_lookup(env, envlen, "VMMSHIM_RUN_DIR"),
				     env_lookup(env, envlen, "XDG_RUNTIME_DIR"), owner, dir, cap);
	free(env);
	return rc;
}

static void add_tried(char *tried, size_t cap, const char *dir)
{
	size_t n = strlen(tried);

	if (strstr(tried, dir))
		return;
	snprintf(tried + n, cap - n, "%s%s", n ? ", " : "", dir);
}

int client_find_socket(pid_t pid, client_target *t, client_error *e)
{
	char procdir[64], dirs[2][512], tried[1100] = "", refused[300] = "";
	struct stat st;
	int ndirs = 0, shim;
	uid_t owner;

	memset(t, 0, sizeof(*t));
	snprintf(procdir, sizeof(procdir), "/proc/%ld", (long)pid);
	if (proc_ended(pid) || stat(procdir, &st))
		return set_error(e, EXIT_NO_PROCESS, "no_process", "no process with pid %ld",
				 (long)pid);
	owner = st.st_uid;
	if (owner != geteuid() && geteuid() != 0)
		return set_error(e, EXIT_PERMISSION, PROTO_ERR_PERMISSION,
				 "process %ld belongs to uid %u: only that user or root may drive "
				 "it", (long)pid, (unsigned)owner);

	/* The folder the target's own environment names comes first, then ours. */
	if (!target_env_dir(pid, owner, dirs[ndirs], sizeof(dirs[0])))
		ndirs++;
	if (!run_dir_default(dirs[ndirs], sizeof(dirs[0])))
		ndirs++;
	for (int i = 0; i < ndirs; i++) {
		char why[256];

		if (lstat(dirs[i], &st))
			continue;
		add_tried(tried, sizeof(tried), dirs[i]);
		if (!run_dir_socket_path(dirs[i], pid, t->path, sizeof(t->path)) &&
		    is_socket(t->path)) {
			t->pid = pid;
			snprintf(t->dir, sizeof(t->dir), "%s", dirs[i]);
			return 0;
		}
		if (!refused[0] && run_dir_check(dirs[i], &st, owner, why, sizeof(why)))
			snprintf(refused, sizeof(refused), "%s", why);
	}
	t->path[0] = '\0';
	shim = has_shim(pid);
	if (shim == 0)
		return set_error(e, EXIT_NO_PROCESS, "not_shimmed",
				 "process %ld is not running under vmmshim (libvmmshim is not "
				 "loaded in it)", (long)pid);
	if (refused[0])
		return set_error(e, EXIT_NO_PROCESS, "refused_folder",
				 "process %ld has no control socket: vmmshim refused its folder "
				 "(%s), so it runs without one; fix the folder and restart it",
				 (long)pid, refused);
	return set_error(e, EXIT_NO_PROCESS, "not_shimmed",
			 "process %ld %s, or has not allocated device memory yet (it creates its "
			 "socket then), or runs with VMMSHIM_CONTROL=0: no control socket in %s",
			 (long)pid, shim > 0 ? "runs under vmmshim but has no socket" :
					       "is not running under vmmshim",
			 tried[0] ? tried : "any folder");
}

/* What trust_decide needs about the server connected on fd. 0, or -1 with why. */
static int gather_facts(const client_target *t, int fd, trust_facts *f, char *why,
			size_t whylen)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	struct stat st;

	memset(f, 0, sizeof(*f));
	f->caller = geteuid();
	f->name_pid = t->pid;
	f->dir_named_uid = trust_dir_named_uid(t->dir);
	if (lstat(t->dir, &st)) {
		snprintf(why, whylen, "cannot stat its folder: %s", strerror(errno));
		return -1;
	}
	f->dir_is_dir = S_ISDIR(st.st_mode);
	f->dir_owner = st.st_uid;
	f->dir_mode = st.st_mode;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cl != sizeof(cred)) {
		snprintf(why, whylen, "cannot read the server's credentials");
		return -1;
	}
	f->peer_uid = cred.uid;
	f->peer_pid = cred.pid;
	f->same_pidns = 0;
	if (cred.pid > 0) {
		char mine[64] = "", theirs[64] = "", path[64];
		ssize_t a = readlink("/proc/self/ns/pid", mine, sizeof(mine) - 1), b;

		snprintf(path, sizeof(path), "/proc/%ld/ns/pid", (long)cred.pid);
		b = readlink(path, theirs, sizeof(theirs) - 1);
		if (a <= 0 || b <= 0)
			f->same_pidns = -1;
		else
			f->same_pidns = a == b && !memcmp(mine, theirs, (size_t)a);
	}
	return 0;
}

/* The socket refuses connections: its process ended (remove it when asked and still the same
 * socket), or it is not serving. */
static int refused_socket(const client_target *t, const struct stat *before, int err,
			  bool remove_stale, client_error *e)
{
	if (!proc_ended(t->pid))
		return set_error(e, EXIT_NO_PROCESS, "not_shimmed",
				 "process %ld does not answer on %s (%s)", (long)t->pid, t->path,
				 strerror(err));
	if (remove_stale && err == ECONNREFUSED && stale_socket_remove(t->path, before, t->pid))
		return set_error(e, EXIT_NO_PROCESS, "stale",
				 "removed %s, left by process %ld, which has ended", t->path,
				 (long)t->pid);
	return set_error(e, EXIT_NO_PROCESS, "no_process",
			 "process %ld has ended (its socket %s is left over)", (long)t->pid,
			 t->path);
}

/* Connect before the deadline (0: none). A full queue is retried, never blocked on. Returns the
 * connected descriptor, or -1 with e filled. */
static int connect_before(const client_target *t, double deadline, double timeout,
			  bool remove_stale, client_error *e)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat before;
	int fd, err;

	if (lstat(t->path, &before)) {
		err = errno;
		memset(&before, 0, sizeof(before));
		if (proc_ended(t->pid))
			return set_error(e, EXIT_NO_PROCESS, "no_process",
					 "process %ld has ended", (long)t->pid), -1;
		return set_error(e, EXIT_NO_PROCESS, "not_shimmed", "%s: %s", t->path,
				 strerror(err)), -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return set_error(e, EXIT_REPORTED, "internal", "socket: %s", strerror(errno)), -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", t->path);
	for (;;) {
		double left = deadline - vmm_now_s();

		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		err = errno;
		if (err == EINTR)
			continue;
		if (err == EINPROGRESS) {
			/* (Unix sockets answer EAGAIN instead; kept for completeness.) */
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			socklen_t sl = sizeof(err);

			if (poll(&p, 1, left > 0 ? (int)(left * 1000) + 1 : 0) > 0) {
				if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl))
					err = errno;
				if (!err)
					return fd;
			} else {
				left = 0;
				err = EAGAIN;
			}
		}
		if (err == EAGAIN) {
			/* The server's queue is full (or it is stopped): retry, within limits. */
			if (left <= 0) {
				close(fd);
				return set_error(e, EXIT_TIMEOUT, "timeout",
						 "process %ld accepted no connection within %.3g s "
						 "(its queue is full)", (long)t->pid, timeout), -1;
			}
			usleep(left < 0.02 ? (useconds_t)(left * 1e6) + 1 : 20000);
			continue;
		}
		close(fd);
		if (err == EACCES || err == EPERM)
			return set_error(e, EXIT_PERMISSION, PROTO_ERR_PERMISSION,
					 "not allowed to connect to %s", t->path), -1;
		return refused_socket(t, &before, err, remove_stale, e), -1;
	}
}

/* Turn the reply's lines into records, within PROTO_MAX_RECORDS and CLIENT_RECORDS_BUDGET. */
static int parse_reply(char *buf, size_t len, pid_t pid, client_reply *out, client_error *e)
{
	proto_record *scratch = malloc(sizeof(*scratch));
	size_t pos = 0, cap = 0;
	bool ended = false;
	char why[160];
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!scratch)
		return set_error(e, EXIT_REPORTED, "internal", "out of memory");
	while (pos < len && !ended && !rc) {
		char *nl = memchr(buf + pos, '\n', len - pos);
		size_t n, size;

		if (!nl)
			break;
		n = (size_t)(nl - (buf + pos));
		if (!out->word) {
			out->word = proto_parse_header(buf + pos, n);
			if (!out->word)
				rc = set_error(e, EXIT_REPORTED, "protocol",
					       "process %ld answered in a protocol this vmmctl "
					       "does not speak", (long)pid);
		} else if (n == 3 && !memcmp(buf + pos, "end", 3)) {
			ended = true;
		} else if (proto_parse_record(buf + pos, n, scratch, why, sizeof(why))) {
			rc = set_error(e, EXIT_REPORTED, "protocol",
				       "bad reply from process %ld: %s", (long)pid, why);
		} else if (out->nrecords == PROTO_MAX_RECORDS) {
			rc = set_error(e, EXIT_REPORTED, "protocol",
				       "the reply of process %ld has more than %d records: refused",
				       (long)pid, PROTO_MAX_RECORDS);
		} else {
			size = offsetof(proto_record, fields) +
			       (size_t)scratch->nfields * sizeof(proto_field);
			if (out->bytes + size > CLIENT_RECORDS_BUDGET) {
				rc = set_error(e, EXIT_REPORTED, "protocol",
					       "the reply of process %ld is too large to hold "
					       "(over %u MiB parsed): refused", (long)pid,
					       CLIENT_RECORDS_BUDGET >> 20);
				break;
			}
			if ((size_t)out->nrecords == cap) {
				size_t nc = cap ? cap * 2 : 16;
				proto_record **nr = realloc(out->records, nc * sizeof(*nr));

				if (!nr) {
					rc = set_error(e, EXIT_REPORTED, "internal", "out of memory");
					break;
				}
				out->records = nr;
				cap = nc;
			}
			out->records[out->nrecords] = malloc(size);
			if (!out->records[out->nrecords]) {
				rc = set_error(e, EXIT_REPORTED, "internal", "out of memory");
				break;
			}
			memcpy(out->records[out->nrecords++], scratch, size);
			out->bytes += size;
		}
		pos += n + 1;
	}
	free(scratch);
	if (!rc && !ended)
		rc = set_error(e, EXIT_REPORTED, "protocol",
			       "process %ld closed the connection before its reply was complete",
			       (long)pid);
	return rc;
}

/* The connection ended before the reply did: if the process died (it may take a moment to be
 * seen dead), say so. */
static int cut_short(pid_t pid, const char *how, client_error *e)
{
	for (int i = 0; i < 25; i++) {
		if (proc_ended(pid))
			return set_error(e, EXIT_NO_PROCESS, "no_process",
					 "process %ld ended before it answered", (long)pid);
		usleep(20000);
	}
	return set_error(e, EXIT_REPORTED, "protocol",
			 "process %ld closed the connection before its reply was complete%s%s",
			 (long)pid, how ? ": " : "", how ? how : "");
}

/* The default tick: the time waited, on the same line. */
static void show_waiting(const client_target *t, const proto_request *req, double waited,
			 bool done, void *arg)
{
	(void)t;
	(void)arg;
	if (done)
		fprintf(stderr, "\r%40s\r", "");
	else
		fprintf(stderr, "\r%s: waiting %.1f s ", proto_verb_name(req->verb), waited);
}

int client_call(const client_target *t, const proto_request *req, double timeout,
		bool progress, bool remove_stale, client_reply *out, client_error *e)
{
	return client_call_tick(t, req, timeout, progress ? show_waiting : NULL, NULL,
				remove_stale, out, e);
}

/* One request on a connected socket: what is sent, what came back. */
struct exchange {
	const client_target *t;
	int fd;
	const char *line;
	size_t n, sent;        /* the request and how much of it is sent */
	char *buf;             /* the reply so far */
	size_t len, cap;
	bool ended, eof;
};

static int too_large(const struct exchange *x, client_error *e)
{
	return set_error(e, EXIT_REPORTED, "protocol",
			 "the reply of process %ld is larger than %u bytes: refused",
			 (long)x->t->pid, PROTO_MAX_RESPONSE);
}

/* Room for 4 KiB more of the reply, up to PROTO_MAX_RESPONSE. */
static int make_room(struct exchange *x, client_error *e)
{
	size_t nc = x->cap ? x->cap * 2 : 16384;
	char *nb;

	if (x->len + 4096 + 1 <= x->cap)
		return 0;
	if (nc > PROTO_MAX_RESPONSE + 4096 + 1)
		nc = PROTO_MAX_RESPONSE + 4096 + 1;
	if (nc <= x->cap)
		return too_large(x, e);
	if (!(nb = realloc(x->buf, nc)))
		return set_error(e, EXIT_REPORTED, "internal", "out of memory");
	x->buf = nb;
	x->cap = nc;
	return 0;
}

/* Send what poll allows of the request. */
static int send_some(struct exchange *x, short revents, client_error *e)
{
	ssize_t k;

	if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
		return 0;
	k = send(x->fd, x->line + x->sent, x->n - x->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (k < 0 && errno != EAGAIN && errno != EINTR)
		return cut_short(x->t->pid, strerror(errno), e);
	x->sent += k > 0 ? (size_t)k : 0;
	return 0;
}

/* Read what poll allows of the reply; it has ended at "end\n" on a line of its own, or EOF. */
static int recv_some(struct exchange *x, short revents, client_error *e)
{
	ssize_t k;
	int rc;

	if (!(revents & (POLLIN | POLLHUP | POLLERR)))
		return 0;
	if ((rc = make_room(x, e)))
		return rc;
	k = recv(x->fd, x->buf + x->len, x->cap - x->len - 1, MSG_DONTWAIT);
	if (k < 0)
		return errno == EAGAIN || errno == EINTR ? 0 :
							 cut_short(x->t->pid, strerror(errno), e);
	if (k == 0)
		x->ended = x->eof = true;
	x->len += (size_t)k;
	if (x->len > PROTO_MAX_RESPONSE)
		return too_large(x, e);
	if (x->len >= 4 && !memcmp(x->buf + x->len - 4, "end\n", 4) &&
	    (x->len == 4 || x->buf[x->len - 5] == '\n'))
		x->ended = true;
	return 0;
}

/* Send the request and read the reply within the deadline, ticking the progress display. */
static int run_exchange(struct exchange *x, const proto_request *req, double timeout,
			double deadline, client_tick_fn tick, void *tick_arg, bool *shown,
			client_error *e)
{
	double start = vmm_now_s(), last_shown = start;
	int rc = 0;

	while (!x->ended && !rc) {
		struct pollfd p = { .fd = x->fd, .events = x->sent < x->n ? POLLOUT : POLLIN };
		double tn = vmm_now_s();
		int wait_ms = 500;

		if (deadline && tn >= deadline)
			return set_error(e, EXIT_TIMEOUT, "timeout",
					 "no answer from process %ld within %.3g s%s",
					 (long)x->t->pid, timeout,
					 req->verb == PROTO_SLEEP || req->verb == PROTO_WAKE ?
					 " (vmmctl hung up, which cancels the request: the process "
					 "rolls it back if it had started it; see vmmctl status)" : "");
		if (deadline && (deadline - tn) * 1000 < wait_ms)
			wait_ms = (int)((deadline - tn) * 1000) + 1;
		if (tick && tn - start >= 1.0 && tn - last_shown >= 0.5) {
			tick(x->t, req, tn - start, false, tick_arg);
			*shown = true;
			last_shown = vmm_now_s();
		}
		if (poll(&p, 1, wait_ms) < 0 && errno != EINTR)
			return set_error(e, EXIT_REPORTED, "internal", "poll: %s", strerror(errno));
		rc = x->sent < x->n ? send_some(x, p.revents, e) : recv_some(x, p.revents, e);
	}
	return rc;
}

/* A server that says it is another process is not believed. */
static int check_identity(const client_target *t, const client_reply *out, client_error *e)
{
	const proto_record *info = client_reply_find(out, "info");
	uint64_t said;

	if (info && proto_record_u64(info, "pid", &said) && said != (uint64_t)t->pid)
		return set_error(e, EXIT_PERMISSION, "untrusted",
				 "not believing %s: it says it is pid %llu", t->path,
				 (unsigned long long)said);
	return 0;
}

int client_call_tick(const client_target *t, const proto_request *req, double timeout,
		     client_tick_fn tick, void *tick_arg, bool remove_stale, client_reply *out,
		     client_error *e)
{
	char line[PROTO_MAX_REQUEST + 1], why[256];
	double start = vmm_now_s(), deadline = timeout > 0 ? start + timeout : 0;
	struct exchange x = { .t = t, .line = line };
	bool shown = false;
	trust_facts facts;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!(x.n = proto_format_request(req, line, sizeof(line))))
		return set_error(e, EXIT_USAGE, "invalid", "cannot encode the request");
	x.fd = connect_before(t, deadline ? deadline : start + CLIENT_CONNECT_DEFAULT_S,
			      timeout > 0 ? timeout : CLIENT_CONNECT_DEFAULT_S, remove_stale, e);
	if (x.fd < 0)
		return e->exit_code;
	/* Who answers is checked before anything is said. */
	if (gather_facts(t, x.fd, &facts, why, sizeof(why)) ||
	    trust_decide(&facts, why, sizeof(why))) {
		close(x.fd);
		return set_error(e, EXIT_PERMISSION, "untrusted", "not talking to %s: %s",
				 t->path, why);
	}
	rc = run_exchange(&x, req, timeout, deadline, tick, tick_arg, &shown, e);
	close(x.fd);
	if (shown)
		tick(t, req, vmm_now_s() - start, true, tick_arg);
	if (!rc && x.eof && (x.len < 4 || memcmp(x.buf + x.len - 4, "end\n", 4)))
		rc = cut_short(t->pid, NULL, e);
	if (!rc)
		rc = parse_reply(x.buf ? x.buf : (char *)"", x.len, t->pid, out, e);
	free(x.buf);
	if (!rc)
		rc = check_identity(t, out, e);
	if (rc)
		client_reply_free(out);
	return rc;
}

const proto_record *client_reply_find(const client_reply *r, const char *kind)
{
	for (int i = 0; i < r->nrecords; i++)
		if (!strcmp(r->records[i]->kind, kind))
			return r->records[i];
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
	/* not_ready: nothing to sleep yet, as with no socket at all (exit 3). */
	return set_error(e, status && !strcmp(status, PROTO_ERR_PERMISSION) ? EXIT_PERMISSION :
		       status && !strcmp(status, PROTO_ERR_NOT_READY) ? EXIT_NO_PROCESS :
		       EXIT_REPORTED, status ? status : "error", "%s",
		       msg ? msg : "the process reported an error");
}

void client_reply_free(client_reply *r)
{
	for (int i = 0; i < r->nrecords; i++)
		free(r->records[i]);
	free(r->records);
	memset(r, 0, sizeof(*r));
}

/* list: the folders to look in. */

struct found {
	client_target *t;
	int n, cap;
	char (*seen)[512];
	int nseen;
	void (*note)(const char *msg, void *arg);
	void *arg;
};

static void note(struct found *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct found *f, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (!f->note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	f->note(msg, f->arg);
}

static int scan_dir(struct found *f, const char *dir)
{
	trust_facts facts = { .caller = geteuid() };
	struct dirent *de;
	struct stat st;
	char why[256];
	DIR *d;

	for (int i = 0; i < f->nseen; i++)
		if (!strcmp(f->seen[i], dir))
			return 0;
	if (f->nseen < 64)
		snprintf(f->seen[f->nseen++], 512, "%s", dir);
	if (lstat(dir, &st))
		return 0; /* no such folder: nothing to say */
	facts.dir_is_dir = S_ISDIR(st.st_mode);
	facts.dir_owner = st.st_uid;
	facts.dir_mode = st.st_mode;
	facts.dir_named_uid = trust_dir_named_uid(dir);
	if (trust_folder(&facts, why, sizeof(why))) {
		note(f, "skipping %s: %s", dir, why);
		return 0;
	}
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		client_target *t;
		char *end;
		long pid = strtol(de->d_name, &end, 10);

		if (pid <= 0 || pid > INT_MAX || de->d_name[0] < '0' || de->d_name[0] > '9' ||
		    strcmp(end, ".sock"))
			continue;
		if (f->n == MAX_LIST_SOCKETS) {
			note(f, "more than %d sockets: the rest are not listed", MAX_LIST_SOCKETS);
			break;
		}
		if (f->n == f->cap) {
			int nc = f->cap ? f->cap * 2 : 16;
			client_target *nt = realloc(f->t, (size_t)nc * sizeof(*nt));

			if (!nt) {
				closedir(d);
				return -1;
			}
			f->t = nt;
			f->cap = nc;
		}
		t = &f->t[f->n];
		memset(t, 0, sizeof(*t));
		t->pid = (pid_t)pid;
		snprintf(t->dir, sizeof(t->dir), "%s", dir);
		if (!run_dir_socket_path(dir, t->pid, t->path, sizeof(t->path)) &&
		    is_socket(t->path))
			f->n++;
	}
	closedir(d);
	return 0;
}

static bool is_real_folder(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && S_ISDIR(st.st_mode);
}

int client_list_sockets(client_target **out, void (*note_fn)(const char *msg, void *arg),
			void *arg)
{
	char seen[64][512], dir[512];
	struct found f = { .seen = seen, .note = note_fn, .arg = arg };
	int rc = 0;

	*out = NULL;
	if (!run_dir_default(dir, sizeof(dir)))
		rc |= scan_dir(&f, dir);
	/* Processes started with another environment (no XDG_RUNTIME_DIR, from cron, ...) use the
	 * other default folders of the same user. */
	if (!run_dir_resolve(NULL, getenv("XDG_RUNTIME_DIR"), getuid(), dir, sizeof(dir)))
		rc |= scan_dir(&f, dir);
	if (!run_dir_resolve(NULL, NULL, getuid(), dir, sizeof(dir)))
		rc |= scan_dir(&f, dir);
	if (geteuid() == 0) {
		/* root may drive everyone: look in every user's default folders too. */
		const char *bases[] = { "/tmp", "/run/user" };

		for (int b = 0; b < 2 && !rc; b++) {
			DIR *d = opendir(bases[b]);
			struct dirent *de;

			if (!d)
				continue;
			while (!rc && (de = readdir(d))) {
				if (strlen(de->d_name) >= 200)
					continue;
				if (b == 0)
					snprintf(dir, sizeof(dir), "/tmp/%s", de->d_name);
				else
					snprintf(dir, sizeof(dir), "/run/user/%s/vmmshim",
						 de->d_name);
				/* Only the shim's names (/tmp/vmmshim-*, /run/user/NAME/vmmshim). A
				 * folder named for a uid is judged (a link there is worth a word);
				 * another only when it is a real folder: a file such as a test's
				 * /tmp/vmmshim-soak-1.stats is not a run folder at all. */
				if ((b == 0 && strncmp(de->d_name, "vmmshim-", 8)) ||
				    (b == 1 && de->d_name[0] == '.'))
					continue;
				if (trust_dir_named_uid(dir) < 0 && !is_real_folder(dir))
					continue;
				rc |= scan_dir(&f, dir);
			}
			closedir(d);
		}
	}
	if (rc) {
		free(f.t);
		return -1;
	}
	*out = f.t;
	return f.n;
}
