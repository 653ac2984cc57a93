/* A group whose members share memory through legacy CUDA IPC under the shim (torch.multiprocessing's
 * pattern): member 0 allocates with cuMemAlloc and exports it with cuIpcGetMemHandle, the others
 * open it with cuIpcOpenMemHandle. `vmmctl sleep` of the whole group releases that memory too
 * (the importers let it go, then the exporter copies it out and releases it) and `vmmctl wake`
 * re-creates it at the same address and re-shares it; checked: the device memory the simdev
 * group gets back while all sleep, every byte after wake in every process, writes crossing
 * between importer and exporter after wake, a fault in the middle of the sleep or the wake
 * leaving every process as it was with its data, and a holder outside the group keeping the
 * memory resident; memory exported ahead at the get that nobody opened (its descriptors kept by
 * the exporter) is released too; an export opened while its exporter sleeps alone (held or with
 * autowake) reads the bytes of before the sleep; and randomized rounds of all of it, with
 * importers killed and replaced, for 20 s. share_peer (tests/simdev) is the program, run under
 * the shim. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define SHARE_PEER (getenv("CTL_SHARE_PEER"))
#include "../../simdev/share_util.h"
#include "harness.h"

TestSuite(group_ipc, .fini = harness_cleanup);

static struct ctl_out o;
static struct shared_env se;
#define SAN_ENV "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:halt_on_error=1"

#define OWN_BYTES (8u << 20)     /* each member's own memory */
#define SHARED_BYTES (32u << 20) /* the exporter's allocation, opened by the others */

static void setup_env(void)
{
	cr_assert(shared_env_setup(&se, "grpipc"));
}

/* A member with extra settings (NULL: none). */
static void start(struct peer *p, const char *extra)
{
	const char *env[] = { se.group, se.preload, se.run, "SIMDEV_MEMORY=2G",
			      "VMMSHIM_LOG=warn", SAN_ENV, extra, NULL };

	peer_start(p, env);
	peer_ok(p, "init");
}

/* vmmctl VERB on the n members of ps; its exit code. */
static int group(const char *verb, struct peer *ps, int n)
{
	char pids[256] = "";
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(pids + len, sizeof(pids) - len, " %d", (int)ps[i].pid);
	return vmmctl_run(&o, se.run_dir, -1, "--timeout 30 %s%s", verb, pids), o.code;
}

static long long group_free(struct peer *observer)
{
	long long fr = 0, tot = 0;

	peer_cmd(observer, -1, "info");
	cr_assert_eq(sscanf(observer->reply, "ok %lld %lld", &fr, &tot), 2, "%s",
		     observer->reply);
	return fr;
}

static void expect_read(struct peer *p, long long slot, const char *want)
{
	char text[96];

	snprintf(text, sizeof(text), "ok %s", want);
	cr_expect_str_eq(peer_cmd(p, -1, "read %lld", slot), text, "pid %d slot %lld",
			 (int)p->pid, slot);
}

/* The members: ps[0] exports, ps[1..n) open it; each has memory of its own too. */
struct sharing {
	struct peer ps[3];
	int n;
	long long own[3], shared[3];
};

/* The members started with their own memory, and ps[0]'s export got (its handle in hex), but
 * not opened yet. */
static void build_unopened(struct sharing *s, int n, const char *const *extra, char *hex,
			   size_t cap)
{
	char text[64];

	s->n = n;
	for (int i = 0; i < n; i++) {
		start(&s->ps[i], extra ? extra[i] : NULL);
		s->own[i] = peer_ok(&s->ps[i], "alloc %u", OWN_BYTES);
		snprintf(text, sizeof(text), "own-%d", i);
		peer_ok(&s->ps[i], "write %lld %s", s->own[i], text);
	}
	s->shared[0] = peer_ok(&s->ps[0], "alloc %u", SHARED_BYTES);
	peer_ok(&s->ps[0], "write %lld shared-by-0", s->shared[0]);
	peer_cmd(&s->ps[0], -1, "ipcget %lld", s->shared[0]);
	cr_assert(!strncmp(s->ps[0].reply, "ok ", 3), "ipcget: %s", s->ps[0].reply);
	snprintf(hex, cap, "%s", s->ps[0].reply + 3);
}

static void build(struct sharing *s, int n, const char *const *extra)
{
	char hex[200];

	build_unopened(s, n, extra, hex, sizeof(hex));
	for (int i = 1; i < n; i++) {
		s->shared[i] = peer_ok(&s->ps[i], "ipcopen %s", hex);
		expect_read(&s->ps[i], s->shared[i], "shared-by-0");
	}
}

/* Every process has its data, and the shared memory is one memory both ways. */
static void check(struct sharing *s, const char *shared_now)
{
	char text[64];

	for (int i = 0; i < s->n; i++) {
		snprintf(text, sizeof(text), "own-%d", i);
		expect_read(&s->ps[i], s->own[i], text);
		expect_read(&s->ps[i], s->shared[i], shared_now);
	}
	for (int i = 1; i < s->n; i++) {
		snprintf(text, sizeof(text), "written-by-%d", i);
		peer_ok(&s->ps[i], "write %lld %s", s->shared[i], text);
		expect_read(&s->ps[0], s->shared[0], text);
	}
	peer_ok(&s->ps[0], "write %lld back-from-0", s->shared[0]);
	for (int i = 1; i < s->n; i++)
		expect_read(&s->ps[i], s->shared[i], "back-from-0");
}

static void finish(struct sharing *s, struct peer *observer)
{
	char cmd[128];

	for (int i = 0; i < s->n; i++)
		peer_exit(&s->ps[i]);
	if (observer)
		peer_exit(observer);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", se.run_dir);
	cr_expect_eq(system(cmd), 0);
}

