/* The pieces of legacy IPC between shimmed processes, on their own: descriptors passed over a
 * socket (fd_pass.c), the request to another process's control socket (peer_request.c) and who it
 * trusts, the connection kept for the next request (peer_kept.c), the share_open request's wire form, and the exporting side's trust rule (share_open.c:
 * memory goes to the same uid only, even where root may drive the process). */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../shim/control/control_internal.h"
#include "../../../shim/protocol/fd_pass.h"
#include "../../../shim/protocol/peer_kept.h"
#include "../../../shim/protocol/peer_request.h"
#include "../../../shim/protocol/run_dir.h"
#include "../../../shim/runtime.h"
#include "../../../core/vmm_share.h"

/* share_open.c's only links to the rest of the shim. */
shim_runtime *shim_runtime_peek(void)
{
	return NULL;
}

const char *control_error_word(vmm_status s)
{
	return s ? PROTO_ERR_INTERNAL : "ok";
}

Test(share_wire, descriptors_travel_with_the_first_bytes)
{
	int sv[2], p[2], got[FD_PASS_MAX];
	size_t n = 0;
	char buf[64] = { 0 };
	long k;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(fd_pass_send(sv[0], "hello", 5, p, 2, fd_pass_now_ms() + 1000), 0);
	k = fd_pass_recv(sv[1], buf, sizeof(buf), got, FD_PASS_MAX, &n, fd_pass_now_ms() + 1000);
	cr_assert_eq(k, 5);
	cr_expect_str_eq(buf, "hello");
	cr_assert_eq(n, 2);
	/* The received write end feeds the original read end: the same pipe. */
	cr_assert_eq(write(got[1], "x", 1), 1);
	cr_assert_eq(read(p[0], buf, 1), 1);
	cr_expect_eq(buf[0], 'x');
	for (size_t i = 0; i < n; i++)
		close(got[i]);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

Test(share_wire, more_descriptors_than_one_message_holds_arrive_in_order)
{
	int sv[2], p[2 * 80], got[256];
	const char text[] = "a reply of some length, longer than the number of batches";
	char buf[128];
	size_t n = 0, len = 0;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	for (int i = 0; i < 80; i++)
		cr_assert_eq(pipe(p + 2 * i), 0);
	cr_assert_eq(fd_pass_send_many(sv[0], text, sizeof(text), p, 160,
				       fd_pass_now_ms() + 1000), 0);
	while (len < sizeof(text)) {
		long k = fd_pass_recv(sv[1], buf + len, sizeof(buf) - len, got, 256, &n,
				      fd_pass_now_ms() + 1000);

		cr_assert_gt(k, 0);
		len += (size_t)k;
	}
	cr_expect_str_eq(buf, text);
	cr_assert_eq(n, 160);
	/* The i-th received descriptor is the i-th sent: each write end feeds its pipe. */
	for (int i = 0; i < 80; i++) {
		char c = (char)('A' + i % 26), back = 0;

		cr_assert_eq(write(got[2 * i + 1], &c, 1), 1);
		cr_assert_eq(read(p[2 * i], &back, 1), 1);
		cr_expect_eq(back, c, "pipe %d", i);
	}
	for (int i = 0; i < 160; i++) {
		close(got[i]);
		close(p[i]);
	}
	close(sv[0]);
	close(sv[1]);
}

Test(share_wire, sending_at_once_never_waits)
{
	int sv[2], p[2], got[4];
	static char big[1 << 16];
	size_t n = 0;
	char buf[64] = { 0 };
	int rc;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(pipe(p), 0);
	cr_expect_eq(fd_pass_send_now(sv[0], "hi", 2, p, 1), 1);
	cr_assert_eq(fd_pass_recv(sv[1], buf, sizeof(buf), got, 4, &n, fd_pass_now_ms() + 1000),
		     2);
	cr_expect_eq(n, 1, "the descriptor came with the bytes");
	close(got[0]);
	/* A peer that reads nothing: the buffer fills, then nothing more is sent, at once. */
	for (int i = 0; i < 4096; i++) {
		long long t0 = fd_pass_now_ms();

		rc = fd_pass_send_now(sv[0], big, sizeof(big), NULL, 0);
		cr_assert_lt(fd_pass_now_ms() - t0, 500, "a send waited");
		if (rc != 1)
			break;
	}
	cr_expect(rc == 0 || rc == -1, "the full buffer was never reported");
	close(sv[1]);
	cr_expect_eq(fd_pass_send_now(sv[0], "x", 1, NULL, 0), -1, "a closed peer is an error");
	close(sv[0]);
	close(p[0]);
	close(p[1]);
}

Test(share_wire, a_silent_peer_costs_the_deadline)
{
	int sv[2], got[4];
	size_t n = 0;
	char buf[8];
	long long t0 = fd_pass_now_ms();

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_expect_eq(fd_pass_recv(sv[1], buf, sizeof(buf), got, 4, &n, t0 + 200), -1);
	cr_expect_eq(errno, ETIMEDOUT);
	cr_expect_lt(fd_pass_now_ms() - t0, 1500);
	cr_expect_eq(fd_pass_send(sv[0], "x", 1, got, FD_PASS_MAX + 1, t0 + 200), -1);
	close(sv[0]);
	close(sv[1]);
}

/* A one-shot server at dir/<pid>.sock: answers `reply` with a pipe's read end attached, or never
 * answers when reply is NULL. */
struct server {
	int lfd;
	const char *reply;
	char path[108];
	pthread_t t;
};

static void *serve(void *arg)
{
	struct server *s = arg;
	int c = accept(s->lfd, NULL, NULL), p[2];
	char buf[512];

	if (c < 0)
		return NULL;
	if (read(c, buf, sizeof(buf)) <= 0 || !s->reply) {
		usleep(1500 * 1000);
		close(c);
		return NULL;
	}
	if (!pipe(p)) {
		fd_pass_send(c, s->reply, strlen(s->reply), &p[0], 1, fd_pass_now_ms() + 1000);
		close(p[0]);
		close(p[1]);
	}
	close(c);
	return NULL;
}

static void server_start(struct server *s, const char *dir, pid_t pid, const char *reply)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	cr_assert_eq(run_dir_socket_path(dir, pid, s->path, sizeof(s->path)), 0);
	s->reply = reply;
	s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
	cr_assert_eq(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(s->lfd, 4), 0);
	pthread_create(&s->t, NULL, serve, s);
}

