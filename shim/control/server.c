/* The control server: one Unix socket per process, started on the first device allocation
 * (shim_control_start), never before. Clients are served concurrently, so that a slow or silent
 * client never delays another:
 *
 * - One thread (vmmshim-ctl) accepts connections and reads every request at once with poll():
 *   at most CONTROL_MAX_CLIENTS connections at a time, each with PROTO_READ_DEADLINE_MS to send
 *   its request (one line of at most PROTO_MAX_REQUEST bytes). Beyond that many, a connection
 *   gets a "busy" error at once and is closed; it never waits in line.
 * - A complete request is answered on a thread of the pool (worker_pool.h: at most
 *   POOL_MAX_BUSY at once, "busy" beyond; threads wait a while for the next request rather than
 *   end), which writes the reply within PROTO_WRITE_DEADLINE_MS. hello, status and cancel never
 *   wait for a sleep or wake (dispatch.c).
 * - Only the same uid or root may drive the process (SO_PEERCRED); others get an error reply.
 * - A share_open asking keep=true keeps its connection after the reply (conn_return.h), so that
 *   an importer's next open skips connecting and the checks on connecting: the connection waits
 *   for its next request like a new one, at most CONTROL_KEPT_IDLE_MS, at most CONTROL_MAX_KEPT
 *   of them at once, and an idle one is closed to make room for a new connection. Its client
 *   connects again when it finds it closed.
 * - A sleep or wake whose client has hung up is not run, and one that runs when it does rolls
 *   back (conn_gone is the orchestration's gone() callback).
 * - The threads block every signal, so the program's handlers keep running on its own threads.
 * - The socket is removed at exit; a forked child closes its copy and never answers for the
 *   parent. A socket left at our name by a dead process is replaced. */
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

#include "../../core/lib_thread.h"
#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "control.h"
#include "control_internal.h"
#include "../../core/vmm_share.h"
#include "../protocol/fd_pass.h"
#include "../protocol/run_dir.h"
#include "conn_return.h"
#include "worker_pool.h"

#define CONTROL_MAX_CLIENTS 64   /* connections being read (or told why not) at once */
#define CONTROL_BACKLOG 64
#define DRAIN_MS 200             /* after an error reply: how long to swallow the client's rest */
#define CONTROL_MAX_KEPT 32      /* kept connections waiting for their next request */
#define CONTROL_KEPT_IDLE_MS 60000 /* how long a kept connection may wait for its next request */

static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1;
static pid_t owner_pid;          /* the process the socket answers for */
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static bool hooks_registered;

/* A connection the accepting thread is reading (only that thread touches these). */
struct conn {
	int fd;
	bool draining;           /* answered already: swallowing what the client still sends */
	bool kept;               /* kept after a reply, no byte of the next request yet */
	long long deadline;
	struct ucred cred;
	size_t len;
	char buf[PROTO_MAX_REQUEST + 1];
};
static struct conn *conns[CONTROL_MAX_CLIENTS];

/* Connections the workers hold, so that a forked child closes its copies: a copy alive in a
 * child would keep a kept connection open after the parent closed it, and its client would wait
 * for a reply nobody sends. */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static int held[POOL_MAX_BUSY];
static int nheld;

static void held_add(int fd)
{
	pthread_mutex_lock(&held_lock);
	if (nheld < POOL_MAX_BUSY)
		held[nheld++] = fd;
	pthread_mutex_unlock(&held_lock);
}

/* Forget fd, handing it back first when back (under the lock: a fork sees it in one place). */
static bool held_remove(int fd, bool back, const struct ucred *cred)
{
	bool kept = false;

	pthread_mutex_lock(&held_lock);
	if (back)
		kept = conn_return_push(fd, cred);
	for (int i = 0; i < nheld; i++)
		if (held[i] == fd) {
			held[i] = held[--nheld];
			break;
		}
	pthread_mutex_unlock(&held_lock);
	return kept;
}

/* A request handed to a worker thread. */
struct job {
	int fd;
	struct ucred cred;
	proto_request req;
	bool keep;               /* hand the connection back after the reply (conn_return.h) */
};

/* Has the client closed its end? (A client that only shut down writing still waits for the
 * reply: that is not gone.) */
