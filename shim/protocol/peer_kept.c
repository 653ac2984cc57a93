/* Kept connections to other shimmed processes (peer_kept.h). A connection is taken out of the list
 * while a request uses it, so that two threads never share one; it goes back after a whole
 * reply. */
#include "peer_kept.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fd_pass.h"

struct kept {
	pid_t pid;
	uint64_t token;
	int fd;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct kept list[PEER_KEPT_MAX]; /* the most recently used last */
static int count;

/* Close every kept connection (lock held, or single-threaded). */
static void close_all_locked(void)
{
	for (int i = 0; i < count; i++)
		close(list[i].fd);
	count = 0;
}

/* A forked child must not use its parent's connections: the server knows them as the parent's
 * (SO_PEERCRED) and two processes would read each other's replies. */
static void in_child(void)
{
	pthread_mutex_init(&lock, NULL);
	close_all_locked();
}

static void register_fork(void)
{
	pthread_atfork(NULL, NULL, in_child);
}

/* An idle connection has nothing to read: readable means the server closed it (or sent what
 * nobody asked for); either way it is no use. */
static bool idle_ok(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* The kept connection to (pid, token), taken out of the list, or -1. */
static int take(pid_t pid, uint64_t token)
{
	int fd = -1;

	pthread_once(&once, register_fork);
	pthread_mutex_lock(&lock);
	for (int i = 0; i < count; i++) {
		if (list[i].pid != pid || list[i].token != token)
			continue;
		fd = list[i].fd;
		memmove(&list[i], &list[i + 1], (size_t)(count - i - 1) * sizeof(list[0]));
		count--;
		break;
	}
	pthread_mutex_unlock(&lock);
	if (fd >= 0 && !idle_ok(fd)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Keep fd for (pid, token) after a whole reply, unless the server has closed it. */
static void put(pid_t pid, uint64_t token, int fd)
{
	if (!idle_ok(fd)) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&lock);
	for (int i = 0; i < count; i++) {
		if (list[i].pid == pid && list[i].token == token) {
			/* Another thread kept one meanwhile: one per peer is enough. */
			pthread_mutex_unlock(&lock);
			close(fd);
			return;
		}
	}
	if (count == PEER_KEPT_MAX) {
		close(list[0].fd);
		memmove(&list[0], &list[1], (size_t)(count - 1) * sizeof(list[0]));
		count--;
	}
	list[count++] = (struct kept){ .pid = pid, .token = token, .fd = fd };
	pthread_mutex_unlock(&lock);
}

/* One request and its whole reply over fd. *gone: the connection was closed before the reply
 * began (a kept one the server gave up: worth a new connection). */
static int exchange(int fd, pid_t pid, const char *line, long long deadline, peer_reply *out,
		    bool *gone, char *why, size_t whylen)
{
	*gone = false;
	if (fd_pass_send(fd, line, strlen(line), NULL, 0, deadline)) {
		*gone = errno == EPIPE || errno == ECONNRESET;
		return peer_fail(why, whylen, "sending to pid %d: %s", (int)pid, strerror(errno));
	}
	if (peer_read_reply(fd, pid, deadline, true, out, why, whylen)) {
		*gone = errno == ECONNRESET;
		return -1;
	}
	return 0;
}

int peer_request_kept(const char *run_dir, pid_t pid, uint64_t token, peer_check_fn check,
		      const char *line, int timeout_ms, peer_reply *out, bool *reused, char *why,
		      size_t whylen)
{
	long long deadline = fd_pass_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	bool gone;
	int fd;

	memset(out, 0, sizeof(*out));
	if (reused)
		*reused = false;
	fd = take(pid, token);
	if (fd >= 0) {
		if (!exchange(fd, pid, line, deadline, out, &gone, why, whylen)) {
			put(pid, token, fd);
			if (reused)
				*reused = true;
			return 0;
		}
		close(fd);
		if (!gone)
			return -1;
	}
	fd = peer_connect(run_dir, pid, deadline, why, whylen);
	if (fd < 0)
		return -1;
	if (check && !check(pid, token)) {
		close(fd);
		peer_fail(why, whylen, "pid %d is no longer the process asked for", (int)pid);
		return PEER_KEPT_REFUSED;
	}
	if (exchange(fd, pid, line, deadline, out, &gone, why, whylen)) {
		close(fd);
		return -1;
	}
	put(pid, token, fd);
	return 0;
}

/* Did the server refuse the key `keep`? Its error reply names it in the message ("'share_open'
 * does not take 'keep'", %-escaped on the wire, the quotes as they are). */
static bool refused_keep(const peer_reply *r)
{
	static const char error[] = "vmmshim/1 error\n";

	return r->text && !strncmp(r->text, error, sizeof(error) - 1) &&
	       strstr(r->text, "'keep'");
}

int peer_request_kept_or_plain(const char *run_dir, pid_t pid, uint64_t token,
			       peer_check_fn check, const char *line, const char *plain_line,
			       int timeout_ms, peer_reply *out, bool *reused, char *why,
			       size_t whylen)
{
	int rc = peer_request_kept(run_dir, pid, token, check, line, timeout_ms, out, reused, why,
				   whylen);

	if (rc || !refused_keep(out))
		return rc;
	peer_reply_free(out);
	if (reused)
		*reused = false;
	return peer_request(run_dir, pid, plain_line, timeout_ms, out, why, whylen);
}

int peer_kept_count(void)
{
	int n;

	pthread_mutex_lock(&lock);
	n = count;
	pthread_mutex_unlock(&lock);
	return n;
}

void peer_kept_close_all(void)
{
	pthread_mutex_lock(&lock);
	close_all_locked();
	pthread_mutex_unlock(&lock);
}