static void server_stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	close(s->lfd);
	pthread_join(s->t, NULL);
	unlink(s->path);
}

Test(share_wire, peer_request_reads_reply_and_descriptors, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX", why[256];
	struct server s;
	peer_reply r;

	cr_assert(mkdtemp(dir));
	server_start(&s, dir, getpid(), "vmmshim/1 ok\nend\n");
	cr_assert_eq(peer_request(dir, getpid(), "vmmshim/1 hello\n", 2000, &r, why, sizeof(why)),
		     0, "%s", why);
	cr_expect_str_eq(r.text, "vmmshim/1 ok\nend\n");
	cr_expect_eq(r.nfds, 1);
	peer_reply_free(&r);
	server_stop(&s);
	rmdir(dir);
}

Test(share_wire, peer_request_refuses_a_socket_served_by_another_process, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX", why[256];
	struct server s;
	peer_reply r;

	cr_assert(mkdtemp(dir));
	/* We listen under our parent's pid: whoever answers there is not that process. */
	server_start(&s, dir, getppid(), "vmmshim/1 ok\nend\n");
	cr_expect_eq(peer_request(dir, getppid(), "vmmshim/1 hello\n", 2000, &r, why,
				  sizeof(why)), -1);
	cr_expect(strstr(why, "not served by that process"), "%s", why);
	server_stop(&s);
	rmdir(dir);
}

Test(share_wire, peer_request_gives_up_at_its_deadline, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX", why[256];
	long long t0;
	struct server s;
	peer_reply r;

	cr_assert(mkdtemp(dir));
	server_start(&s, dir, getpid(), NULL);
	t0 = fd_pass_now_ms();
	cr_expect_eq(peer_request(dir, getpid(), "vmmshim/1 hello\n", 300, &r, why, sizeof(why)),
		     -1);
	cr_expect(strstr(why, "timed out"), "%s", why);
	cr_expect_lt(fd_pass_now_ms() - t0, 1200);
	cr_expect_eq(peer_request(dir, 1, "vmmshim/1 hello\n", 300, &r, why, sizeof(why)), -1,
		     "no socket for pid 1 here");
	server_stop(&s);
	rmdir(dir);
}

