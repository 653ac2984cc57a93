/* The control socket under abuse, and vmmctl's errors: malformed, oversized, truncated and slow
 * requests get an error reply and leave the process serving; many slow clients delay nobody and
 * beyond the limit get a quick "busy"; a client of another uid is refused; vmmctl on a pid that
 * does not exist, is not shimmed or whose folder is refused says so with the documented exit
 * code; stale sockets are cleaned up. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(protocol, .fini = harness_cleanup);
TestSuite(vmmctl, .fini = harness_cleanup);
TestSuite(socket, .fini = harness_cleanup);
TestSuite(api, .fini = harness_cleanup);

static struct ctl_out o;
static char reply[1 << 16];

/* The process still answers a well-formed request. */
static void still_serving(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "the server stopped answering: %d %s", o.code, o.err);
	cr_expect_eq(json_num(o.out, "\"info\"", "pid"), t->pid);
}

static void expect_error(const char *what, const char *word)
{
	cr_expect(!strncmp(reply, "vmmshim/1 error\n", 16), "%s: reply '%s'", what, reply);
	cr_expect(strstr(reply, word), "%s: reply '%s' lacks '%s'", what, reply, word);
	cr_expect(strstr(reply, "\nend\n"), "%s: reply not terminated", what);
}

Test(protocol, well_formed_requests_are_answered, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400];
	const char *req = "vmmshim/1 hello\n";

	target_socket(t, sock, sizeof(sock));
	cr_assert_gt(raw_request(sock, req, strlen(req), false, 0, reply, sizeof(reply), 5000), 0);
	cr_expect(!strncmp(reply, "vmmshim/1 ok\ninfo pid=", 22), "%s", reply);
	stop_cleanly(t);
}

Test(protocol, malformed_requests_get_an_error_and_change_nothing, .timeout = 60)
{
	static const char *const bad[] = {
		"hello\n",
		"vmmshim/2 hello\n",
		"vmmshim/1 explode\n",
		"vmmshim/1 sleep tag=unquoted\n",
		"vmmshim/1 sleep device=99\n",
		"vmmshim/1 sleep discard=maybe\n",
		"vmmshim/1 sleep tag=\"a\" tag=\"b\"\n",
		"vmmshim/1 wake discard=true\n",
		"vmmshim/1 sleep  device=0\n",
		"vmmshim/1 sleep tag=\"%zz\"\n",
		"vmmshim/1 sleep\n\n",
		"\n",
		"vmmshim/1 sleep\0 device=0\n",
	};
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400], s[32];

	target_socket(t, sock, sizeof(sock));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len = i == 12 ? 26 : strlen(bad[i]);

		cr_assert_gt(raw_request(sock, bad[i], len, false, 0, reply, sizeof(reply), 5000),
			     0, "no reply to bad request %zu", i);
		expect_error(bad[i], "status=\"malformed\"");
	}
	/* None of them put anything to sleep. */
	still_serving(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"));
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0);
	stop_cleanly(t);
}

Test(protocol, oversized_requests_are_refused, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	static char big[20000];
	char sock[400];

	target_socket(t, sock, sizeof(sock));
	memset(big, 'a', sizeof(big));
	memcpy(big, "vmmshim/1 status ", 17);
	big[sizeof(big) - 1] = '\n';
	cr_assert_gt(raw_request(sock, big, sizeof(big), false, 0, reply, sizeof(reply), 5000), 0);
	expect_error("oversized", "longer%20than%204096");
	still_serving(t);
	stop_cleanly(t);
}

Test(protocol, truncated_requests_are_refused, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	const char *part = "vmmshim/1 sle";
	char sock[400];

	target_socket(t, sock, sizeof(sock));
	cr_assert_gt(raw_request(sock, part, strlen(part), true, 0, reply, sizeof(reply), 5000),
		     0);
	expect_error("truncated", "cut%20short");
	/* A client that vanishes mid-request gets nothing and costs nothing. */
	cr_expect_eq(raw_request(sock, part, strlen(part), false, 0, reply, sizeof(reply), 1), 0);
	still_serving(t);
	stop_cleanly(t);
}