static void released_and_reshared(int n)
{
	struct sharing s;
	struct peer observer;
	long long before, asleep;

	setup_env();
	start(&observer, NULL);
	build(&s, n, NULL);
	before = group_free(&observer);
	cr_assert_eq(group("--json sleep", s.ps, n), 0, "group sleep: %s %s", o.out, o.err);
	/* Each importer let the shared memory go: counted as imported, as for VMM handles. */
	cr_expect_eq(json_num(o.out, "{", "imported"), (long long)(n - 1) * SHARED_BYTES, "%s",
		     o.out);
	asleep = group_free(&observer);
	/* Everything went back to the driver, the shared allocation included. */
	cr_expect_geq(asleep - before, (long long)n * OWN_BYTES + SHARED_BYTES,
		      "free %lld before, %lld asleep: the shared memory was not released", before,
		      asleep);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[0].pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "ipc_shared_asleep"), SHARED_BYTES, "%s",
		     o.out);
	vmmctl_run(&o, se.run_dir, -1, "status %d", (int)s.ps[0].pid);
	cr_expect(strstr(o.out, "released by a group sleep; re-shared at wake"), "%s", o.out);
	cr_assert_eq(group("--json wake", s.ps, n), 0, "group wake: %s %s", o.out, o.err);
	cr_expect_eq(json_num(o.out, "{", "imported"), (long long)(n - 1) * SHARED_BYTES, "%s",
		     o.out);
	cr_expect_leq(group_free(&observer), before, "every byte is back");
	check(&s, "shared-by-0");
	finish(&s, &observer);
}

Test(group_ipc, two_processes_release_and_reshare_ipc_memory, .timeout = 60)
{
	released_and_reshared(2);
}

Test(group_ipc, three_processes_release_and_reshare_ipc_memory, .timeout = 60)
{
	released_and_reshared(3);
}

/* The exporter's copy fails half way (its second copy to host): it rolls back, and the importers,
 * which had let the memory go already, are woken and map it again. Then the group sleeps and
 * wakes for real. */
Test(group_ipc, a_fault_in_the_middle_of_the_sleep_leaves_every_process_as_it_was,
     .timeout = 60)
{
	const char *extra[3] = { "SIMDEV_FAIL=cuMemcpyDtoHAsync:2", NULL, NULL };
	struct sharing s;

	setup_env();
	build(&s, 3, extra);
	cr_assert_neq(group("sleep", s.ps, 3), 0, "the fault did not hit: %s %s", o.out, o.err);
	for (int i = 0; i < 3; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"awake\""), "pid %d: %s", (int)s.ps[i].pid,
			  o.out);
	}
	check(&s, "shared-by-0");
	cr_assert_eq(group("sleep", s.ps, 3), 0, "%s %s", o.out, o.err);
	cr_assert_eq(group("wake", s.ps, 3), 0, "%s %s", o.out, o.err);
	check(&s, "back-from-0");
	finish(&s, NULL);
}

/* An importer cannot import the memory again at wake (its second import fails): it stays asleep,
 * the members that woke are put back to sleep, and a second wake brings every byte back. */
Test(group_ipc, a_fault_in_the_middle_of_the_wake_leaves_every_process_as_it_was,
     .timeout = 60)
{
	const char *extra[3] = { NULL, NULL, "SIMDEV_FAIL=cuMemImportFromShareableHandle:2" };
	struct sharing s;

	setup_env();
	build(&s, 3, extra);
	cr_assert_eq(group("sleep", s.ps, 3), 0, "%s %s", o.out, o.err);
	cr_assert_neq(group("wake", s.ps, 3), 0, "the fault did not hit: %s %s", o.out, o.err);
	for (int i = 0; i < 3; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"asleep\""), "pid %d: %s", (int)s.ps[i].pid,
			  o.out);
	}
	cr_assert_eq(group("wake", s.ps, 3), 0, "%s %s", o.out, o.err);
	check(&s, "shared-by-0");
	finish(&s, NULL);
}

/* An importer's import at wake fails after it was mapped (its grant is refused), and the driver
 * refuses to unmap it again: the wake fails, the mapping is kept and counted (not released under
 * it, its range not mapped over), and the next wake unmaps it and imports the memory again. */
Test(group_ipc, a_wake_undo_whose_unmap_is_refused_is_unmapped_by_the_next_wake,
     .timeout = 60)
{
	/* Its third grant (the import's at wake), and the undo's unmap and its retry. */
	const char *extra[2] = { NULL, "SIMDEV_FAIL=cuMemSetAccess:3,cuMemUnmap:3,cuMemUnmap:4" };
	struct sharing s;

	setup_env();
	build(&s, 2, extra);
	cr_assert_eq(group("sleep", s.ps, 2), 0, "%s %s", o.out, o.err);
	cr_assert_neq(group("wake", s.ps, 2), 0, "the fault did not hit: %s %s", o.out, o.err);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[1].pid);
	cr_expect(strstr(o.out, "\"state\": \"asleep\""), "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "ipc_imported"), SHARED_BYTES,
		     "the mapping that would not unmap is counted: %s", o.out);
	cr_assert_eq(group("wake", s.ps, 2), 0, "%s %s", o.out, o.err);
	check(&s, "shared-by-0");
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[1].pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "ipc_imported"), SHARED_BYTES,
		     "only the import itself: %s", o.out);
	finish(&s, NULL);
}

/* A process outside the group opened the memory too: it stays resident through the group's
 * sleep (status says ipc_shared), and every process still sees one memory after wake. */