Test(share_wire, share_open_goes_to_the_same_uid_only)
{
	proto_request req = { .verb = PROTO_SHARE_OPEN, .share_id = 1, .share_base = 4096 };
	int fds[VMM_SHARE_MAX_PIECES];
	size_t n = 7;
	bool exported = true;
	proto_writer w;

	proto_writer_init(&w);
	control_share_open(&req, (unsigned)geteuid() + 1, 1234, &w, fds, &n, &exported);
	cr_expect_eq(n, 0);
	cr_expect_not(exported, "nothing was exported for a refused open");
	cr_expect(w.buf && strstr(w.buf, "error status=\"permission\""), "%s", w.buf);
	proto_writer_free(&w);
	proto_writer_init(&w);
	control_share_open(&req, 0 == geteuid() ? 1 : 0, 1234, &w, fds, &n, &exported);
	cr_expect(w.buf && strstr(w.buf, "permission"), "root is refused too: %s", w.buf);
	proto_writer_free(&w);
	proto_writer_init(&w);
	control_share_open(&req, (unsigned)geteuid(), 1234, &w, fds, &n, &exported);
	cr_expect_eq(n, 0);
	cr_expect(w.buf && strstr(w.buf, "not_ready"), "%s", w.buf);
	proto_writer_free(&w);
	/* The quick path (a kept connection's) refuses the same, answering nothing: the request
	 * then takes the usual way, which answers. */
	for (int i = 0; i < 2; i++) {
		proto_writer_init(&w);
		n = 7;
		cr_expect_not(control_share_open_now(&req, (unsigned)geteuid() + (i ? 0 : 1), 1234,
						     &w, fds, VMM_SHARE_MAX_PIECES, &n));
		cr_expect_eq(n, 0);
		cr_expect(!w.len, "nothing answered: %.*s", (int)w.len, w.buf ? w.buf : "");
		proto_writer_free(&w);
	}
}

Test(share_wire, app_open_goes_to_the_same_uid_only)
{
	proto_request req = { .verb = PROTO_APP_OPEN, .app_handle = 5 };
	int fd = 7;
	proto_writer w;

	proto_writer_init(&w);
	control_app_open(&req, (unsigned)geteuid() + 1, 1234, &w, &fd);
	cr_expect_eq(fd, -1, "no descriptor for another user");
	cr_expect(w.buf && strstr(w.buf, "error status=\"permission\""), "%s", w.buf);
	proto_writer_free(&w);
	proto_writer_init(&w);
	control_app_open(&req, (unsigned)geteuid(), 1234, &w, &fd);
	cr_expect_eq(fd, -1);
	cr_expect(w.buf && strstr(w.buf, "not_ready"), "%s", w.buf);
	proto_writer_free(&w);
}

Test(share_wire, share_open_request_wire_form)
{
	proto_request req = { .verb = PROTO_SHARE_OPEN, .device = -1, .share_id = 7,
			      .share_base = 0x7f0000200000ull }, back;
	char line[256], why[128];
	size_t len = proto_format_request(&req, line, sizeof(line));

	cr_assert_gt(len, 0);
	cr_assert_eq(proto_parse_request(line, len, &back, why, sizeof(why)), 0, "%s", why);
	cr_expect_eq(back.verb, PROTO_SHARE_OPEN);
	cr_expect_eq(back.share_id, 7);
	cr_expect_eq(back.share_base, 0x7f0000200000ull);
	strcpy(line, "vmmshim/1 share_open export=7\n");
	cr_expect_eq(proto_parse_request(line, strlen(line), &back, why, sizeof(why)), -1);
	strcpy(line, "vmmshim/1 share_open export=0 base=4096\n");
	cr_expect_eq(proto_parse_request(line, strlen(line), &back, why, sizeof(why)), -1);
	strcpy(line, "vmmshim/1 status export=1\n");
	cr_expect_eq(proto_parse_request(line, strlen(line), &back, why, sizeof(why)), -1);
	/* keep=true asks for the connection to stay open: share_open only. */
	req.keep = true;
	len = proto_format_request(&req, line, sizeof(line));
	cr_assert_gt(len, 0);
	cr_expect(strstr(line, " keep=true\n"), "%s", line);
	cr_assert_eq(proto_parse_request(line, len, &back, why, sizeof(why)), 0, "%s", why);
	cr_expect(back.keep);
	strcpy(line, "vmmshim/1 share_open export=7 base=4096\n");
	cr_assert_eq(proto_parse_request(line, strlen(line), &back, why, sizeof(why)), 0, "%s", why);
	cr_expect_not(back.keep);
	strcpy(line, "vmmshim/1 hello keep=true\n");
	cr_expect_eq(proto_parse_request(line, strlen(line), &back, why, sizeof(why)), -1);
	cr_expect(strstr(why, "'keep'"), "%s", why);
}

/* ---- kept connections (peer_kept.c) ---- */

