/* A GPU's member table (shim/share/share_members.c) on its own: real processes join it, end,
 * are killed, leave zombies, and race for slots; no program, no preload. What a sharing round
 * relies on: every live member listed once, a process gone for good pruned, a live one (also one
 * only its socket vouches for, as in another pid namespace) never. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../shim/protocol/proc_start.h"
#include "../../../shim/share/share_internal.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/vmmshim-members-XXXXXX");
	cr_assert(mkdtemp(dir));
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(members, .init = make_dir, .fini = remove_dir);

/* A child that joins the table of uuid (when join), says so on *ready, and lives until its
 * stdin closes (or it is killed). */
static pid_t member_child(const char *uuid, bool join, int *release)
{
	int up[2], down[2];
	pid_t pid;
	char c;

	cr_assert(!pipe(up) && !pipe(down));
	pid = fork();
	cr_assert(pid >= 0);
	if (!pid) {
		struct share_members *m = share_members_open(dir, uuid);
		bool ok = m && (!join || share_members_join(m, getpid(), proc_start_time(getpid())));

		/* The other children's pipes too: each must end when its own closes. */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != up[1] && fd != down[0])
				close(fd);
		if (write(up[1], ok ? "y" : "n", 1) != 1)
			_exit(2);
		while (read(down[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	cr_assert_eq(read(up[0], &c, 1), 1);
	cr_assert_eq(c, 'y', "the child could not join");
	close(up[0]);
	*release = down[1];
	return pid;
}

static void end_child(pid_t pid, int release)
{
	close(release);
	waitpid(pid, NULL, 0);
}

static bool listed(const pid_t *pids, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

/* A listening socket named for pid in the folder, as a shim's control server makes. */
static int serve_as(pid_t pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%ld.sock", dir, (long)pid);
	cr_assert(!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) && !listen(fd, 4), "%s",
		  strerror(errno));
	return fd;
}

Test(members, lists_each_live_member_once_and_not_the_asker)
{
	struct share_members *m = share_members_open(dir, "GPU-a");
	pid_t kids[3], got[SHARE_MEMBER_SLOTS];
	int rel[3], n;

	cr_assert(m);
	for (int i = 0; i < 3; i++)
		kids[i] = member_child("GPU-a", true, &rel[i]);
	/* The asker is a member too, and joins twice: one slot. */
	cr_assert(share_members_join(m, getpid(), proc_start_time(getpid())));
	cr_assert(share_members_join(m, getpid(), proc_start_time(getpid())));
	n = share_members_list(m, getpid(), got, SHARE_MEMBER_SLOTS);
	cr_expect_eq(n, 3);
	for (int i = 0; i < 3; i++)
		cr_expect(listed(got, n, kids[i]), "pid %ld missing", (long)kids[i]);
	cr_expect_eq(share_members_list(m, 0, got, SHARE_MEMBER_SLOTS), 4);
	/* A live member is never pruned. */
	for (int i = 0; i < 3; i++)
		cr_expect_eq(share_members_prune(m, kids[i]), 0);
	for (int i = 0; i < 3; i++)
		end_child(kids[i], rel[i]);
	share_members_close(m);
}

Test(members, another_gpu_has_a_table_of_its_own)
{
	struct share_members *a = share_members_open(dir, "GPU-a"),
			     *b = share_members_open(dir, "GPU-b");
	pid_t kid, got[8];
	int rel;

	cr_assert(a && b);
	kid = member_child("GPU-b", true, &rel);
	cr_expect_eq(share_members_list(a, getpid(), got, 8), 0);
	cr_expect_eq(share_members_list(b, getpid(), got, 8), 1);
	cr_expect_eq(got[0], kid);
	end_child(kid, rel);
	share_members_close(a);
	share_members_close(b);
}

Test(members, a_process_gone_for_good_is_pruned)
{
	struct share_members *m = share_members_open(dir, "GPU-a");
	pid_t ended, zombie, live, got[8];
	int r1, r2, r3, n;

	cr_assert(m);
	ended = member_child("GPU-a", true, &r1);
	zombie = member_child("GPU-a", true, &r2);
	live = member_child("GPU-a", true, &r3);
	end_child(ended, r1);           /* ended and reaped: no such process */
	kill(zombie, SIGKILL);          /* killed, not reaped: a zombie */
	cr_assert_eq(waitid(P_PID, (id_t)zombie, &(siginfo_t){ 0 }, WEXITED | WNOWAIT), 0);
	cr_expect_eq(share_members_prune(m, ended), 1);
	cr_expect_eq(share_members_prune(m, zombie), 1);
	cr_expect_eq(share_members_prune(m, live), 0);
	n = share_members_list(m, getpid(), got, 8);
	cr_expect_eq(n, 1);
	cr_expect_eq(got[0], live);
	waitpid(zombie, NULL, 0);
	end_child(live, r3);
	share_members_close(m);
}

/* A slot whose pid now names another process (its start time differs) is pruned; one whose
 * process still serves its socket is not, whatever this /proc says (another pid namespace). */
Test(members, a_reused_pid_is_pruned_unless_its_socket_serves)
{
	struct share_members *m = share_members_open(dir, "GPU-a");
	pid_t kid, got[8];
	int rel, sock;
	uint64_t wrong;

	cr_assert(m);
	kid = member_child("GPU-a", false, &rel);
	wrong = proc_start_time(kid) + 1000;
	cr_assert(share_members_join(m, kid, wrong));
	sock = serve_as(kid);
	cr_expect_eq(share_members_prune(m, kid), 0, "its socket serves: alive");
	close(sock);
	cr_expect_eq(share_members_prune(m, kid), 1, "no listener, another start time");
	cr_expect_eq(share_members_list(m, getpid(), got, 8), 0);
	end_child(kid, rel);
	share_members_close(m);
}

/* Every slot held by a live process: a join fails (and takes nothing); once one of them is gone
 * for good, a join takes its slot. */
Test(members, a_full_table_takes_the_slot_of_a_process_gone)
{
	struct share_members *m = share_members_open(dir, "GPU-a");
	pid_t kid, got[SHARE_MEMBER_SLOTS];
	int rel, sock;
	uint64_t mine = proc_start_time(getpid());

	cr_assert(m);
	kid = member_child("GPU-a", false, &rel);
	sock = serve_as(kid); /* every slot below is live by its socket */
	for (int i = 0; i < SHARE_MEMBER_SLOTS; i++)
		cr_assert(share_members_join(m, kid, (uint64_t)i + 1), "slot %d", i);
	cr_expect_not(share_members_join(m, getpid(), mine));
	cr_expect_eq(share_members_list(m, kid, got, SHARE_MEMBER_SLOTS), 0);
	close(sock); /* now every slot names kid with a start time that is not its own */
	cr_expect(share_members_join(m, getpid(), mine));
	cr_expect_eq(share_members_list(m, kid, got, SHARE_MEMBER_SLOTS), 1);
	cr_expect_eq(got[0], getpid());
	end_child(kid, rel);
	share_members_close(m);
}

/* Many processes join at once: each gets a slot of its own. */
Test(members, processes_joining_at_once_each_get_a_slot)
{
	enum { N = 24 };
	struct share_members *m = share_members_open(dir, "GPU-a");
	pid_t kids[N], got[SHARE_MEMBER_SLOTS];
	int go[2], n, ok = 0;

	cr_assert(m && !pipe(go));
	for (int i = 0; i < N; i++) {
		kids[i] = fork();
		cr_assert(kids[i] >= 0);
		if (!kids[i]) {
			struct share_members *c = share_members_open(dir, "GPU-a");
			char x;

			close(go[1]);
			if (read(go[0], &x, 1) < 0 || !c)
				_exit(2);
			_exit(share_members_join(c, getpid(), proc_start_time(getpid())) ? 0 : 1);
		}
	}
	close(go[0]);
	close(go[1]); /* all start at once */
	/* Each has joined and ended, not reaped: zombies, still in the table, each once. */
	for (int i = 0; i < N; i++)
		cr_assert_eq(waitid(P_PID, (id_t)kids[i], &(siginfo_t){ 0 }, WEXITED | WNOWAIT), 0);
	n = share_members_list(m, getpid(), got, SHARE_MEMBER_SLOTS);
	for (int i = 0; i < N; i++)
		ok += listed(got, n, kids[i]);
	cr_expect_eq(n, N);
	cr_expect_eq(ok, N);
	for (int i = 0; i < N; i++) {
		int st = 0;

		waitpid(kids[i], &st, 0);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d", i);
	}
	share_members_close(m);
}

Test(members, a_table_that_is_not_a_plain_file_of_ours_is_refused)
{
	char path[160];

	snprintf(path, sizeof(path), "%s/share-GPU-x.members", dir);
	cr_assert(!symlink("/etc/passwd", path));
	cr_expect_null(share_members_open(dir, "GPU-x"));
}