Test(protocol, a_slow_client_cannot_hold_the_process, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400], line[64], buf[256];
	int slow;

	target_socket(t, sock, sizeof(sock));
	/* A client that sends half a request and then says nothing... */
	slow = raw_stall(sock, "vmmshim/1 sta");
	cr_assert_geq(slow, 0);
	/* ...delays nobody, and the program keeps working. */
	vmmctl_run(&o, t->run_dir, -1, "--timeout 5 status %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "status behind a slow client: %d %s", o.code, o.err);
	cr_expect_lt(o.seconds, 1.0 * ctl_slow());
	cr_expect_eq(target_cmd(t, "check", line, sizeof(line), 5000), 0);
	/* The slow client is told why it was dropped, after the read deadline (2 s). */
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ssize_t n = read(slow, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	cr_expect(strstr(buf, "not%20complete%20within"), "%s", buf);
	close(slow);
	still_serving(t);
	stop_cleanly(t);
}

/* Issue 8, item 7: forty half-sent requests delayed a status by 50 s. */
Test(protocol, forty_half_sent_requests_delay_nobody, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400];
	int slow[40];

	target_socket(t, sock, sizeof(sock));
	for (int i = 0; i < 40; i++) {
		slow[i] = raw_stall(sock, "vmmshim/1 sleep dev");
		cr_assert_geq(slow[i], 0);
	}
	vmmctl_run(&o, t->run_dir, -1, "--timeout 5 --json status %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%d %s", o.code, o.out);
	cr_expect_lt(o.seconds, 1.0 * ctl_slow(), "status took %.2f s", o.seconds);
	for (int i = 0; i < 40; i++)
		close(slow[i]);
	stop_cleanly(t);
}

/* Beyond 64 connections at once, a client gets a quick "busy", not a wait. */
Test(protocol, beyond_the_client_limit_a_quick_busy, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400];
	int slow[70], n = 0;

	target_socket(t, sock, sizeof(sock));
	for (; n < 70; n++) {
		slow[n] = raw_stall(sock, "vmmshim/1 st");
		if (slow[n] < 0)
			break;
	}
	cr_assert_geq(n, 64);
	usleep((useconds_t)(200000 * ctl_slow())); /* all accepted */
	double t0 = now_s();
	const char *req = "vmmshim/1 hello\n";
	cr_expect_gt(raw_request(sock, req, strlen(req), false, 0, reply, sizeof(reply), 5000), 0);
	cr_expect_lt(now_s() - t0, 1.0 * ctl_slow());
	expect_error("over the limit", "status=\"busy\"");
	cr_expect(strstr(reply, "clients%20are%20connected%20already"), "%s", reply);
	for (int i = 0; i < n; i++)
		close(slow[i]);
	/* Once they are gone, it serves again: a "busy" only until the server has seen them go
	 * (bounded, as a loaded machine may take longer than a fixed pause). */
	for (double end = now_s() + 10 * ctl_slow(); now_s() < end; usleep(20000)) {
		if (raw_request(sock, req, strlen(req), false, 0, reply, sizeof(reply), 5000) > 0 &&
		    !strstr(reply, "status=\"busy\""))
			break;
	}
	still_serving(t);
	stop_cleanly(t);
}

/* Threads of pid named name (/proc/PID/task/N/comm). */
static int threads_named(pid_t pid, const char *name)
{
	char path[320], comm[64];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	cr_assert(d, "cannot list %s", path);
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, name, strlen(name)))
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* Requests one after another are answered by a thread that waits for the next one, not by a
 * new thread each (creating one cost more than the request in a large program). */