/* A server at dir/<our pid>.sock that answers every request line on a connection with an ok reply
 * and a pipe's read end, until the client closes; how it treats a connection after a reply:
 * KEEP_OPEN keeps it, KEEP_CLOSE closes it (as a server that keeps none), KEEP_DROP_SECOND closes
 * it on its second request without answering (a kept connection given up meanwhile), KEEP_OLDER
 * answers a request with keep=true as a server older than kept connections does (an error, the
 * key refused) and closes every connection after one reply. */
enum keep_mode { KEEP_OPEN, KEEP_CLOSE, KEEP_DROP_SECOND, KEEP_OLDER };

/* What a server older than the key keep answers a request that has it (protocol.c's refusal). */
#define OLDER_REFUSAL "vmmshim/1 error\nerror status=\"invalid\" " \
		      "message=\"'share_open'%20does%20not%20take%20'keep'\"\nend\n"

struct kept_server {
	int lfd;
	enum keep_mode mode;
	int accepts, requests, serving; /* atomics: a thread per connection */
	char path[108];
	pthread_t t;
};

struct kept_conn {
	struct kept_server *s;
	int fd;
};

static void *kept_serve_conn(void *arg)
{
	struct kept_conn *k = arg;
	struct kept_server *s = k->s;
	int on_conn = 0;
	char buf[512];

	ssize_t n;

	while ((n = read(k->fd, buf, sizeof(buf) - 1)) > 0) {
		int p[2];

		buf[n] = '\0';
		__atomic_add_fetch(&s->requests, 1, __ATOMIC_SEQ_CST);
		if (++on_conn == 2 && s->mode == KEEP_DROP_SECOND)
			break;
		if (s->mode == KEEP_OLDER && strstr(buf, "keep=true")) {
			fd_pass_send(k->fd, OLDER_REFUSAL, strlen(OLDER_REFUSAL), NULL, 0,
				     fd_pass_now_ms() + 1000);
			break;
		}
		if (pipe(p))
			break;
		fd_pass_send(k->fd, "vmmshim/1 ok\nend\n", 17, &p[0], 1, fd_pass_now_ms() + 1000);
		close(p[0]);
		close(p[1]);
		if (s->mode == KEEP_CLOSE || s->mode == KEEP_OLDER)
			break;
	}
	close(k->fd);
	free(k);
	__atomic_sub_fetch(&s->serving, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *kept_serve(void *arg)
{
	struct kept_server *s = arg;
	int c;

	while ((c = accept(s->lfd, NULL, NULL)) >= 0) {
		struct kept_conn *k = malloc(sizeof(*k));
		pthread_t t;

		__atomic_add_fetch(&s->accepts, 1, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&s->serving, 1, __ATOMIC_SEQ_CST);
		*k = (struct kept_conn){ .s = s, .fd = c };
		pthread_create(&t, NULL, kept_serve_conn, k);
		pthread_detach(t);
	}
	return NULL;
}

static void kept_server_start(struct kept_server *s, const char *dir, enum keep_mode mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(s, 0, sizeof(*s));
	cr_assert_eq(run_dir_socket_path(dir, getpid(), s->path, sizeof(s->path)), 0);
	s->mode = mode;
	s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
	cr_assert_eq(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(s->lfd, 4), 0);
	pthread_create(&s->t, NULL, kept_serve, s);
}

static void kept_server_stop(struct kept_server *s)
{
	peer_kept_close_all(); /* the server's connection threads end at our close */
	shutdown(s->lfd, SHUT_RDWR);
	close(s->lfd);
	pthread_join(s->t, NULL);
	for (int i = 0; i < 200 && __atomic_load_n(&s->serving, __ATOMIC_SEQ_CST); i++)
		usleep(10000);
	unlink(s->path);
}

static bool always(pid_t pid, uint64_t token)
{
	(void)pid;
	(void)token;
	return true;
}

static bool never(pid_t pid, uint64_t token)
{
	(void)pid;
	(void)token;
	return false;
}

/* One request to our own server as peer (getpid(), token): 0 or the error; *reused. */
static int ask_kept(const char *dir, uint64_t token, peer_check_fn check, bool *reused)
{
	char why[256];
	peer_reply r;
	int rc = peer_request_kept(dir, getpid(), token, check, "vmmshim/1 hello\n", 2000, &r,
				   reused, why, sizeof(why));

	if (!rc) {
		cr_expect_str_eq(r.text, "vmmshim/1 ok\nend\n");
		cr_expect_eq(r.nfds, 1, "the descriptor came with the reply");
		peer_reply_free(&r);
	}
	return rc;
}

Test(share_wire, a_kept_connection_serves_the_next_request, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX";
	struct kept_server s;
	bool reused = true;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_OPEN);
	cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
	cr_expect_not(reused, "the first request connects");
	cr_expect_eq(peer_kept_count(), 1);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
		cr_expect(reused, "request %d did not use the kept connection", i + 2);
	}
	/* Another token is another process that had the pid: a connection of its own. */
	cr_assert_eq(ask_kept(dir, 8, always, &reused), 0);
	cr_expect_not(reused);
	kept_server_stop(&s);
	cr_expect_eq(s.accepts, 2);
	cr_expect_eq(s.requests, 5);
	rmdir(dir);
}