Test(group_ipc, a_holder_outside_the_group_keeps_the_memory_resident, .timeout = 60)
{
	struct sharing s;
	struct peer observer;
	long long before, asleep;

	setup_env();
	start(&observer, NULL);
	build(&s, 3, NULL);
	before = group_free(&observer);
	cr_assert_eq(group("sleep", s.ps, 2), 0, "%s %s", o.out, o.err);
	asleep = group_free(&observer);
	cr_expect_geq(asleep - before, 2LL * OWN_BYTES, "own memory released");
	cr_expect_lt(asleep - before, 2LL * OWN_BYTES + SHARED_BYTES,
		     "the shared memory stayed resident: free %lld before, %lld asleep", before,
		     asleep);
	vmmctl_run(&o, se.run_dir, -1, "status %d", (int)s.ps[0].pid);
	cr_expect(strstr(o.out, "and stays resident while asleep (only a group sleep"), "%s", o.out);
	cr_expect(!strstr(o.out, "released by a group sleep"), "%s", o.out);
	/* The outsider keeps using it meanwhile. */
	peer_ok(&s.ps[2], "write %lld outsider-wrote", s.shared[2]);
	cr_assert_eq(group("wake", s.ps, 2), 0, "%s %s", o.out, o.err);
	check(&s, "outsider-wrote");
	finish(&s, &observer);
}

/* An exporter and its importer (extra: their settings) sleep as a group; the exporter is killed
 * before they wake. */
static void exporter_killed_while_asleep(struct sharing *s, const char *const *extra)
{
	setup_env();
	build(s, 2, extra);
	cr_assert_eq(group("sleep", s->ps, 2), 0, "%s %s", o.out, o.err);
	peer_kill(&s->ps[0]);
}

/* The importer, awake, has its own bytes and the shared ones; then it exits. */
static void importer_has_every_byte(struct sharing *s)
{
	char cmd[128];

	expect_read(&s->ps[1], s->own[1], "own-1");
	expect_read(&s->ps[1], s->shared[1], "shared-by-0");
	peer_ok(&s->ps[1], "write %lld still-usable", s->shared[1]);
	expect_read(&s->ps[1], s->shared[1], "still-usable");
	peer_exit(&s->ps[1]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", se.run_dir);
	cr_expect_eq(system(cmd), 0);
}

/* The exporter is killed while the group sleeps: its copy of the memory it released goes with
 * it. Natively the importer would keep the memory; here it still wakes, with its own data and
 * the shared bytes, from the copy it took at the sleep, in fresh memory mapped where the import
 * was (the soak found those bytes lost before: only the pointer stayed usable). */
Test(group_ipc, an_exporter_killed_while_asleep_leaves_its_importer_every_byte, .timeout = 60)
{
	struct sharing s;

	exporter_killed_while_asleep(&s, NULL);
	cr_assert_eq(group("wake", &s.ps[1], 1), 0, "%s %s", o.out, o.err);
	importer_has_every_byte(&s);
}

/* The same, and the importer's copy back into fresh memory fails (its first copy to the device:
 * imports come back before its own memory): that wake fails and changes nothing, the copy is
 * kept, and the next wake brings the shared bytes back from it. */
Test(group_ipc, a_failed_copy_back_after_the_exporter_ended_keeps_the_bytes_for_the_next_wake,
     .timeout = 60)
{
	const char *extra[2] = { NULL, "SIMDEV_FAIL=cuMemcpyHtoDAsync:1" };
	struct sharing s;

	exporter_killed_while_asleep(&s, extra);
	cr_expect_neq(group("wake", &s.ps[1], 1), 0, "the fault did not hit: %s %s", o.out, o.err);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[1].pid);
	cr_expect(!strstr(o.out, "\"state\": \"awake\""), "%s", o.out);
	cr_assert_eq(group("wake", &s.ps[1], 1), 0, "%s %s", o.out, o.err);
	importer_has_every_byte(&s);
}

/* The lines of path that hold what, counted; path is removed. */
static int count_in_file(const char *path, const char *what)
{
	static char buf[1 << 20];

	slurp(path, buf, sizeof(buf));
	return count_in(buf, what);
}

/* The same, and the importer's own memory fails to come back after the shared bytes did (its
 * second copy to the device): that wake is undone, the shared memory released again with its
 * copy, and the next wake brings every byte back. The exporter's end is said once in the log,
 * not at each try (a soak counted 12 such warnings for one end). */
Test(group_ipc, a_wake_undone_after_the_exporter_ended_says_its_end_once, .timeout = 60)
{
	const char *extra[2] = { NULL, "SIMDEV_FAIL=cuMemcpyHtoDAsync:2" };
	char path[] = "/tmp/vmmshim-grpipc-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	struct sharing s;

	cr_assert(fd >= 0 && saved >= 0);
	cr_assert_eq(dup2(fd, 2), 2); /* the members' logs, which they inherit */
	close(fd);
	exporter_killed_while_asleep(&s, extra);
	dup2(saved, 2);
	close(saved);
	cr_expect_neq(group("wake", &s.ps[1], 1), 0, "the fault did not hit: %s %s", o.out, o.err);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[1].pid);
	cr_expect(!strstr(o.out, "\"state\": \"awake\""), "%s", o.out);
	cr_assert_eq(group("wake", &s.ps[1], 1), 0, "%s %s", o.out, o.err);
	importer_has_every_byte(&s);
	cr_expect_eq(count_in_file(path, "ended while the group slept"), 1,
		     "the exporter's end is said once");
}

/* The importer's copy through the sleep needs more host memory than the host has (simdev's
 * memory is sparse: nothing is touched but the bytes written). Unchecked, a malloc under
 * overcommit could succeed and the copy's first touch have the kernel end the importer (here a
 * malloc larger than the machine's memory is refused instead, so the test tells the check by
 * its message); now its sleep fails first, saying why, the group rolls back, and every process
 * is awake with its data. */
