/* What vmmctl trusts, against fake servers (harness: fake_start): one that never answers, one
 * whose queue is full, one that sends 2 MiB or a flood of records, one that sends terminal
 * escapes, one that claims another process's pid, and (as root) servers of another user: in a
 * folder that is not theirs, or posing as a root process. vmmctl gives up within --timeout,
 * keeps its memory bounded, prints nothing raw, and believes none of the impostors; list stays
 * quick with them around. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

TestSuite(trust, .fini = harness_cleanup);

static struct ctl_out o;
static struct fake fk;

/* A private folder for fake sockets (mode 0700, ours). */
static void make_dir(char *dir)
{
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(const char *dir)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
}

#define INFO(cmd) "vmmshim/1 ok\ninfo pid=@PID@ command=\"" cmd "\" version=\"0.1.0\" " \
	"protocol=1 devices=\"0\" managed=1 resident=1 asleep=0 state=\"awake\" held=false " \
	"autowake=false passthrough_allocs=0 passthrough_bytes=0\nend\n"

Test(trust, a_server_that_never_answers_costs_the_timeout, .timeout = 30)
{
	char dir[] = "/tmp/ctltrust-XXXXXX";

	make_dir(dir);
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_SILENT, NULL, 0), 0);
	vmmctl_run(&o, dir, -1, "--timeout 1 status %ld", fk.name_pid);
	cr_expect_eq(o.code, 5, "%d %s", o.code, o.err);
	cr_expect(o.seconds < 2.5 * ctl_slow(), "took %.2f s", o.seconds);
	fake_stop(&fk);
	remove_dir(dir);
}

Test(trust, a_full_queue_cannot_hang_connect, .timeout = 30)
{
	char dir[] = "/tmp/ctltrust-XXXXXX";

	make_dir(dir);
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_FULL, NULL, 0), 0);
	vmmctl_run(&o, dir, -1, "--timeout 1 --json status %ld", fk.name_pid);
	cr_expect_eq(o.code, 5, "%d %s", o.code, o.out);
	cr_expect(strstr(o.out, "queue is full"), "%s", o.out);
	cr_expect(o.seconds < 2.5 * ctl_slow(), "took %.2f s", o.seconds);
	/* Without --timeout, connecting still gives up (after 10 s). */
	fake_stop(&fk);
	remove_dir(dir);
}

/* A reply is bounded: 2 MiB is refused before it is all read, and a flood of small records or
 * of wide ones is refused before it takes more than a few tens of MiB. */
Test(trust, big_replies_are_refused_with_bounded_memory, .timeout = 60)
{
	static const char *const kinds[] = { "bytes", "records", "wide" };
	char dir[] = "/tmp/ctltrust-XXXXXX";
	size_t cap = 3u << 20;
	char *big = malloc(cap);

	cr_assert(big);
	make_dir(dir);
	for (int k = 0; k < 3; k++) {
		size_t n = (size_t)snprintf(big, cap, "vmmshim/1 ok\n");

		if (k == 0) {
			while (n < (2u << 20))
				n += (size_t)snprintf(big + n, cap - n, "x a=1\n");
		} else if (k == 1) {
			while (n < (1u << 20) - 100)
				n += (size_t)snprintf(big + n, cap - n, "x\n");
		} else {
			while (n < (1u << 20) - 400) {
				n += (size_t)snprintf(big + n, cap - n, "x");
				for (int f = 0; f < 32; f++)
					n += (size_t)snprintf(big + n, cap - n, " k%d=1", f);
				n += (size_t)snprintf(big + n, cap - n, "\n");
			}
		}
		n += (size_t)snprintf(big + n, cap - n, "end\n");
		cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_REPLY, big, n), 0);
		vmmctl_run(&o, dir, -1, "--timeout 10 status %ld", fk.name_pid);
		cr_expect_eq(o.code, 1, "%s: %d %s", kinds[k], o.code, o.err);
		cr_expect(strstr(o.err, "refused"), "%s: %s", kinds[k], o.err);
		cr_expect_lt(o.maxrss_kb, 100 * 1024 * ctl_slow(), "%s: vmmctl grew to %ld KiB",
			     kinds[k], o.maxrss_kb);
		fake_stop(&fk);
	}
	free(big);
	remove_dir(dir);
}