Test(share_wire, a_connection_the_server_closed_is_replaced, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX";
	struct kept_server s;
	bool reused = true;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_CLOSE);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(ask_kept(dir, 7, always, &reused), 0, "request %d", i + 1);
		cr_expect_not(reused, "request %d went over a closed connection", i + 1);
	}
	kept_server_stop(&s);
	cr_expect_eq(s.accepts, 3);
	cr_expect_eq(s.requests, 3);
	rmdir(dir);
}

Test(share_wire, a_kept_connection_closed_before_the_reply_is_retried_once, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX";
	struct kept_server s;
	bool reused = true;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_DROP_SECOND);
	cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
	/* The server drops the kept connection on this request: a new one answers it. */
	cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
	cr_expect_not(reused);
	kept_server_stop(&s);
	cr_expect_eq(s.accepts, 2);
	cr_expect_eq(s.requests, 3);
	rmdir(dir);
}

/* An exporter older than kept connections refuses the key keep: the request is asked again
 * without it, over a new connection, and answered; nothing is kept of it. A server that knows
 * the key is asked once. */
Test(share_wire, an_exporter_older_than_kept_connections_is_asked_the_old_way, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX", why[256];
	struct kept_server s;
	bool reused = true;
	peer_reply r;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_OLDER);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(peer_request_kept_or_plain(dir, getpid(), 7, always,
							"vmmshim/1 hello keep=true\n",
							"vmmshim/1 hello\n", 2000, &r, &reused, why,
							sizeof(why)), 0, "request %d: %s", i + 1, why);
		cr_expect_str_eq(r.text, "vmmshim/1 ok\nend\n", "request %d", i + 1);
		cr_expect_eq(r.nfds, 1, "the descriptor came with the old way's reply");
		cr_expect_not(reused);
		peer_reply_free(&r);
	}
	kept_server_stop(&s);
	cr_expect_eq(s.requests, 4, "each asked twice: with keep, then without");
	cr_expect_eq(s.accepts, 4);
	/* A server that keeps connections: asked once, over the kept one the second time. */
	kept_server_start(&s, dir, KEEP_OPEN);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(peer_request_kept_or_plain(dir, getpid(), 7, always,
							"vmmshim/1 hello keep=true\n",
							"vmmshim/1 hello\n", 2000, &r, &reused, why,
							sizeof(why)), 0, "%s", why);
		cr_expect_eq(reused, i == 1);
		peer_reply_free(&r);
	}
	kept_server_stop(&s);
	cr_expect_eq(s.requests, 2);
	rmdir(dir);
}

Test(share_wire, a_new_connection_the_check_refuses_sends_nothing, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX";
	struct kept_server s;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_OPEN);
	cr_expect_eq(ask_kept(dir, 7, never, NULL), PEER_KEPT_REFUSED);
	cr_expect_eq(peer_kept_count(), 0);
	/* No server at all: an error, not a refusal. */
	cr_expect_eq(peer_request_kept(dir, 1, 7, always, "vmmshim/1 hello\n", 300,
				       &(peer_reply){ 0 }, NULL, (char[64]){ 0 }, 64), -1);
	kept_server_stop(&s);
	cr_expect_eq(s.requests, 0);
	rmdir(dir);
}

Test(share_wire, a_forked_child_does_not_use_the_parents_connections, .timeout = 20)
{
	char dir[] = "/tmp/sharewire-XXXXXX";
	struct kept_server s;
	bool reused = false;
	pid_t child;
	int st;

	cr_assert(mkdtemp(dir));
	kept_server_start(&s, dir, KEEP_OPEN);
	cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
	cr_assert_eq(peer_kept_count(), 1);
	child = fork();
	cr_assert_geq(child, 0);
	if (!child)
		_exit(peer_kept_count());
	cr_assert_eq(waitpid(child, &st, 0), child);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child holds %d connections",
		  WEXITSTATUS(st));
	/* The parent's is still good. */
	cr_assert_eq(ask_kept(dir, 7, always, &reused), 0);
	cr_expect(reused);
	kept_server_stop(&s);
	rmdir(dir);
}