Test(group_ipc, an_importer_without_host_memory_for_its_copy_fails_the_sleep, .timeout = 60)
{
	long long avail = proc_kb_bytes("/proc/meminfo", "MemAvailable");
	long long big = (avail + (1LL << 30) + (2LL << 20) - 1) & ~((2LL << 20) - 1);
	char memory[64], hex[200], text[64];
	const char *env[] = { se.group, se.preload, se.run, memory, "VMMSHIM_LOG=warn", SAN_ENV,
			      NULL };
	struct sharing s = { .n = 2 };

	cr_assert_gt(avail, 0, "MemAvailable unread");
	setup_env();
	snprintf(memory, sizeof(memory), "SIMDEV_MEMORY=%lld", big + (2LL << 30));
	for (int i = 0; i < 2; i++) {
		peer_start(&s.ps[i], env);
		peer_ok(&s.ps[i], "init");
		s.own[i] = peer_ok(&s.ps[i], "alloc %u", OWN_BYTES);
		snprintf(text, sizeof(text), "own-%d", i);
		peer_ok(&s.ps[i], "write %lld %s", s.own[i], text);
	}
	s.shared[0] = peer_ok(&s.ps[0], "alloc %lld", big);
	peer_ok(&s.ps[0], "write %lld shared-by-0", s.shared[0]);
	peer_cmd(&s.ps[0], -1, "ipcget %lld", s.shared[0]);
	cr_assert(!strncmp(s.ps[0].reply, "ok ", 3), "ipcget: %s", s.ps[0].reply);
	snprintf(hex, sizeof(hex), "%.190s", s.ps[0].reply + 3);
	s.shared[1] = peer_ok(&s.ps[1], "ipcopen %s", hex);
	cr_expect_neq(group("sleep", s.ps, 2), 0, "the sleep went ahead: %s", o.out);
	cr_expect(strstr(o.err, "host memory") && strstr(o.err, "available"),
		  "and says why, before it tries (what it needs and what the host has): %s", o.err);
	for (int i = 0; i < 2; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"awake\""), "member %d: %s", i, o.out);
	}
	check(&s, "shared-by-0");
	finish(&s, NULL);
}

/* A wake's re-imports share its timeout: with the exporter stopped (asleep, it cannot answer),
 * an importer of two allocations woken alone with --timeout 2 fails after about 2 s, not 2 s per
 * import, and is woken in full by a group wake once the exporter runs again. */
Test(group_ipc, a_stopped_exporter_costs_a_wake_its_timeout_once, .timeout = 60)
{
	struct sharing s;
	long long second, opened;
	double t0, took;

	setup_env();
	build(&s, 2, NULL);
	second = peer_ok(&s.ps[0], "alloc %u", SHARED_BYTES);
	peer_ok(&s.ps[0], "write %lld second-by-0", second);
	peer_cmd(&s.ps[0], -1, "ipcget %lld", second);
	cr_assert(!strncmp(s.ps[0].reply, "ok ", 3), "ipcget: %s", s.ps[0].reply);
	opened = peer_ok(&s.ps[1], "ipcopen %s", s.ps[0].reply + 3);
	cr_assert_eq(group("sleep", s.ps, 2), 0, "%s %s", o.out, o.err);
	cr_assert_eq(kill(s.ps[0].pid, SIGSTOP), 0);
	t0 = now_s();
	vmmctl_run(&o, se.run_dir, -1, "--timeout 2 --json wake %d", (int)s.ps[1].pid);
	took = now_s() - t0;
	cr_assert_eq(kill(s.ps[0].pid, SIGCONT), 0);
	cr_expect_neq(o.code, 0, "the wake succeeded with its exporter stopped: %s", o.out);
	cr_log_info("a wake with two imports from a stopped exporter failed after %.2f s", took);
	cr_expect_lt(took, 3.5, "the wake took %.2f s for a timeout of 2 s: %s %s", took, o.out,
		     o.err);
	cr_assert_eq(group("wake", s.ps, 2), 0, "%s %s", o.out, o.err);
	expect_read(&s.ps[1], opened, "second-by-0");
	check(&s, "shared-by-0");
	finish(&s, NULL);
}

/* An importer that was asleep already (slept alone: it kept its mapping) answers "already" to
 * the group sleep, so its exporter must keep the memory: were it re-created at wake, the
 * importer would still map the old memory and their writes would no longer meet. */
Test(group_ipc, an_importer_asleep_already_keeps_the_memory_shared, .timeout = 60)
{
	struct sharing s;

	setup_env();
	build(&s, 2, NULL);
	cr_assert_eq(group("sleep", &s.ps[1], 1), 0, "%s %s", o.out, o.err);
	cr_assert_eq(group("sleep", s.ps, 2), 0, "%s %s", o.out, o.err);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[0].pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "ipc_shared_asleep"), 0, "%s", o.out);
	cr_assert_eq(group("wake", s.ps, 2), 0, "%s %s", o.out, o.err);
	check(&s, "shared-by-0");
	finish(&s, NULL);
}

/* The exporter's kept descriptors, as its status's ipc record says (-1: none said). */
static long long kept_fds(pid_t pid)
{
	char sock[512], reply[65536];
	const char *p;
	ssize_t n;

	snprintf(sock, sizeof(sock), "%s/%d.sock", se.run_dir, (int)pid);
	n = raw_request(sock, "vmmshim/1 status\n", 17, false, 0, reply, sizeof(reply) - 1, 5000);
	if (n < 0)
		return -1;
	reply[n] = '\0';
	p = strstr(reply, "kept_fds=");
	return p ? strtoll(p + 9, NULL, 10) : -1;
}