Test(protocol, a_stream_of_requests_reuses_answering_threads, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	const char *req = "vmmshim/1 hello\n";
	char sock[400];

	target_socket(t, sock, sizeof(sock));
	for (int i = 0; i < 30; i++) {
		cr_assert_gt(raw_request(sock, req, strlen(req), true, 0, reply, sizeof(reply),
					 5000), 0);
		cr_expect(!strncmp(reply, "vmmshim/1 ok\n", 13), "%s", reply);
	}
	/* A request may come while the last one's thread is still closing its connection: a
	 * few threads, never one per request. */
	int n = threads_named(t->pid, "vmmshim-ans");
	cr_expect(n >= 1 && n <= 8, "%d answering threads after 30 requests", n);
	stop_cleanly(t);
}

/* Send req on fd and read one reply, up to its "end" line, into reply: its length, or -1 (the
 * server closed the connection first, or no whole reply within 5 s). */
static ssize_t ask_on(int fd, const char *req)
{
	double deadline = now_s() + 5 * ctl_slow();
	size_t n = 0;

	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
		return -1;
	while (n + 1 < sizeof(reply)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&p, 1, (int)((deadline - now_s()) * 1000) + 1) <= 0)
			return -1;
		k = read(fd, reply + n, sizeof(reply) - 1 - n);
		if (k <= 0)
			return -1;
		n += (size_t)k;
		reply[n] = '\0';
		if (n >= 5 && !strcmp(reply + n - 5, "\nend\n"))
			return (ssize_t)n;
	}
	return -1;
}

/* Has the server closed fd (readable at once, with nothing to read)? */
static bool closed_by_server(int fd, int wait_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, wait_ms) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

#define OPEN_KEEP(id) "vmmshim/1 share_open export=" #id " base=4096 keep=true\n"

/* A legacy IPC importer asks with keep=true: the connection stays open for its next request,
 * which skips connecting. A request without it is answered and closed as always. */
Test(protocol, share_open_keep_serves_the_next_request_on_the_connection, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char sock[400];
	int fd;

	target_socket(t, sock, sizeof(sock));
	fd = raw_stall(sock, "");
	cr_assert_geq(fd, 0);
	/* No such export here: an error reply, and the connection stays. */
	cr_assert_gt(ask_on(fd, OPEN_KEEP(1)), 0, "no reply to the first request");
	expect_error("first open", "status=\"invalid\"");
	cr_expect_not(closed_by_server(fd, 200), "the connection was not kept");
	cr_assert_gt(ask_on(fd, OPEN_KEEP(2)), 0, "no reply on the kept connection");
	expect_error("second open", "status=\"invalid\"");
	/* Any request may come on it; without keep it is the last. */
	cr_assert_gt(ask_on(fd, "vmmshim/1 hello\n"), 0, "no reply to hello");
	cr_expect(!strncmp(reply, "vmmshim/1 ok\ninfo pid=", 22), "%s", reply);
	cr_expect(closed_by_server(fd, 2000), "the connection stayed open after hello");
	close(fd);
	/* Only share_open takes keep. */
	cr_assert_gt(raw_request(sock, "vmmshim/1 status keep=true\n", 27, true, 0, reply,
				 sizeof(reply), 5000), 0);
	expect_error("keep on status", "malformed");
	stop_cleanly(t);
}

/* Kept connections are bounded and give way: many importers' idle connections never keep
 * vmmctl (or a new importer) out. */
Test(protocol, kept_connections_never_crowd_out_new_clients, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	int fds[80], open_now = 0;
	char sock[400];

	target_socket(t, sock, sizeof(sock));
	for (int i = 0; i < 80; i++) {
		fds[i] = raw_stall(sock, "");
		cr_assert_geq(fds[i], 0, "connection %d", i);
		cr_assert_gt(ask_on(fds[i], OPEN_KEEP(1)), 0, "connection %d not answered", i);
	}
	/* Until the reading thread has given up the excess (connections only ever close here, so
	 * the count only falls): a fixed pause could end first on a loaded machine. */
	for (double end = now_s() + 10 * ctl_slow(); now_s() < end; usleep(20000)) {
		open_now = 0;
		for (int i = 0; i < 80; i++)
			open_now += !closed_by_server(fds[i], 0);
		if (open_now <= 32)
			break;
	}
	cr_expect_leq(open_now, 32, "%d kept connections open", open_now);
	cr_expect_gt(open_now, 0, "none was kept");
	still_serving(t);
	/* One that was given up: its next request gets no reply, and a new connection does. */
	cr_expect_eq(ask_on(fds[0], OPEN_KEEP(1)), -1);
	for (int i = 0; i < 80; i++)
		close(fds[i]);
	stop_cleanly(t);
}