Test(trust, escapes_in_a_reply_are_never_printed_raw, .timeout = 30)
{
	static const char reply[] =
		"vmmshim/1 ok\ninfo pid=@PID@ command=\"evil%1B[31mred%07%1B]0;title%07\" "
		"version=\"0.1.0%0D\" protocol=1 devices=\"0%1B[2J\" managed=1 resident=1 asleep=0 "
		"state=\"awake%08%08\" held=false autowake=false passthrough_allocs=0 "
		"passthrough_bytes=0\ntag backend=\"cuda\" dev=0 name=\"t%1Bx\" live=1 count=1 "
		"mapped=1 cached=0 asleep=0 host_backup=0\nend\n";
	static const char err[] =
		"vmmshim/1 error\nerror status=\"invalid\" message=\"no%1B[31m%0Aforged\"\nend\n";
	char dir[] = "/tmp/ctltrust-XXXXXX";

	make_dir(dir);
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_REPLY, reply, sizeof(reply) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 status %ld", fk.name_pid);
	cr_expect_eq(o.code, 0, "%s", o.err);
	cr_expect(!strpbrk(o.out, "\x1b\x07\x08\r"), "a control byte was printed: %s", o.out);
	cr_expect(strstr(o.out, "evil\\x1b[31mred\\x07"), "%s", o.out);
	vmmctl_run(&o, dir, -1, "--timeout 5 list");
	cr_expect(!strpbrk(o.out, "\x1b\x07\x08\r") && !strpbrk(o.err, "\x1b\x07\x08\r"),
		  "a control byte was printed: %s %s", o.out, o.err);
	cr_expect(strstr(o.out, "evil\\x1b"), "%s", o.out);
	vmmctl_run(&o, dir, -1, "--timeout 5 --json status %ld", fk.name_pid);
	cr_expect(!strpbrk(o.out, "\x1b\x07\x08\r"), "%s", o.out);
	cr_expect(strstr(o.out, "evil\\u001b[31mred\\u0007"), "%s", o.out);
	fake_stop(&fk);
	/* Error messages too. */
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_REPLY, err, sizeof(err) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 sleep %ld", fk.name_pid);
	cr_expect_eq(o.code, 1);
	cr_expect(!strpbrk(o.err, "\x1b") && !strstr(o.err, "\nforged"), "%s", o.err);
	fake_stop(&fk);
	remove_dir(dir);
}

/* A server answering on a socket named for another process (here: ours) is refused before a
 * request is sent; so is one that says it is another pid. */