/* A get exports ahead and the exporter keeps the descriptors, which would hold the memory for
 * the driver: nobody opened it, so a group sleep releases it, which closes them first. */
Test(group_ipc, memory_nobody_opened_after_a_get_is_released, .timeout = 60)
{
	struct sharing s;
	struct peer observer;
	long long before, asleep, kept = -1;
	char text[64], hex[2048];

	setup_env();
	start(&observer, NULL);
	build_unopened(&s, 2, NULL, hex, sizeof(hex));
	/* The export ahead runs on a thread of the exporter's shim: wait for it (bounded). */
	for (int i = 0; i < 200 && kept <= 0; i++) {
		kept = kept_fds(s.ps[0].pid);
		if (kept <= 0)
			usleep(20000);
	}
	cr_assert_gt(kept, 0, "the exporter kept no descriptor after the get");
	before = group_free(&observer);
	cr_assert_eq(group("sleep", s.ps, 2), 0, "group sleep: %s %s", o.out, o.err);
	asleep = group_free(&observer);
	cr_expect_geq(asleep - before, 2LL * OWN_BYTES + SHARED_BYTES,
		      "free %lld before, %lld asleep: the exported memory was not released",
		      before, asleep);
	cr_expect_eq(kept_fds(s.ps[0].pid), 0, "descriptors kept while asleep");
	cr_assert_eq(group("wake", s.ps, 2), 0, "group wake: %s %s", o.out, o.err);
	cr_expect_leq(group_free(&observer), before, "every byte is back");
	for (int i = 0; i < 2; i++) {
		snprintf(text, sizeof(text), "own-%d", i);
		expect_read(&s.ps[i], s.own[i], text);
	}
	expect_read(&s.ps[0], s.shared[0], "shared-by-0");
	/* Awake, it opens as before. */
	s.shared[1] = peer_ok(&s.ps[1], "ipcopen %s", hex);
	expect_read(&s.ps[1], s.shared[1], "shared-by-0");
	finish(&s, &observer);
}

/* An export opened while its exporter sleeps alone (vmmctl sleep, or a sharing peer's): the
 * open must come and read the bytes written before the sleep, and a write through it must reach
 * the exporter once it is awake again; then a group sleep of both keeps that one memory. */
static void opened_while_the_exporter_sleeps(bool autowake)
{
	struct sharing s;
	char hex[2048];

	setup_env();
	build_unopened(&s, 2, NULL, hex, sizeof(hex));
	cr_assert_eq(vmmctl_run(&o, se.run_dir, -1, "--timeout 30 sleep %d%s", (int)s.ps[0].pid,
				autowake ? " --autowake" : ""), 0, "sleep: %s %s", o.out, o.err);
	s.shared[1] = peer_ok(&s.ps[1], "ipcopen %s", hex);
	expect_read(&s.ps[1], s.shared[1], "shared-by-0");
	peer_ok(&s.ps[1], "write %lld opened-while-asleep", s.shared[1]);
	if (!autowake)
		cr_assert_eq(group("wake", s.ps, 1), 0, "wake: %s %s", o.out, o.err);
	expect_read(&s.ps[0], s.own[0], "own-0");
	expect_read(&s.ps[0], s.shared[0], "opened-while-asleep");
	cr_assert_eq(group("sleep", s.ps, 2), 0, "group sleep: %s %s", o.out, o.err);
	cr_assert_eq(group("wake", s.ps, 2), 0, "group wake: %s %s", o.out, o.err);
	check(&s, "opened-while-asleep");
	finish(&s, NULL);
}

Test(group_ipc, an_export_opened_while_its_exporter_sleeps_held, .timeout = 60)
{
	opened_while_the_exporter_sleeps(false);
}

Test(group_ipc, an_export_opened_while_its_exporter_sleeps_with_autowake, .timeout = 60)
{
	opened_while_the_exporter_sleeps(true);
}

/* A member on a GPU of 256 MiB shared with GPU sharing on (VMMSHIM_SHARE=1, priority prio;
 * prio < 0: sharing off). */
static void start_small(struct peer *p, int prio)
{
	char share[32], priority[32];
	const char *env[] = { se.group, se.preload, se.run, "SIMDEV_MEMORY=256M",
			      "VMMSHIM_LOG=info", SAN_ENV, share, priority, NULL };

	snprintf(share, sizeof(share), "VMMSHIM_SHARE=%d", prio >= 0);
	snprintf(priority, sizeof(priority), "VMMSHIM_PRIORITY=%d", prio >= 0 ? prio : 0);
	peer_start(p, env);
	peer_ok(p, "init");
}

static bool slept_by(pid_t pid, pid_t by)
{
	vmmctl_run(&o, se.run_dir, -1, "status --json %d", (int)pid);
	cr_assert_eq(o.code, 0, "%s %s", o.out, o.err);
	return json_num(o.out, NULL, "slept_by") == by;
}

/* GPU sharing counts only what a peer's sleep would release: memory it exports through legacy
 * IPC stays resident for its importer. A higher priority that needs more than the peer's own
 * memory gets its out-of-memory error without sleeping it (a sleep for nothing); one that needs
 * no more sleeps it, and the importer still reads the shared memory meanwhile. */