Test(protocol, another_uid_is_refused, .timeout = 60)
{
	const char *env[] = { "VMMSHIM_LOG=warn", NULL };
	struct target *t;
	char sock[400], log[8192];
	pid_t child;
	int st;

	if (geteuid() != 0)
		cr_skip_test("needs root to run a client as another uid (nobody)");
	t = start_holding(env, 2, 1000000);
	target_socket(t, sock, sizeof(sock));
	/* vmmctl itself refuses before connecting. */
	vmmctl_run(&o, t->run_dir, 65534, "status %d", (int)t->pid);
	cr_expect_eq(o.code, 4, "vmmctl as nobody: exit %d (%s)", o.code, o.err);
	cr_expect(strstr(o.err, "uid"), "%s", o.err);

	/* A raw client that can reach the socket is refused by the server (SO_PEERCRED). */
	chmod(t->run_dir, 0711);
	chmod(sock, 0666);
	child = fork();
	if (child == 0) {
		static char r[4096];
		const char *req = "vmmshim/1 sleep\n";

		if (setgid(65534) || setuid(65534))
			_exit(2);
		raw_request(sock, req, strlen(req), false, 0, r, sizeof(r), 5000);
		_exit(strstr(r, "status=\"permission\"") ? 0 : 1);
	}
	waitpid(child, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the server did not refuse uid 65534");
	chmod(t->run_dir, 0700);
	target_log(t, log, sizeof(log));
	cr_expect(strstr(log, "refused a client of uid 65534"), "no log line: %s", log);
	/* Nothing was put to sleep. */
	still_serving(t);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0);
	stop_cleanly(t);
}

Test(vmmctl, a_pid_that_does_not_exist, .timeout = 30)
{
	pid_t gone = fork();

	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	vmmctl_run(&o, NULL, -1, "status %d", (int)gone);
	cr_expect_eq(o.code, 3, "%d %s", o.code, o.err);
	cr_expect(strstr(o.err, "no process"), "%s", o.err);
	vmmctl_run(&o, NULL, -1, "--json sleep %d", (int)gone);
	cr_expect_eq(o.code, 3);
	cr_expect_eq(json_num(o.out, "\"error\"", "exit_code"), 3, "%s", o.out);
}

Test(vmmctl, a_process_not_under_the_shim, .timeout = 30)
{
	pid_t plain = fork();

	if (plain == 0) {
		execlp("sleep", "sleep", "10", (char *)NULL);
		_exit(127);
	}
	usleep(100000);
	vmmctl_run(&o, "/tmp", -1, "wake %d", (int)plain);
	cr_expect_eq(o.code, 3, "%d %s", o.code, o.err);
	cr_expect(strstr(o.err, "not running under vmmshim"), "%s", o.err);
	kill(plain, SIGKILL);
	waitpid(plain, NULL, 0);
}

Test(vmmctl, usage_errors_exit_2, .timeout = 30)
{
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "frobnicate"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "sleep"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "sleep notapid"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "wake 12 --discard"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "status 12 --device 99"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "status 12 --bogus"), 2);
	cr_expect_eq(vmmctl_run(&o, NULL, -1, "--help"), 0);
	cr_expect(strstr(o.out, "exit codes"), "%s", o.out);
}