Test(trust, a_server_posing_as_another_pid_is_refused, .timeout = 30)
{
	char dir[] = "/tmp/ctltrust-XXXXXX", pat[32];

	make_dir(dir);
	cr_assert_eq(fake_start(&fk, dir, (long)getpid(), -1, FAKE_REPLY, INFO("fake"),
				sizeof(INFO("fake")) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 status %d", (int)getpid());
	cr_expect_eq(o.code, 4, "%d %s %s", o.code, o.out, o.err);
	cr_expect(strstr(o.err, "not pid"), "%s", o.err);
	vmmctl_run(&o, dir, -1, "--timeout 5 list");
	snprintf(pat, sizeof(pat), "\n%d ", (int)getpid());
	cr_expect(!strstr(o.out, pat) && !strstr(o.out, "fake"), "the impostor is listed: %s",
		  o.out);
	fake_stop(&fk);
	/* Named right, but claiming pid 31337 in its reply. */
	static const char liar[] = "vmmshim/1 ok\ninfo pid=31337 command=\"fake\" state=\"awake\""
				   "\nend\n";
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_REPLY, liar, sizeof(liar) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 status %ld", fk.name_pid);
	cr_expect_eq(o.code, 4, "%d %s", o.code, o.err);
	cr_expect(strstr(o.err, "31337"), "%s", o.err);
	vmmctl_run(&o, dir, -1, "--timeout 5 list");
	cr_expect(!strstr(o.out, "31337"), "the forged row is listed: %s", o.out);
	fake_stop(&fk);
	remove_dir(dir);
}

/* Root walks every user's folder. A server of another user (nobody) in a folder it does not own,
 * or in its own folder posing as a root process, is not believed. */
Test(trust, root_is_not_fooled_by_another_users_server, .timeout = 30)
{
	char dir[] = "/tmp/vmmshim-ctltrust-XXXXXX", pat[32];

	if (geteuid() != 0)
		cr_skip_test("needs root to run a server as another uid (the unit tests of "
			     "trust_decide cover the rule)");
	make_dir(dir);
	/* Our folder, nobody's server with its own pid. */
	cr_assert_eq(fake_start(&fk, dir, 0, 65534, FAKE_REPLY, INFO("nobody"),
				sizeof(INFO("nobody")) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 status %ld", fk.name_pid);
	cr_expect_eq(o.code, 4, "%d %s", o.code, o.err);
	cr_expect(strstr(o.err, "runs as uid 65534"), "%s", o.err);
	vmmctl_run(&o, NULL, -1, "--timeout 5 list");
	snprintf(pat, sizeof(pat), "\n%ld ", fk.name_pid);
	cr_expect(!strstr(o.out, pat), "listed: %s", o.out);
	fake_stop(&fk);
	/* nobody's folder, nobody's server, named for a root process (us). */
	cr_assert_eq(chown(dir, 65534, 65534), 0);
	cr_assert_eq(fake_start(&fk, dir, (long)getpid(), 65534, FAKE_REPLY, INFO("nobody"),
				sizeof(INFO("nobody")) - 1), 0);
	vmmctl_run(&o, NULL, -1, "--timeout 5 list");
	snprintf(pat, sizeof(pat), "\n%d ", (int)getpid());
	cr_expect(!strstr(o.out, pat) && !strstr(o.out, "nobody"), "listed: %s", o.out);
	cr_expect(strstr(o.err, "not pid"), "%s", o.err);
	fake_stop(&fk);
	remove_dir(dir);
}

/* list asks every socket at once: sockets that never answer cost one timeout, not one each, and
 * the real process is listed. */
Test(trust, list_is_not_held_up_by_bad_sockets, .timeout = 60)
{
	static struct fake more[4];
	struct target *t = target_start(NULL);
	char line[64], pat[32];

	cr_assert(t);
	cr_assert_eq(target_cmd(t, "alloc 1 1000", line, sizeof(line), 10000), 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(fake_start(&more[i], t->run_dir, 0, -1, i % 2 ? FAKE_FULL : FAKE_SILENT,
					NULL, 0), 0);
	vmmctl_run(&o, t->run_dir, -1, "--timeout 1 list");
	cr_expect_eq(o.code, 0);
	cr_expect_lt(o.seconds, 3.0 * ctl_slow(), "list took %.2f s", o.seconds);
	snprintf(pat, sizeof(pat), "\n%d ", (int)t->pid);
	cr_expect(strstr(o.out, pat), "%s", o.out);
	for (int i = 0; i < 4; i++)
		fake_stop(&more[i]);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

/* A process that manages no device memory yet answers sleep and wake with not_ready: vmmctl
 * says so and exits 3, as when there is no socket yet (nothing to sleep), not 1. */
Test(trust, not_ready_is_exit_3, .timeout = 30)
{
	static const char not_ready[] = "vmmshim/1 error\nerror status=\"not_ready\" message=\"no"
					"%20device%20memory%20is%20managed%20yet\"\nend\n";
	char dir[] = "/tmp/ctltrust-XXXXXX";

	make_dir(dir);
	cr_assert_eq(fake_start(&fk, dir, 0, -1, FAKE_REPLY, not_ready, sizeof(not_ready) - 1), 0);
	vmmctl_run(&o, dir, -1, "--timeout 5 sleep %ld", fk.name_pid);
	cr_expect_eq(o.code, 3, "%d %s %s", o.code, o.out, o.err);
	cr_expect(strstr(o.err, "no device memory is managed yet"), "%s", o.err);
	vmmctl_run(&o, dir, -1, "--json --timeout 5 wake %ld", fk.name_pid);
	cr_expect_eq(o.code, 3, "%d %s %s", o.code, o.out, o.err);
	cr_expect(strstr(o.out, "\"not_ready\""), "%s", o.out);
	fake_stop(&fk);
	remove_dir(dir);
}