Test(group_ipc, gpu_sharing_does_not_sleep_a_peer_for_memory_it_shares, .timeout = 60)
{
	struct peer e, imp, c;
	long long shared, own, mine, big;
	char hex[200];

	setup_env();
	start_small(&e, 0);
	start_small(&imp, -1);
	start_small(&c, 1);
	shared = peer_ok(&e, "alloc %u", 100u << 20);
	peer_ok(&e, "write %lld shared-by-e", shared);
	own = peer_ok(&e, "alloc %u", 20u << 20);
	peer_ok(&e, "write %lld own-of-e", own);
	peer_cmd(&e, -1, "ipcget %lld", shared);
	cr_assert(!strncmp(e.reply, "ok ", 3), "ipcget: %s", e.reply);
	snprintf(hex, sizeof(hex), "%.190s", e.reply + 3);
	mine = peer_ok(&imp, "ipcopen %s", hex);
	expect_read(&imp, mine, "shared-by-e");
	/* 136 MiB are free; e's sleep would release 20 of its 120. */
	cr_expect(strncmp(peer_cmd(&c, -1, "alloc %u", 200u << 20), "ok", 2),
		  "200 MiB were served: %s", c.reply);
	cr_expect(slept_by(e.pid, 0), "e was slept for memory its sleep cannot release: %s", o.out);
	big = peer_ok(&c, "alloc %u", 150u << 20);
	cr_expect(slept_by(e.pid, c.pid), "e was not slept for its own memory: %s", o.out);
	expect_read(&imp, mine, "shared-by-e");
	peer_ok(&c, "free %lld", big);
	expect_read(&e, own, "own-of-e"); /* woken by its read, c's cache trimmed for it */
	expect_read(&e, shared, "shared-by-e");
	peer_exit(&c);
	peer_exit(&imp);
	finish(&(struct sharing){ .n = 0 }, &e);
}

/* The same for the program's own VMM memory it exported (NCCL's buffers): its handle stays
 * resident when the process sleeps alone, so it is not counted either. */
Test(group_ipc, gpu_sharing_does_not_sleep_a_peer_for_its_exported_handles, .timeout = 60)
{
	struct peer e, c;
	long long h, mapped, own, big;

	setup_env();
	start_small(&e, 0);
	start_small(&c, 1);
	h = peer_ok(&e, "create %u posix", 100u << 20);
	mapped = peer_ok(&e, "map %lld %u", h, 100u << 20);
	peer_ok(&e, "write %lld exported-by-e", mapped);
	peer_ok(&e, "export %lld keep", h); /* the descriptor held open, as by a peer */
	own = peer_ok(&e, "alloc %u", 20u << 20);
	peer_ok(&e, "write %lld own-of-e", own);
	cr_expect(strncmp(peer_cmd(&c, -1, "alloc %u", 200u << 20), "ok", 2),
		  "200 MiB were served: %s", c.reply);
	cr_expect(slept_by(e.pid, 0), "e was slept for memory its sleep cannot release: %s", o.out);
	big = peer_ok(&c, "alloc %u", 150u << 20);
	cr_expect(slept_by(e.pid, c.pid), "e was not slept for its own memory: %s", o.out);
	peer_ok(&c, "free %lld", big);
	expect_read(&e, own, "own-of-e");
	expect_read(&e, mapped, "exported-by-e");
	peer_exit(&c);
	finish(&(struct sharing){ .n = 0 }, &e);
}

/* Randomized rounds over one sharing (the exporter, two importers, two exports each opened by
 * both), for 20 s with a fixed seed (IPC_SOAK_SECONDS and IPC_SOAK_SEED change them): a member
 * writes an export through its mapping, or reads it back; the three sleep as a group (held, or
 * with autowake and woken by their next read) and wake; one member sleeps alone while the
 * others use the memory; an importer is killed and a fresh one opens both exports again (half
 * of them with one or two driver faults in the sleep, wake and import paths), or the exporter
 * (replace_exporter); an importer closes an export and opens it again. After every sleep,
 * failed ones included, every member must read what was written last, through every mapping,
 * and with everyone gone the GPU must be as free as before. A sleep may fail only where a fault was injected; a wake refused (a
 * fault, its exporter mid-operation) is tried again, within 30 s. */
#define IPC_EXPORTS 2

struct ipc_rounds {
	struct sharing s;
	char hex[IPC_EXPORTS][300];
	long long slot[3][IPC_EXPORTS];  /* each member's mapping of each export */
	char last[IPC_EXPORTS][32];      /* what each export holds */
	bool faults[3];                  /* started with SIMDEV_FAIL */
	unsigned rng;
	int rounds, group_sleeps, alone_sleeps, kills, exporters, reopens, writes, reads, faulty,
		failed;
};

static unsigned ipc_rnd(struct ipc_rounds *r, unsigned below)
{
	return (unsigned)rand_r(&r->rng) % below;
}

/* A command of a member that may meet an injected fault (once per function): tried again. */
#define peer_ok_again(r, i, ...)                                                            \
	({                                                                                  \
		const char *r_ = peer_cmd(&(r)->s.ps[i], -1, __VA_ARGS__);                   \
		for (int t_ = 0; (r)->faults[i] && strncmp(r_, "ok", 2) && t_ < 3; t_++)     \
			r_ = peer_cmd(&(r)->s.ps[i], -1, __VA_ARGS__);                       \
		cr_assert(!strncmp(r_, "ok", 2), "peer %d: -> '%s'", (int)(r)->s.ps[i].pid, r_); \
		atol(r_ + 2);                                                               \
	})

static void open_exports(struct ipc_rounds *r, int i)
{
	for (int k = 0; k < IPC_EXPORTS; k++)
		r->slot[i][k] = peer_ok_again(r, i, "ipcopen %s", r->hex[k]);
}