Test(vmmctl, list_shows_the_process, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	char pat[64];

	vmmctl_run(&o, t->run_dir, -1, "list");
	cr_expect_eq(o.code, 0);
	snprintf(pat, sizeof(pat), "%d ", (int)t->pid);
	cr_expect(strstr(o.out, pat) && strstr(o.out, "ctl_target"), "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "--json list");
	cr_expect_eq(o.code, 0);
	/* (root's list shows every user's processes: look for ours.) */
	snprintf(pat, sizeof(pat), "{\"pid\": %d, \"command\": \"ctl_target\"", (int)t->pid);
	cr_expect(strstr(o.out, pat), "%s", o.out);
	stop_cleanly(t);
}

Test(vmmctl, a_killed_process_leaves_no_answering_socket, .timeout = 60)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	pid_t pid = t->pid;
	char pat[32];

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t->pid = -1;
	vmmctl_run(&o, t->run_dir, -1, "list");
	cr_expect_eq(o.code, 0);
	snprintf(pat, sizeof(pat), "\n%d ", (int)pid);
	cr_expect(!strstr(o.out, pat), "a dead process is listed: %s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)pid);
	cr_expect_eq(o.code, 3, "%d %s", o.code, o.err);
	target_free(t);
}

Test(socket, none_before_the_first_device_allocation, .timeout = 30)
{
	struct target *t = target_start(NULL);
	char sock[400], line[64];
	struct stat st;

	cr_assert(t);
	target_socket(t, sock, sizeof(sock));
	cr_expect(stat(sock, &st) != 0, "a socket before any device allocation");
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)t->pid);
	cr_expect_eq(o.code, 3, "%d %s", o.code, o.err);
	cr_expect(strstr(o.err, "not allocated device memory yet"), "%s", o.err);
	cr_assert_eq(target_cmd(t, "alloc 1 1000", line, sizeof(line), 10000), 0);
	cr_expect(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode), "no socket after allocating");
	cr_expect_eq(st.st_mode & 077, 0, "socket mode %o", st.st_mode & 0777);
	stop_cleanly(t);
}

