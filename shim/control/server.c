/* The control server: one Unix socket per process, served by one thread that answers one request
 * per connection. Started on the first device allocation (shim_control_start), never before.
 *
 * - Only the same uid or root may drive the process (SO_PEERCRED); others get an error reply.
 * - A request must arrive within PROTO_READ_DEADLINE_MS and PROTO_MAX_REQUEST bytes, and the reply
 *   is written within PROTO_WRITE_DEADLINE_MS: a client that stalls or vanishes costs at most that.
 * - The thread blocks every signal, so the program's handlers keep running on its own threads.
 * - The socket is removed at exit; a forked child closes its copy and never answers for the
 *   parent. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../core/log.h"
#include "control.h"
#include "control_internal.h"
#include "../protocol/run_dir.h"

static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1;
static pid_t owner_pid;          /* the process the socket answers for */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static bool hooks_registered;
/* Held while a request is answered; exit takes it so that nothing is answered from a runtime
 * that is being torn down. */
static pthread_mutex_t dispatch_lock = PTHREAD_MUTEX_INITIALIZER;
static bool stopping;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read one request (up to and including its newline) before deadline. Returns its length, 0 when
 * the client went away without a word, or -1 with why. */
static ssize_t read_request(int fd, char *buf, size_t cap, long long deadline, char *why,
			    size_t whylen)
{
	size_t len = 0;

	for (;;) {
		long long left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (left <= 0) {
			snprintf(why, whylen, "request not complete within %d ms",
				 PROTO_READ_DEADLINE_MS);
			return -1;
		}
		if (poll(&p, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			snprintf(why, whylen, "poll: %s", strerror(errno));
			return -1;
		}
		if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		k = recv(fd, buf + len, cap - len, MSG_DONTWAIT);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			snprintf(why, whylen, "read: %s", strerror(errno));
			return -1;
		}
		if (k == 0) {
			if (len == 0)
				return 0;
			snprintf(why, whylen, "request cut short (no newline before the end)");
			return -1;
		}
		len += (size_t)k;
		if (memchr(buf + len - (size_t)k, '\n', (size_t)k))
			return (ssize_t)len;
		if (len == cap) {
			snprintf(why, whylen, "request longer than %d bytes", PROTO_MAX_REQUEST);
			return -1;
		}
	}
}

/* After the reply: end our side and swallow what the client still sends (bounded), so that
 * closing with unread input does not reset the connection before the client reads the reply. */
static void drain_and_close(int fd)
{
	long long deadline = now_ms() + 200;
	size_t total = 0;
	char sink[4096];

	shutdown(fd, SHUT_WR);
	while (total < (1u << 20)) {
		long long left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		k = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (k <= 0 && !(k < 0 && (errno == EINTR || errno == EAGAIN)))
			break;
		total += k > 0 ? (size_t)k : 0;
	}
	close(fd);
}

/* Write all of buf before the deadline; a client that stopped reading is dropped. */
static void write_reply(int fd, const char *buf, size_t len)
{
	long long deadline = now_ms() + PROTO_WRITE_DEADLINE_MS;
	size_t off = 0;

	while (off < len) {
		long long left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t k;

		if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR))
			return;
		if (!(p.revents & POLLOUT))
			continue;
		k = send(fd, buf + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return;
		}
		off += (size_t)k;
	}
}

static void serve_client(int fd)
{
	char buf[PROTO_MAX_REQUEST + 1], why[160];
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	proto_request req;
	proto_writer w;
	ssize_t n;

	proto_writer_init(&w);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cl != sizeof(cred)) {
		proto_error_response(&w, PROTO_ERR_PERMISSION,
				     "cannot read the client's credentials");
		goto reply;
	}
	if (cred.uid != geteuid() && cred.uid != 0) {
		vmm_log(VMM_LOG_WARN, "control: refused a client of uid %u (pid %d): only uid %u "
			"or root may drive this process", (unsigned)cred.uid, (int)cred.pid,
			(unsigned)geteuid());
		snprintf(why, sizeof(why), "uid %u may not drive this process (owned by uid %u)",
			 (unsigned)cred.uid, (unsigned)geteuid());
		proto_error_response(&w, PROTO_ERR_PERMISSION, why);
		goto reply;
	}
	n = read_request(fd, buf, PROTO_MAX_REQUEST, now_ms() + PROTO_READ_DEADLINE_MS, why,
			 sizeof(why));
	if (n == 0)
		goto done;
	if (n < 0 || proto_parse_request(buf, (size_t)n, &req, why, sizeof(why))) {
		vmm_log(VMM_LOG_INFO, "control: bad request from pid %d: %s", (int)cred.pid, why);
		proto_error_response(&w, PROTO_ERR_MALFORMED, why);
		goto reply;
	}
	vmm_log(VMM_LOG_DEBUG, "control: %s from pid %d", proto_verb_name(req.verb), (int)cred.pid);
	pthread_mutex_lock(&dispatch_lock);
	if (stopping)
		proto_error_response(&w, PROTO_ERR_BUSY, "the process is exiting");
	else
		control_dispatch(&req, &w);
	pthread_mutex_unlock(&dispatch_lock);
	if (w.failed) {
		proto_writer_free(&w);
		proto_error_response(&w, PROTO_ERR_INTERNAL, "the reply did not fit in memory");
	}