/* Functions of the shim's sleep, wake and import paths, at calls a few cycles reach. */
static void draw_faults(struct ipc_rounds *r, char *env, size_t cap)
{
	static const char *const fns[] = { "cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync",
					   "cuMemImportFromShareableHandle", "cuMemSetAccess",
					   "cuMemUnmap", "cuMemRelease", "cuMemCreate", "cuMemMap" };
	unsigned a = ipc_rnd(r, 8), b = (a + 1 + ipc_rnd(r, 7)) % 8;

	if (ipc_rnd(r, 2))
		snprintf(env, cap, "SIMDEV_FAIL=%s:%u", fns[a], 1 + ipc_rnd(r, 8));
	else
		snprintf(env, cap, "SIMDEV_FAIL=%s:%u,%s:%u", fns[a], 1 + ipc_rnd(r, 8), fns[b],
			 1 + ipc_rnd(r, 8));
}

static bool any_faults(const struct ipc_rounds *r, const struct peer *ps, int n)
{
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < n; j++)
			if (&r->s.ps[i] == &ps[j] && r->faults[i])
				return true;
	return false;
}

static void all_read_last(struct ipc_rounds *r)
{
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < IPC_EXPORTS; k++)
			expect_read(&r->s.ps[i], r->slot[i][k], r->last[k]);
}

static void wake_until_done(struct peer *ps, int n)
{
	for (int tries = 0; group("wake", ps, n); tries++) {
		cr_assert_lt(tries, 30, "no wake within 30 tries: %s %s", o.out, o.err);
		sleep(1);
	}
}

/* A member killed; its successor started with driver faults half the time. */
static void replace_member(struct ipc_rounds *r, int i)
{
	static char env[160];
	const char *extra = NULL;

	peer_kill(&r->s.ps[i]);
	r->faults[i] = ipc_rnd(r, 2);
	if (r->faults[i]) {
		draw_faults(r, env, sizeof(env));
		extra = env;
		r->faulty++;
	}
	start(&r->s.ps[i], extra);
	r->s.own[i] = peer_ok_again(r, i, "alloc %u", OWN_BYTES);
}

/* The exporter allocates export k, writes what it holds now and hands it out (hex). */
static void export(struct ipc_rounds *r, int k)
{
	r->slot[0][k] = peer_ok_again(r, 0, "alloc %u", SHARED_BYTES);
	peer_ok_again(r, 0, "write %lld %s", r->slot[0][k], r->last[k]);
	peer_cmd(&r->s.ps[0], -1, "ipcget %lld", r->slot[0][k]);
	cr_assert(!strncmp(r->s.ps[0].reply, "ok ", 3), "ipcget: %s", r->s.ps[0].reply);
	snprintf(r->hex[k], sizeof(r->hex[k]), "%.256s", r->s.ps[0].reply + 3);
}

/* The exporter is killed while the importers map its memory: their imports hold it, so they
 * still read and write one memory, and a sleep of the two alone keeps it whole (its exporter is
 * not in the group: nothing is released). A new exporter then exports copies and the importers
 * move to them; the old memory goes back to the GPU with their closes (checked at the end). */
static void replace_exporter(struct ipc_rounds *r, int k)
{
	replace_member(r, 0);
	for (int i = 1; i < 3; i++)
		for (int e = 0; e < IPC_EXPORTS; e++)
			expect_read(&r->s.ps[i], r->slot[i][e], r->last[e]);
	snprintf(r->last[k], sizeof(r->last[k]), "r%d-orphan", r->rounds);
	peer_ok_again(r, 1, "write %lld %s", r->slot[1][k], r->last[k]);
	expect_read(&r->s.ps[2], r->slot[2][k], r->last[k]);
	if (group("sleep", &r->s.ps[1], 2))
		cr_assert(any_faults(r, &r->s.ps[1], 2), "importers' sleep without a fault: %s %s",
			  o.out, o.err);
	wake_until_done(&r->s.ps[1], 2);
	for (int i = 1; i < 3; i++)
		for (int e = 0; e < IPC_EXPORTS; e++)
			expect_read(&r->s.ps[i], r->slot[i][e], r->last[e]);
	for (int e = 0; e < IPC_EXPORTS; e++)
		export(r, e);
	for (int i = 1; i < 3; i++)
		for (int e = 0; e < IPC_EXPORTS; e++) {
			peer_ok_again(r, i, "ipcclose %lld", r->slot[i][e]);
			r->slot[i][e] = peer_ok_again(r, i, "ipcopen %s", r->hex[e]);
		}
	r->exporters++;
	all_read_last(r);
}

static void ipc_round(struct ipc_rounds *r)
{
	int i = (int)ipc_rnd(r, 3), k = (int)ipc_rnd(r, IPC_EXPORTS), what = (int)ipc_rnd(r, 100);

	r->rounds++;
	if (what < 30) {
		snprintf(r->last[k], sizeof(r->last[k]), "r%d-by-%d", r->rounds, i);
		peer_ok_again(r, i, "write %lld %s", r->slot[i][k], r->last[k]);
		r->writes++;
	} else if (what < 45) {
		expect_read(&r->s.ps[i], r->slot[i][k], r->last[k]);
		r->reads++;
	} else if (what < 65) {
		bool autowake = ipc_rnd(r, 2);

		if (group(autowake ? "sleep --autowake" : "sleep", r->s.ps, 3)) {
			cr_assert(any_faults(r, r->s.ps, 3), "group sleep without a fault: %s %s",
				  o.out, o.err);
			r->failed++;
			autowake = false; /* a member left partly asleep is woken by vmmctl */
		}
		r->group_sleeps++;
		if (!autowake)
			wake_until_done(r->s.ps, 3);
		all_read_last(r); /* with autowake: each read wakes its member */
		wake_until_done(r->s.ps, 3);
	} else if (what < 80) {
		struct peer *p = &r->s.ps[i];
		int j = (i + 1) % 3;

		if (group("sleep", p, 1)) {
			cr_assert(r->faults[i], "sleep of %d without a fault: %s %s", (int)p->pid,
				  o.out, o.err);
			r->failed++;
		}
		r->alone_sleeps++;
		/* The others use the memory meanwhile: it stayed resident for them. */
		snprintf(r->last[k], sizeof(r->last[k]), "r%d-beside-%d", r->rounds, i);
		peer_ok_again(r, j, "write %lld %s", r->slot[j][k], r->last[k]);
		wake_until_done(p, 1);
		all_read_last(r);
	} else if (what < 90 && i > 0) {
		replace_member(r, i);
		open_exports(r, i);
		r->kills++;
		all_read_last(r);
	} else if (what < 90) {
		replace_exporter(r, k);
	} else if (i > 0) {
		peer_ok_again(r, i, "ipcclose %lld", r->slot[i][k]);
		r->slot[i][k] = peer_ok_again(r, i, "ipcopen %s", r->hex[k]);
		r->reopens++;
		expect_read(&r->s.ps[i], r->slot[i][k], r->last[k]);
	}
}