Test(socket, a_stale_socket_is_replaced, .timeout = 30)
{
	struct target *t = target_start(NULL);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char line[64];
	int fd;

	cr_assert(t);
	/* What a dead process with the same pid would have left. */
	target_socket(t, sa.sun_path, sizeof(sa.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	cr_assert_eq(target_cmd(t, "alloc 1 1000", line, sizeof(line), 10000), 0);
	still_serving(t);
	stop_cleanly(t);
}

Test(socket, a_folder_others_can_enter_is_refused, .timeout = 30)
{
	char dir[] = "/tmp/vmmshim-loose-XXXXXX", env0[128], log[8192], line[64];
	struct target *t;

	cr_assert(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(env0, sizeof(env0), "VMMSHIM_RUN_DIR=%s", dir);
	const char *env[] = { env0, NULL };
	t = target_start(env);
	cr_assert(t);
	/* The program works on without a control socket... */
	cr_assert_eq(target_cmd(t, "alloc 2 1000", line, sizeof(line), 10000), 0);
	cr_expect_str_eq(line, "ok");
	cr_assert_eq(target_cmd(t, "check", line, sizeof(line), 10000), 0);
	cr_expect_str_eq(line, "ok 2");
	/* ...says why... */
	target_log(t, log, sizeof(log));
	cr_expect(strstr(log, "mode 755"), "%s", log);
	/* ...and vmmctl says the folder was refused, and why. */
	vmmctl_run(&o, dir, -1, "--json status %d", (int)t->pid);
	cr_expect_eq(o.code, 3, "%d %s %s", o.code, o.out, o.err);
	cr_expect(strstr(o.out, "refused_folder") && strstr(o.out, "mode 755"), "%s", o.out);
	stop_cleanly(t);
	rmdir(dir);
}

/* The in-process API from Python with ctypes, as docs/vmmctl.md shows it. */
Test(api, usable_from_python_ctypes, .timeout = 60)
{
	static const char script[] =
		"import ctypes, sys\n"
		"shim = ctypes.CDLL(None)\n"
		"shim.vmmshim_last_error.restype = ctypes.c_char_p\n"
		"shim.vmmshim_get_tag.restype = ctypes.c_char_p\n"
		"assert shim.vmmshim_get_tag() == b'default'\n"
		"assert shim.vmmshim_set_tag(b'kv_cache') == 0\n"
		"assert shim.vmmshim_get_tag() == b'kv_cache'\n"
		"assert shim.vmmshim_set_tag(b'x' * 40) == 1\n"
		"assert b'31' in shim.vmmshim_last_error()\n"
		"assert shim.vmmshim_get_tag() == b'kv_cache'\n"
		"assert shim.vmmshim_set_tag(None) == 0\n"
		"assert shim.vmmshim_get_tag() == b'default'\n"
		"rc = shim.vmmshim_sleep(b'kv_cache', 1)\n"
		"assert rc == 1, rc\n"
		"assert b'no device memory' in shim.vmmshim_last_error()\n"
		"st = (ctypes.c_uint64 * 10)()\n"
		"assert shim.vmmshim_stats(None, -1, st) == 0 and st[0] == 0\n"
		"print('api ok')\n";
	char cmd[2048], out[256] = "";
	FILE *p;

	if (system("command -v python3 >/dev/null 2>&1"))
		cr_skip_test("python3 is not installed");
	snprintf(cmd, sizeof(cmd), "LD_PRELOAD='%s' python3 -c \"$CTL_SCRIPT\" 2>&1",
		 getenv("CTL_SHIM"));
	setenv("CTL_SCRIPT", script, 1);
	p = popen(cmd, "r");
	cr_assert(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	cr_expect_eq(pclose(p), 0, "python failed: %s", out);
	cr_expect(strstr(out, "api ok"), "%s", out);
}

/* root's list looks in every user's folder, /tmp/vmmshim-UID: another file whose name starts so
 * (a test's stats file) is not a folder of the shim's and is passed over without a word. */
Test(vmmctl, list_as_root_passes_over_files_named_like_run_folders, .timeout = 30)
{
	struct target *t;
	char path[128];
	FILE *f;

	if (geteuid() != 0)
		cr_skip_test("only root's list looks in every user's folders");
	t = start_holding(NULL, 2, 1000000);
	snprintf(path, sizeof(path), "/tmp/vmmshim-listtest-%d.stats", (int)getpid());
	f = fopen(path, "w");
	cr_assert(f);
	fclose(f);
	vmmctl_run(&o, t->run_dir, -1, "list");
	unlink(path);
	cr_expect_eq(o.code, 0);
	cr_expect(!strstr(o.err, "vmmshim-listtest"), "%s", o.err);
	cr_expect(strstr(o.out, "ctl_target"), "%s", o.out);
	stop_cleanly(t);
}

/* Issue 8, item 8: a socket left by a process that has ended is removed by list. */
Test(vmmctl, list_removes_stale_sockets, .timeout = 30)
{
	struct target *t = start_holding(NULL, 2, 1000000);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	pid_t gone = fork();
	/* Not a /tmp/vmmshim-* folder: a `vmmctl list` run as root by a test beside this one
	 * scans those and would clean the socket up first. */
	char dir[] = "/tmp/vmmctl-stale-XXXXXX";
	char path[400];
	struct stat st;
	int fd;

	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_lt((size_t)snprintf(path, sizeof(path), "%s/%d.sock", dir, (int)gone),
		     sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	vmmctl_run(&o, dir, -1, "list");
	cr_expect_eq(o.code, 0);
	cr_expect(stat(sa.sun_path, &st) != 0, "the stale socket is still there");
	cr_expect(strstr(o.err, "left by process"), "%s", o.err);
	unlink(sa.sun_path);
	rmdir(dir);
	still_serving(t);
	stop_cleanly(t);
}
