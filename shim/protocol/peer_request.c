/* One request to another shimmed process's control socket (peer_request.h). */
#include "peer_request.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd_pass.h"
#include "protocol.h"
#include "run_dir.h"

int peer_fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -1;
}

/* A connected socket to path, or -1. A full queue is retried until the deadline. */
static int connect_by(const char *path, long long deadline, char *why, size_t whylen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0)
			return peer_fail(why, whylen, "socket: %s", strerror(errno));
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		close(fd);
		if (errno != EAGAIN || fd_pass_now_ms() >= deadline)
			return peer_fail(why, whylen, "cannot connect to %s: %s", path,
				    errno == EAGAIN ? "busy" : strerror(errno));
		usleep(2000);
	}
}

int peer_connect(const char *run_dir, pid_t pid, long long deadline, char *why, size_t whylen)
{
	char dir[256], path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct ucred cred = { 0 };
	socklen_t cl = sizeof(cred);
	int fd;

	if (run_dir && run_dir[0])
		snprintf(dir, sizeof(dir), "%s", run_dir);
	else if (run_dir_default(dir, sizeof(dir)))
		return peer_fail(why, whylen, "the control folder's path is too long");
	if (!run_dir_trusted(dir, geteuid()))
		return peer_fail(why, whylen, "%s is not a private folder of this user", dir);
	if (run_dir_socket_path(dir, pid, path, sizeof(path)))
		return peer_fail(why, whylen, "%s: too long for a socket address", dir);
	fd = connect_by(path, deadline, why, whylen);
	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cl != sizeof(cred) ||
	    cred.uid != geteuid() || cred.pid != pid) {
		close(fd);
		return peer_fail(why, whylen, "the socket of pid %d is not served by that process of "
			    "this user", (int)pid);
	}
	return fd;
}

/* Has text[0..len) ended with the reply's "end" line? */
static bool at_end(const char *text, size_t len)
{
	return len >= 5 && !memcmp(text + len - 5, "\nend\n", 5);
}

int peer_read_reply(int fd, pid_t pid, long long deadline, bool until_end, peer_reply *out,
		    char *why, size_t whylen)
{
	size_t cap = 4096;

	memset(out, 0, sizeof(*out));
	out->text = malloc(cap);
	if (!out->text)
		return peer_fail(why, whylen, "out of memory");
	for (;;) {
		long k;

		if (out->len + 1 == cap) {
			char *n = cap * 2 <= PROTO_MAX_RESPONSE ? realloc(out->text, cap * 2) : NULL;

			if (!n) {
				peer_reply_free(out);
				return peer_fail(why, whylen, "the reply of pid %d is too long", (int)pid);
			}
			out->text = n;
			cap *= 2;
		}
		k = fd_pass_recv(fd, out->text + out->len, cap - 1 - out->len, out->fds,
				 sizeof(out->fds) / sizeof(out->fds[0]), &out->nfds, deadline);
		if (k < 0) {
			int e = errno;
			size_t got = out->len;

			peer_reply_free(out);
			errno = e == ECONNRESET && got ? EPROTO : e;
			return peer_fail(why, whylen, "reading the reply of pid %d: %s", (int)pid,
				    e == ETIMEDOUT ? "timed out" : strerror(e));
		}
		if (k == 0)
			break;
		out->len += (size_t)k;
		if (until_end && at_end(out->text, out->len))
			break;
	}
	out->text[out->len] = '\0';
	if (until_end && !at_end(out->text, out->len)) {
		size_t got = out->len;

		peer_reply_free(out);
		errno = got ? EPROTO : ECONNRESET;
		return peer_fail(why, whylen, "pid %d closed the connection %s", (int)pid,
			    got ? "in the middle of its reply" : "without a reply");
	}
	return 0;
}

int peer_request(const char *run_dir, pid_t pid, const char *line, int timeout_ms,
		 peer_reply *out, char *why, size_t whylen)
{
	long long deadline = fd_pass_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	int fd, rc;

	memset(out, 0, sizeof(*out));
	fd = peer_connect(run_dir, pid, deadline, why, whylen);
	if (fd < 0)
		return -1;
	if (fd_pass_send(fd, line, strlen(line), NULL, 0, deadline)) {
		close(fd);
		return peer_fail(why, whylen, "sending to pid %d: %s", (int)pid, strerror(errno));
	}
	shutdown(fd, SHUT_WR);
	rc = peer_read_reply(fd, pid, deadline, false, out, why, whylen);
	close(fd);
	return rc;
}

void peer_reply_free(peer_reply *out)
{
	for (size_t i = 0; i < out->nfds; i++)
		if (out->fds[i] >= 0)
			close(out->fds[i]);
	out->nfds = 0;
	free(out->text);
	out->text = NULL;
	out->len = 0;
}