Test(group_ipc, randomized_sleeps_kills_and_reopens_keep_every_byte, .timeout = 180)
{
	static struct ipc_rounds r;
	struct peer observer;
	const char *secs_env = getenv("IPC_SOAK_SECONDS"), *seed_env = getenv("IPC_SOAK_SEED");
	double secs = secs_env ? atof(secs_env) : 20, end;
	long long before;

	r.rng = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : 20261205u;
	setup_env();
	start(&observer, NULL);
	before = group_free(&observer);
	for (int i = 0; i < 3; i++) {
		start(&r.s.ps[i], NULL);
		r.s.own[i] = peer_ok(&r.s.ps[i], "alloc %u", OWN_BYTES);
	}
	r.s.n = 3;
	for (int k = 0; k < IPC_EXPORTS; k++) {
		snprintf(r.last[k], sizeof(r.last[k]), "export-%d", k);
		export(&r, k);
	}
	for (int i = 1; i < 3; i++)
		open_exports(&r, i);
	end = now_s() + secs;
	while (now_s() < end)
		ipc_round(&r);
	all_read_last(&r);
	cr_log_info("ipc rounds (seed %u): %d rounds, %d group sleeps, %d alone, %d importers "
		    "killed and replaced, %d exporters (%d with faults), %d sleeps failed by a "
		    "fault, %d reopens, %d writes, %d reads", seed_env ?
		    (unsigned)strtoul(seed_env, NULL, 10) : 20261205u, r.rounds, r.group_sleeps,
		    r.alone_sleeps, r.kills, r.exporters, r.faulty, r.failed, r.reopens, r.writes,
		    r.reads);
	for (int i = 0; i < 3; i++)
		peer_exit(&r.s.ps[i]);
	cr_expect_geq(group_free(&observer), before, "memory left on the GPU once all ended");
	finish(&(struct sharing){ .n = 0 }, &observer);
}

/* An exporter that resets its device (cudaDeviceReset) frees its own memory, as natively, but
 * not what an importer still maps: the importer reads and writes it as before, and the
 * exporter's memory left to the device is its own allocation only. */
Test(group_ipc, an_exporters_reset_leaves_what_an_importer_maps, .timeout = 60)
{
	struct sharing s;
	struct peer observer;
	long long before, after;

	setup_env();
	start(&observer, NULL);
	build(&s, 2, NULL);
	before = group_free(&observer);
	peer_ok(&s.ps[0], "reset");
	after = group_free(&observer);
	cr_expect_geq(after - before, (long long)OWN_BYTES,
		      "free %lld before the reset, %lld after: the exporter's own memory stayed",
		      before, after);
	cr_expect_lt(after - before, (long long)(OWN_BYTES + SHARED_BYTES),
		     "free %lld before the reset, %lld after: the shared memory went too", before,
		     after);
	expect_read(&s.ps[1], s.shared[1], "shared-by-0");
	peer_ok(&s.ps[1], "write %lld after-the-reset", s.shared[1]);
	expect_read(&s.ps[1], s.shared[1], "after-the-reset");
	expect_read(&s.ps[1], s.own[1], "own-1");
	finish(&s, &observer);
}

/* An importer that resets its device closes what it opened, as the driver's reset destroys the
 * context's mappings: nothing of the exporter's stays mapped there, so once the exporter frees
 * the allocation its memory goes back to the device. */
Test(group_ipc, an_importers_reset_closes_what_it_opened, .timeout = 60)
{
	struct sharing s;
	struct peer observer;
	long long before, after;

	setup_env();
	start(&observer, NULL);
	build(&s, 2, NULL);
	peer_ok(&s.ps[1], "reset");
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)s.ps[1].pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "ipc_imported"), 0, "%s", o.out);
	before = group_free(&observer);
	/* The exporter's free retires the shared memory; its next allocation (2 MiB) releases the
	 * handle, whose memory then goes back unless someone still maps it. */
	peer_ok(&s.ps[0], "free %lld", s.shared[0]);
	peer_ok(&s.ps[0], "alloc %u", 2u << 20);
	after = group_free(&observer);
	cr_expect_geq(after - before, (long long)SHARED_BYTES - (2 << 20),
		      "free %lld before the exporter's free, %lld after: the importer still holds "
		      "the shared memory", before, after);
	expect_read(&s.ps[0], s.own[0], "own-0");
	s.n = 1; /* the importer's pointers went with its reset */
	peer_exit(&s.ps[1]);
	finish(&s, &observer);
}