static bool conn_gone(void *arg)
{
	struct pollfd p = { .fd = (int)(intptr_t)arg, .events = 0 };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* After the reply: end our side and swallow what the client still sends (bounded), so that
 * closing with unread input does not reset the connection before the client reads the reply. */
static void drain_and_close(int fd)
{
	long long deadline = vmm_now_ms() + DRAIN_MS;
	size_t total = 0;
	char sink[4096];

	shutdown(fd, SHUT_WR);
	while (total < (1u << 20)) {
		long long left = deadline - vmm_now_ms();
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

/* Write all of buf before the deadline; a client that stopped reading is dropped (false). */
static bool write_reply(int fd, const char *buf, size_t len)
{
	long long deadline = vmm_now_ms() + PROTO_WRITE_DEADLINE_MS;
	size_t off = 0;

	while (off < len) {
		long long left = deadline - vmm_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t k;

		if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR))
			return false;
		if (!(p.revents & (POLLOUT | POLLERR | POLLHUP)))
			continue;
		k = send(fd, buf + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return false;
		}
		off += (size_t)k;
	}
	return true;
}

/* A short error reply sent without waiting: it fits in a fresh connection's buffer. */
static void send_error_now(int fd, const char *word, const char *msg)
{
	proto_writer w;

	proto_writer_init(&w);
	proto_error_response(&w, word, msg);
	if (!w.failed && send(fd, w.buf, w.len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		vmm_log(VMM_LOG_DEBUG, "control: could not send an error reply: %s",
			strerror(errno));
	proto_writer_free(&w);
}

/* Answer one request (on a thread of the pool). */
static void worker_main(void *arg)
{
	struct job *j = arg;
	control_client client = { .gone = conn_gone, .gone_arg = (void *)(intptr_t)j->fd,
				  .pid = (long)j->cred.pid };
	int fds[VMM_SHARE_MAX_PIECES];
	size_t nfds = 0;
	proto_writer w;
	struct timespec t0, t1, t2; /* for share_open's info line */
	bool exiting, exported = false, sent = false;

	proto_writer_init(&w);
	exiting = pool_stopping();
	vmm_log(VMM_LOG_DEBUG, "control: %s from pid %ld", proto_verb_name(j->req.verb),
		client.pid);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (exiting)
		proto_error_response(&w, PROTO_ERR_BUSY, "the process is exiting");
	else if (j->req.verb == PROTO_SHARE_OPEN)
		control_share_open(&j->req, j->cred.uid, j->cred.pid, &w, fds, &nfds, &exported);
	else if (j->req.verb == PROTO_APP_OPEN) {
		control_app_open(&j->req, j->cred.uid, j->cred.pid, &w, &fds[0]);
		nfds = fds[0] >= 0;
	} else
		control_dispatch(&j->req, &client, &w);
	if (w.failed) {
		proto_writer_free(&w);
		proto_error_response(&w, PROTO_ERR_INTERNAL, "the reply did not fit in memory");
		control_share_close_fds(fds, nfds);
		nfds = 0;
	}
	/* Memory descriptors travel with the reply's first bytes (share_open, app_open). */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (!w.failed && w.len && nfds)
		sent = !fd_pass_send_many(j->fd, w.buf, w.len, fds, nfds,
					  fd_pass_now_ms() + PROTO_WRITE_DEADLINE_MS);
	else if (!w.failed && w.len)
		sent = write_reply(j->fd, w.buf, w.len);
	control_share_close_fds(fds, nfds);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	/* The exporter's side of one legacy IPC open (the importer logs its own, hooks_ipc.c):
	 * fds is finding the export and its descriptors (exported now, or dups of kept ones). */
	if (nfds && j->req.verb == PROTO_SHARE_OPEN)
		vmm_log(VMM_LOG_INFO, "share_open: %zu descriptors to pid %ld share_open_phases_ms "
			"fds=%.3f send=%.3f exported=%d at_once=0", nfds, client.pid,
			vmm_ms_between(&t0, &t1), vmm_ms_between(&t1, &t2), exported ? 1 : 0);
	proto_writer_free(&w);
	pool_answered(); /* what is left is closing the connection (or handing it back) */
	/* Kept: the reading thread waits on it for the next request. */
	if (!held_remove(j->fd, j->keep && sent && !exiting, &j->cred))
		drain_and_close(j->fd);
	free(j);
}

/* Answer c's request on a thread of the pool. false: none could be had (c stays ours), why says
 * why. */
static bool start_worker(struct conn *c, const proto_request *req, char *why, size_t whylen)
{
	struct job *j = malloc(sizeof(*j));

	if (!j) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	j->fd = c->fd;
	j->cred = c->cred;
	j->req = *req;
	j->keep = req->verb == PROTO_SHARE_OPEN && req->keep;
	held_add(j->fd);
	if (!pool_submit(worker_main, j, why, whylen)) {
		held_remove(j->fd, false, NULL);
		free(j);
		return false;
	}
	return true;
}

static void close_conn(int i)
{
	struct conn *c = conns[i];

	conns[i] = NULL; /* first: a fork in between leaves a copy, never closes another fd */
	close(c->fd);
	free(c);
}

/* Tell the client why, then swallow what it still sends for a moment before closing. */
static void refuse(struct conn *c, const char *word, const char *msg)
{
	send_error_now(c->fd, word, msg);
	shutdown(c->fd, SHUT_WR);
	c->draining = true;
	c->deadline = vmm_now_ms() + DRAIN_MS;
}

static int evict_kept(void);

/* Kept connections waiting for their next request. */
static int kept_count(void)
{
	int n = 0;

	for (int i = 0; i < CONTROL_MAX_CLIENTS; i++)
		n += conns[i] && conns[i]->kept;
	return n;
}

/* Answer share_open on this thread when nothing has to wait (kept descriptors, the heap free at
 * once, the reply sent in one call): the importer's round trip then wakes one thread less.
 * false: nothing was sent, a worker answers it. */
static bool answer_now(int i, const proto_request *req)
{
	struct conn *c = conns[i];
	int fds[FD_PASS_MAX];
	size_t nfds = 0;
	proto_writer w;
	struct timespec t0, t1, t2;
	int sent;

	if (req->verb != PROTO_SHARE_OPEN || pool_stopping())
		return false;
	proto_writer_init(&w);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (!control_share_open_now(req, c->cred.uid, c->cred.pid, &w, fds, FD_PASS_MAX,
				    &nfds) || w.failed) {
		control_share_close_fds(fds, nfds);
		proto_writer_free(&w);
		return false;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	sent = fd_pass_send_now(c->fd, w.buf, w.len, fds, nfds);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	control_share_close_fds(fds, nfds);
	proto_writer_free(&w);
	if (!sent)
		return false;
	if (sent < 0) {
		vmm_log(VMM_LOG_INFO, "control: share_open reply to pid %d broken off: %s",
			(int)c->cred.pid, strerror(errno));
		close_conn(i);
		return true;
	}
	vmm_log(VMM_LOG_INFO, "share_open: %zu descriptors to pid %ld share_open_phases_ms "
		"fds=%.3f send=%.3f exported=0 at_once=1", nfds, (long)c->cred.pid,
		vmm_ms_between(&t0, &t1), vmm_ms_between(&t1, &t2));
	c->len = 0;
	if (req->keep) {
		if (kept_count() >= CONTROL_MAX_KEPT)
			evict_kept();
		c->kept = true;
		c->deadline = vmm_now_ms() + CONTROL_KEPT_IDLE_MS;
	} else {
		shutdown(c->fd, SHUT_WR);
		c->draining = true;
		c->deadline = vmm_now_ms() + DRAIN_MS;
	}
	return true;
}

/* A whole request line has arrived: parse it and answer it, here when nothing has to wait, else
 * on a worker. */
static void request_complete(int i)
{
	struct conn *c = conns[i];
	proto_request req;
	char why[160];

	if (proto_parse_request(c->buf, c->len, &req, why, sizeof(why))) {
		vmm_log(VMM_LOG_INFO, "control: bad request from pid %d: %s", (int)c->cred.pid,
			why);
		refuse(c, PROTO_ERR_MALFORMED, why);
		return;
	}
	if (answer_now(i, &req))
		return;
	if (!start_worker(c, &req, why, sizeof(why))) {
		refuse(c, PROTO_ERR_BUSY, why);
		return;
	}
	conns[i] = NULL; /* the worker owns the descriptor now */
	free(c);
}

/* Read what connection i has sent. */
static void conn_readable(int i)
{
	struct conn *c = conns[i];
	char why[160];

	/* A client that floods while being drained gets a turn, not the thread. */
	for (int turn = 0; turn < 16; turn++) {
		char sink[4096];
		ssize_t k;

		if (c->draining) {
			k = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
			if (k > 0)
				continue;
			if (k < 0 && (errno == EAGAIN || errno == EINTR))
				return;
			close_conn(i);
			return;
		}
		k = recv(c->fd, c->buf + c->len, PROTO_MAX_REQUEST - c->len, MSG_DONTWAIT);
		if (k < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			close_conn(i);
			return;
		}
		if (k == 0) {
			if (c->len == 0) {
				close_conn(i); /* went away without a word */
				return;
			}
			refuse(c, PROTO_ERR_MALFORMED,
			       "request cut short (no newline before the end)");
			return;
		}
		if (c->kept) {
			/* The next request has begun: it has the usual time to complete. */
			c->kept = false;
			c->deadline = vmm_now_ms() + PROTO_READ_DEADLINE_MS;
		}
		c->len += (size_t)k;
		if (memchr(c->buf + c->len - (size_t)k, '\n', (size_t)k)) {
			request_complete(i);
			return;
		}
		if (c->len == PROTO_MAX_REQUEST) {
			snprintf(why, sizeof(why), "request longer than %d bytes",
				 PROTO_MAX_REQUEST);
			refuse(c, PROTO_ERR_MALFORMED, why);
			return;
		}
	}
}

static void expire_conns(void)
{
	long long now = vmm_now_ms();
	char why[160];

	for (int i = 0; i < CONTROL_MAX_CLIENTS; i++) {
		struct conn *c = conns[i];

		if (!c || c->deadline > now)
			continue;
		if (c->draining || c->kept) {
			close_conn(i); /* a kept one idle too long: its client connects again */
			continue;
		}
		vmm_log(VMM_LOG_INFO, "control: pid %d sent no complete request within %d ms",
			(int)c->cred.pid, PROTO_READ_DEADLINE_MS);
		snprintf(why, sizeof(why), "request not complete within %d ms",
			 PROTO_READ_DEADLINE_MS);
		refuse(c, PROTO_ERR_MALFORMED, why);
	}
}

/* Close the kept connection idle longest; its slot, or -1 when there is none. */
static int evict_kept(void)
{
	int oldest = -1;

	for (int i = 0; i < CONTROL_MAX_CLIENTS; i++)
		if (conns[i] && conns[i]->kept &&
		    (oldest < 0 || conns[i]->deadline < conns[oldest]->deadline))
			oldest = i;
	if (oldest >= 0)
		close_conn(oldest);
	return oldest;
}

/* Wait on the connections handed back after their reply for their next request. */
static void adopt_returned(void)
{
	conn_returned back[CONN_RETURN_MAX];
	size_t n = conn_return_take(back, CONN_RETURN_MAX);

	for (size_t k = 0; k < n; k++) {
		int kept = 0, slot = -1;
		struct conn *c;

		for (int i = 0; i < CONTROL_MAX_CLIENTS; i++) {
			if (!conns[i] && slot < 0)
				slot = i;
			kept += conns[i] && conns[i]->kept;
		}
		if (slot < 0 || kept >= CONTROL_MAX_KEPT)
			slot = evict_kept();
		c = slot < 0 ? NULL : calloc(1, sizeof(*c));
		if (!c) {
			close(back[k].fd); /* its client connects again */
			continue;
		}
		c->fd = back[k].fd;
		c->cred = back[k].cred;
		c->kept = true;
		c->deadline = vmm_now_ms() + CONTROL_KEPT_IDLE_MS;
		conns[slot] = c;
	}
}

/* Take every pending connection. */
static void accept_all(int lfd)
{
	for (;;) {
		struct ucred cred = { 0 };
		socklen_t cl = sizeof(cred);
		struct conn *c;
		char why[160];
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), slot = -1;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				/* Out of descriptors: the connection stays queued; do not spin. */
				vmm_log(VMM_LOG_WARN, "control: cannot accept: %s",
					strerror(errno));
				usleep(100000);
			}
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		for (int i = 0; i < CONTROL_MAX_CLIENTS && slot < 0; i++)
			if (!conns[i])
				slot = i;
		if (slot < 0)
			slot = evict_kept(); /* an idle kept connection makes room */
		c = slot < 0 ? NULL : calloc(1, sizeof(*c));
		if (!c) {
			snprintf(why, sizeof(why), "%d clients are connected already; try again",
				 CONTROL_MAX_CLIENTS);
			send_error_now(fd, PROTO_ERR_BUSY, why);
			shutdown(fd, SHUT_WR);
			close(fd);
			continue;
		}
		c->fd = fd;
		c->deadline = vmm_now_ms() + PROTO_READ_DEADLINE_MS;
		conns[slot] = c;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cl != sizeof(cred)) {
			refuse(c, PROTO_ERR_PERMISSION, "cannot read the client's credentials");
			continue;
		}
		c->cred = cred;
		if (cred.uid != geteuid() && cred.uid != 0) {
			vmm_log(VMM_LOG_WARN, "control: refused a client of uid %u (pid %d): only "
				"uid %u or root may drive this process", (unsigned)cred.uid,
				(int)cred.pid, (unsigned)geteuid());
			snprintf(why, sizeof(why), "uid %u may not drive this process (owned by "
				 "uid %u)", (unsigned)cred.uid, (unsigned)geteuid());
			refuse(c, PROTO_ERR_PERMISSION, why);
		}
	}
}

static void *server_main(void *arg)
{
	int lfd = (int)(intptr_t)arg, back_fd = conn_return_fd();
	struct pollfd p[2 + CONTROL_MAX_CLIENTS];
	int slot_of[2 + CONTROL_MAX_CLIENTS];

	for (;;) {
		long long next = -1, now = vmm_now_ms();
		int n = 0, r;

		p[n++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		/* -1 when connections cannot be kept: poll skips it. */
		p[n++] = (struct pollfd){ .fd = back_fd, .events = POLLIN };
		for (int i = 0; i < CONTROL_MAX_CLIENTS; i++) {
			if (!conns[i])
				continue;
			p[n] = (struct pollfd){ .fd = conns[i]->fd, .events = POLLIN };
			slot_of[n++] = i;
			if (next < 0 || conns[i]->deadline < next)
				next = conns[i]->deadline;
		}
		r = poll(p, (nfds_t)n, next < 0 ? -1 : next > now ? (int)(next - now) : 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents & (POLLERR | POLLNVAL))
			break;
		for (int k = 2; k < n; k++)
			if (p[k].revents && conns[slot_of[k]])
				conn_readable(slot_of[k]);
		expire_conns();
		if (p[1].revents & POLLIN)
			adopt_returned();
		if (p[0].revents & POLLIN)
			accept_all(lfd);
	}
	vmm_log(VMM_LOG_WARN, "control: server stopped (%s)", strerror(errno));
	return NULL;
}

/* Is something listening at path? (A socket left by a dead process refuses connections; one
 * whose queue is full is alive.) Never waits. */
static bool socket_alive(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	bool alive;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN ||
		errno == EINPROGRESS;
	close(fd);
	return alive;
}

static void at_exit(void)
{
	int left;

	if (getpid() != owner_pid)
		return;
	control_sleep_shutdown();
	/* Requests being answered finish first (bounded: exit must not hang on them). */
	left = pool_stop(5000);
	if (left > 0)
		vmm_log(VMM_LOG_WARN, "exit: %d control requests are still being answered", left);
	pthread_mutex_lock(&server_lock);
	if (listen_fd >= 0) {
		unlink(sock_path);
		/* The fd stays open: the server thread may still be in poll() on it, and the
		 * process is ending anyway. */
	}
	pthread_mutex_unlock(&server_lock);
	/* Not a tail call: ThreadSanitizer ignores the locks this library takes (tsan.supp's
	 * called_from_lib) by the caller's address, and a jump to the unlock would make libc's
	 * exit code the caller, so that it saw an unlock of a lock it never saw taken. */
	__asm__ volatile("" ::: "memory");
}

static void in_child(void)
{
	/* The child has no server threads; its copy of the listening socket must not linger in
	 * programs it execs, and it must not remove the parent's socket at exit. (Connections
	 * are close-on-exec.) */
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	/* Nor may it hold the parent's connections (see held): their structures are left, as the
	 * parent's reading thread may have been changing them. */
	for (int i = 0; i < CONTROL_MAX_CLIENTS; i++) {
		if (conns[i])
			close(conns[i]->fd);
		conns[i] = NULL;
	}
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	nheld = 0;
	pthread_mutex_init(&held_lock, NULL);
	pthread_mutex_init(&server_lock, NULL);
	pool_after_fork();
	conn_return_after_fork();
	control_dispatch_after_fork();
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
		vmm_log(VMM_LOG_INFO, "control: removed %s, left by a process that has ended",
			path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return vmm_fail(err, VMM_E_INVALID, errno, "socket: %s", strerror(errno));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(path, 0600) ||
	    listen(fd, CONTROL_BACKLOG)) {
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
	if (!conn_return_init())
		vmm_log(VMM_LOG_INFO, "control: connections will not be kept (no eventfd: %s)",
			strerror(errno));

	/* The server thread (and the workers it starts) block every signal. */
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = vmm_thread_create(&thread, &attr, server_main, (void *)(intptr_t)fd);
	pthread_attr_destroy(&attr);
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