reply:
	if (!w.failed)
		write_reply(fd, w.buf, w.len);
done:
	proto_writer_free(&w);
}

static void *server_main(void *arg)
{
	int fd = (int)(intptr_t)arg;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int c;

		if (poll(&p, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p.revents & (POLLERR | POLLNVAL))
			break;
		c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED ||
			    errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				if (errno == EMFILE || errno == ENFILE)
					usleep(100000); /* out of descriptors: do not spin */
				continue;
			}
			break;
		}
		serve_client(c);
		drain_and_close(c);
	}
	vmm_log(VMM_LOG_WARN, "control: server stopped (%s)", strerror(errno));
	return NULL;
}

/* Is something answering at path? (A socket left by a dead process refuses connections.) */
static bool socket_alive(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool alive;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return alive;
}

static void at_exit(void)
{
	struct timespec ts;

	if (getpid() != owner_pid)
		return;
	control_sleep_shutdown();
	/* A request being answered finishes first (bounded: exit must not hang on it). */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	if (!pthread_mutex_timedlock(&dispatch_lock, &ts)) {
		stopping = true;
		pthread_mutex_unlock(&dispatch_lock);
	} else {
		vmm_log(VMM_LOG_WARN, "exit: a control request is still being answered");
	}
	pthread_mutex_lock(&server_lock);
	if (listen_fd >= 0) {
		unlink(sock_path);
		/* The fd stays open: the server thread may still be in poll() on it, and the
		 * process is ending anyway. */
	}
	pthread_mutex_unlock(&server_lock);
}

static void in_child(void)
{
	/* The child has no server thread; its copy of the listening socket must not linger in
	 * programs it execs, and it must not remove the parent's socket at exit. */
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	pthread_mutex_init(&server_lock, NULL);
	pthread_mutex_init(&dispatch_lock, NULL);
	control_sleep_after_fork();
}

static vmm_status bind_socket(const char *path, int *out, vmm_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode))
			return vmm_fail(err, VMM_E_INVALID, 0, "%s exists and is not a socket",
					path);
		if (socket_alive(path))
			return vmm_fail(err, VMM_E_BUSY, 0, "%s is in use by another process",
					path);
		unlink(path); /* left by a dead process that had our pid */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return vmm_fail(err, VMM_E_INVALID, errno, "socket: %s", strerror(errno));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(path, 0600) || listen(fd, 16)) {
		int e = errno;

		close(fd);
		unlink(path);
		return vmm_fail(err, VMM_E_INVALID, e, "cannot listen on %s: %s", path,
				strerror(e));
	}
	*out = fd;
	return VMM_OK;
}

vmm_status shim_control_start(shim_runtime *rt, vmm_error *err)
{
	char dir[SHIM_RUN_DIR_MAX], why[256], path[sizeof(sock_path)];
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t thread;
	vmm_status s = VMM_OK;
	int fd = -1, rc;

	if (!rt)
		return vmm_fail(err, VMM_E_INVALID, 0, "no runtime");
	pthread_mutex_lock(&server_lock);
	if (listen_fd >= 0 && owner_pid == getpid())
		goto out; /* already serving */
	control_set_autowake_default(rt->cfg.autowake);
	snprintf(dir, sizeof(dir), "%s", rt->cfg.run_dir);
	if (!dir[0] && run_dir_default(dir, sizeof(dir))) {
		s = vmm_fail(err, VMM_E_INVALID, 0, "the control folder's path is too long");
		goto out;
	}
	if (run_dir_prepare(dir, why, sizeof(why))) {
		s = vmm_fail(err, VMM_E_INVALID, 0, "control socket folder refused: %s", why);
		goto out;
	}
	if (run_dir_socket_path(dir, getpid(), path, sizeof(path))) {
		s = vmm_fail(err, VMM_E_INVALID, 0, "%s: too long for a socket address", dir);
		goto out;
	}
	if ((s = bind_socket(path, &fd, err)))
		goto out;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&thread, &attr, server_main, (void *)(intptr_t)fd);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		close(fd);
		unlink(path);
		s = vmm_fail(err, VMM_E_INVALID, rc, "cannot start the control thread: %s",
			     strerror(rc));
		goto out;
	}
	pthread_setname_np(thread, "vmmshim-ctl");
	listen_fd = fd;
	owner_pid = getpid();
	memcpy(sock_path, path, sizeof(sock_path));
	if (!hooks_registered) {
		hooks_registered = true;
		atexit(at_exit);
		pthread_atfork(NULL, NULL, in_child);
	}
	vmm_log(VMM_LOG_INFO, "control: listening on %s", sock_path);
out:
	pthread_mutex_unlock(&server_lock);
	return s;
}
