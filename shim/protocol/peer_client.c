/* The shim-to-shim control client (peer_client.h): one request per connection, a deadline over
 * connect, send and the whole reply, and the peer checked with SO_PEERCRED before anything is
 * sent (a socket in our private folder that answers as another pid or user is refused). */
#include "peer_client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../core/mono_wait.h"
#include "run_dir.h"
#include "proc_start.h"
#include "stale_socket.h"

static int fail(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Wait until fd is ready for events, at most until deadline. */
static bool wait_fd(int fd, short events, long long deadline)
{
	for (;;) {
		long long left = deadline - vmm_now_ms();
		struct pollfd p = { .fd = fd, .events = events };
		int rc;

		if (left <= 0)
			return false;
		rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return true;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

static int connect_peer(const char *dir, pid_t pid, long long deadline, char *why, size_t whylen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd;

	if (run_dir_socket_path(dir, pid, sa.sun_path, sizeof(sa.sun_path)))
		return fail(why, whylen, "socket path too long");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return fail(why, whylen, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;

		/* A full queue (EAGAIN) is worth waiting for; anything else is not there. */
		if (e != EAGAIN && e != EINPROGRESS) {
			close(fd);
			return fail(why, whylen, "pid %ld: connect: %s", (long)pid, strerror(e));
		}
		if (!wait_fd(fd, POLLOUT, deadline)) {
			close(fd);
			return fail(why, whylen, "pid %ld: connect timed out", (long)pid);
		}
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cl != sizeof(cred) ||
	    cred.pid != pid || cred.uid != geteuid()) {
		close(fd);
		return fail(why, whylen, "pid %ld: the socket is not that process of our user",
			    (long)pid);
	}
	return fd;
}

static bool send_all(int fd, const char *buf, size_t len, long long deadline)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			if (!wait_fd(fd, POLLOUT, deadline))
				return false;
		} else {
			return false;
		}
	}
	return true;
}

/* Read the whole reply (up to "end" or EOF) into a malloc'd buffer. */
static char *read_reply(int fd, long long deadline, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		ssize_t k;

		if (n + 1 >= cap) {
			char *nb = cap >= PROTO_MAX_RESPONSE ? NULL : realloc(buf, cap * 2);

			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		k = recv(fd, buf + n, cap - 1 - n, 0);
		if (k > 0) {
			n += (size_t)k;
			buf[n] = '\0';
			if (n >= 4 && !strcmp(buf + n - 4, "end\n"))
				break;
			continue;
		}
		if (k == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN && wait_fd(fd, POLLIN, deadline))
			continue;
		free(buf);
		return NULL;
	}
	if (buf)
		buf[n] = '\0';
	*len = n;
	return buf;
}

static int parse_reply(char *buf, size_t len, peer_client_reply *out, char *why, size_t whylen)
{
	char *line = buf, *nl;
	const char *word;
	bool ended = false;

	nl = memchr(line, '\n', len);
	if (!nl)
		return fail(why, whylen, "empty reply");
	word = proto_parse_header(line, (size_t)(nl - line));
	if (!word)
		return fail(why, whylen, "not a vmmshim reply");
	snprintf(out->word, sizeof(out->word), "%s", word);
	out->records = calloc(PEER_MAX_RECORDS, sizeof(proto_record));
	if (!out->records)
		return fail(why, whylen, "out of memory");
	for (line = nl + 1; line < buf + len; line = nl + 1) {
		nl = memchr(line, '\n', (size_t)(buf + len - line));
		if (!nl)
			break;
		if (nl - line == 3 && !memcmp(line, "end", 3)) {
			ended = true;
			break;
		}
		if (out->nrecords < PEER_MAX_RECORDS &&
		    !proto_parse_record(line, (size_t)(nl - line), &out->records[out->nrecords],
					NULL, 0))
			out->nrecords++;
	}
	if (!ended) {
		peer_client_free(out);
		return fail(why, whylen, "reply cut short");
	}
	return 0;
}

int peer_client_call(const char *dir, pid_t pid, const proto_request *req, int timeout_ms,
	      peer_client_reply *out, char *why, size_t whylen)
{
	long long deadline = vmm_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	char line[PROTO_MAX_REQUEST + 1], *reply;
	size_t n, rlen = 0;
	int fd, rc;

	memset(out, 0, sizeof(*out));
	n = proto_format_request(req, line, sizeof(line));
	if (!n)
		return fail(why, whylen, "request cannot be written");
	fd = connect_peer(dir, pid, deadline, why, whylen);
	if (fd < 0)
		return -1;
	if (!send_all(fd, line, n, deadline)) {
		close(fd);
		return fail(why, whylen, "pid %ld: sending the request failed", (long)pid);
	}
	reply = read_reply(fd, deadline, &rlen);
	close(fd);
	if (!reply)
		return fail(why, whylen, "pid %ld: no reply within %d ms", (long)pid, timeout_ms);
	rc = parse_reply(reply, rlen, out, why, whylen);
	free(reply);
	return rc;
}

const proto_record *peer_client_nth(const peer_client_reply *r, const char *kind, int n)
{
	for (int i = 0; i < r->nrecords; i++)
		if (!strcmp(r->records[i].kind, kind) && n-- == 0)
			return &r->records[i];
	return NULL;
}

const proto_record *peer_client_find(const peer_client_reply *r, const char *kind)
{
	return peer_client_nth(r, kind, 0);
}

const char *peer_client_error(const peer_client_reply *r)
{
	const proto_record *e;

	if (strcmp(r->word, "error"))
		return NULL;
	e = peer_client_find(r, "error");
	return e && proto_record_str(e, "message") ? proto_record_str(e, "message") : "error";
}

void peer_client_free(peer_client_reply *r)
{
	free(r->records);
	r->records = NULL;
	r->nrecords = 0;
}

/* What a connect to the socket at path says: 1 a listener is there (connected, or still
 * connecting), 0 none (refused), -1 cannot tell. */
static int socket_listens(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) >= sizeof(sa.sun_path))
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	rc = !rc || errno != ECONNREFUSED ? 1 : 0;
	close(fd);
	return rc;
}

/* Is name in dir a socket left by an ended process? Then it is removed, as vmmctl does. Only a
 * pid that no live process of this namespace has is looked at closer: a process of another pid
 * namespace sharing the folder is alive as long as its socket takes connections, and one that
 * refuses them has no listener. */
static bool left_over(const char *dir, const char *name, pid_t pid)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct stat seen;

	if (!proc_ended(pid))
		return false;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
	    lstat(path, &seen) || !S_ISSOCK(seen.st_mode) || socket_listens(path))
		return false;
	stale_socket_remove(path, &seen, pid);
	return true;
}

bool peer_client_serving(const char *dir, pid_t pid)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct stat seen;

	if ((size_t)snprintf(path, sizeof(path), "%s/%ld.sock", dir, (long)pid) >= sizeof(path))
		return true; /* cannot tell: serving, so that nothing is taken from it */
	if (lstat(path, &seen))
		return errno != ENOENT;
	return !S_ISSOCK(seen.st_mode) || socket_listens(path) != 0;
}

int peer_client_list(const char *dir, pid_t self, pid_t *out, int max)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while (n < max && (e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (end != e->d_name && !strcmp(end, ".sock") && pid > 0 && pid != self &&
		    pid <= INT_MAX && !left_over(dir, e->d_name, (pid_t)pid))
			out[n++] = (pid_t)pid;
	}
	closedir(d);
	return n;
}
