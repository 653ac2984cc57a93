/* A group whose members share device memory the way NCCL ranks do: one process creates an
 * exportable handle, maps it and passes its descriptor; the others import and map it, and each
 * member also has memory of its own. `vmmctl sleep` of the whole group releases every member's
 * own memory and the shared memory too (every holder is a member): the driver gets it back while
 * all are asleep. After `vmmctl wake` every byte is where it was, the shared bytes included, and
 * a write through one member's mapping is seen through another's (the exporter re-created it, the
 * importers fetched it again over its control socket). A failure half-way through the sleep or
 * the wake leaves every member as it was, with its data. Memory that a process outside the group
 * holds, or that a program holds open by a descriptor, stays resident and is named.
 * share_peer (tests/simdev) is the program, run under the shim with LD_PRELOAD. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARE_PEER (getenv("CTL_SHARE_PEER"))
#include "../../simdev/share_util.h"
#include "harness.h"
#include "proc_start.h"

TestSuite(group_share, .fini = harness_cleanup);

static struct ctl_out o;
static struct shared_env se;
/* In the sanitize pass share_peer and the shim are built with ASan, which must not insist on
 * coming first (the shim is preloaded); the driver cannot tell, so the setting is always given. */
#define SAN_ENV "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:halt_on_error=1"
static const char *env[] = { se.group, se.preload, se.run, "SIMDEV_MEMORY=2G",
			     "VMMSHIM_LOG=warn", SAN_ENV, NULL };

/* env with one more setting (a SIMDEV_FAIL): one member's environment, valid until the next
 * call (a test uses one). */
static const char *const *env_and(const char *setting)
{
	static const char *e[sizeof(env) / sizeof(env[0]) + 1];
	size_t n = 0;

	while (env[n]) {
		e[n] = env[n];
		n++;
	}
	e[n++] = setting;
	e[n] = NULL;
	return e;
}

#define OWN_BYTES (8u << 20)     /* each member's own cuMemAlloc memory */
#define SHARED_BYTES (4u << 20)  /* the exporter's handle, mapped by every member */

static void setup_env(void)
{
	cr_assert(shared_env_setup(&se, "grpshare"));
}

/* The run folder, and a process of the simdev group that only looks (its free memory is the
 * group's, as an awake member sees it). */
static void start_observer(struct peer *observer)
{
	setup_env();
	peer_start(observer, env);
	peer_ok(observer, "init");
}

static long long status_num(struct peer *p, const char *section, const char *key)
{
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)p->pid);
	cr_assert_eq(o.code, 0, "status of %d: %s %s", (int)p->pid, o.out, o.err);
	return json_num(o.out, section, key);
}

static void group(const char *verb, struct peer *ps, int n)
{
	char pids[256] = "";
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(pids + len, sizeof(pids) - len, " %d", (int)ps[i].pid);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 60 %s%s", verb, pids);
	cr_assert_eq(o.code, 0, "group %s: %s %s", verb, o.out, o.err);
}

/* Free device memory in the simdev group, as a member that is awake sees it. */
static long long group_free(struct peer *observer)
{
	long long fr = 0, tot = 0;

	peer_cmd(observer, -1, "info");
	cr_assert_eq(sscanf(observer->reply, "ok %lld %lld", &fr, &tot), 2, "%s",
		     observer->reply);
	return fr;
}

/* n members (env of member i: envs[i], NULL: env): member 0 exports SHARED_BYTES that the
 * others import and map, as NCCL ranks do; each has own memory too (own: no own memory). slot[i]
 * is the shared memory's address in member i; it holds "shared-by-0", own[i] "own-i". */
static void start_sharing(struct peer *ps, int n, const char *const *const *envs, bool own_mem,
			  long long *own, long long *slot)
{
	char text[32];

	for (int i = 0; i < n; i++) {
		peer_start(&ps[i], envs && envs[i] ? envs[i] : env);
		peer_ok(&ps[i], "init");
		own[i] = 0;
		if (!own_mem)
			continue;
		own[i] = peer_ok(&ps[i], "alloc %u", OWN_BYTES);
		snprintf(text, sizeof(text), "own-%d", i);
		peer_ok(&ps[i], "write %lld %s", own[i], text);
	}
	long long h = peer_ok(&ps[0], "create %u posix", SHARED_BYTES);
	slot[0] = peer_ok(&ps[0], "map %lld %u", h, SHARED_BYTES);
	peer_ok(&ps[0], "write %lld shared-by-0", slot[0]);
	for (int i = 1; i < n; i++) {
		peer_ok(&ps[0], "export %lld", h);
		cr_assert_geq(ps[0].fd, 0, "the export carries a descriptor");
		long long hi = peer_cmd(&ps[i], ps[0].fd, "import")[0] == 'o' ?
				       atol(ps[i].reply + 2) : -1;
		close(ps[0].fd);
		cr_assert_geq(hi, 0, "import: %s", ps[i].reply);
		slot[i] = peer_ok(&ps[i], "map %lld %u", hi, SHARED_BYTES);
	}
}

/* Every member reads its own bytes and the shared ones (expect: "ok TEXT"), and the memory is
 * still one: a write by the last member is read by member 0, then put back. */
static void check_sharing(struct peer *ps, int n, const long long *own, const long long *slot,
			  const char *expect)
{
	char text[32];

	for (int i = 0; i < n; i++) {
		snprintf(text, sizeof(text), "ok own-%d", i);
		if (own[i])
			cr_expect_str_eq(peer_cmd(&ps[i], -1, "read %lld", own[i]), text);
		cr_expect_str_eq(peer_cmd(&ps[i], -1, "read %lld", slot[i]), expect,
				 "member %d reads the shared bytes", i);
	}
	peer_ok(&ps[n - 1], "write %lld written-by-last", slot[n - 1]);
	cr_expect_str_eq(peer_cmd(&ps[0], -1, "read %lld", slot[0]), "ok written-by-last",
			 "a write by one member is seen by the exporter: still one memory");
	peer_ok(&ps[0], "write %lld %s", slot[0], expect + 3);
}

static void end_sharing(struct peer *ps, int n, struct peer *observer)
{
	char cmd[128];

	for (int i = 0; i < n; i++)
		peer_exit(&ps[i]);
	peer_exit(observer);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", se.run_dir);
	cr_expect_eq(system(cmd), 0);
}

static void shared_group(int n)
{
	struct peer ps[3], observer;
	long long own[3], slot[3], before, asleep;
	char text[64];

	start_observer(&observer);
	start_sharing(ps, n, NULL, true, own, slot);
	before = group_free(&observer);
	/* Twice: the second sleep matches the memory that the first wake re-shared. */
	for (int cycle = 0; cycle < 2; cycle++) {
		group(cycle ? "sleep" : "--json sleep", ps, n);
		asleep = group_free(&observer);
		/* Every member's own memory and the shared memory went back to the driver. */
		cr_expect_geq(asleep - before, (long long)n * OWN_BYTES + SHARED_BYTES,
			      "cycle %d: own and shared memory released: free %lld before, %lld "
			      "asleep", cycle, before, asleep);
		if (!cycle) {
			/* The group's "released" is what the driver got back: the shared memory
			 * once (its exporter's); each importer let it go, counted as imported. */
			cr_expect_eq(json_num(o.out, "{", "released"), asleep - before,
				     "released as counted vs. as freed: %s", o.out);
			cr_expect_eq(json_num(o.out, "{", "imported"),
				     (long long)(n - 1) * SHARED_BYTES, "%s", o.out);
			cr_expect(strstr(o.out, "\"resident\": false, \"why\": \"released"), "%s",
				  o.out);
			cr_expect(!strstr(o.out, "\"resident\": true"), "%s", o.out);
		} else {
			snprintf(text, sizeof(text), "shared 4.00 MiB (exported by pid %d): released",
				 (int)ps[0].pid);
			cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
			cr_expect(!strstr(o.out, "stays resident"), "%s", o.out);
			snprintf(text, sizeof(text), "pid %d: asleep. released 8.00 MiB", (int)ps[1].pid);
			cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
			cr_expect(strstr(o.out, "; let go 4.00 MiB imported from another process"),
				  "%s", o.out);
		}
		/* status: nothing shared stays resident; the exporter's copy is on the host. */
		for (int i = 0; i < n; i++)
			cr_expect_eq(status_num(&ps[i], "\"devices\": [", "app_shared"), 0,
				     "member %d: %s", i, o.out);
		cr_expect_eq(status_num(&ps[0], "\"devices\": [", "app_host_backup"),
			     SHARED_BYTES, "%s", o.out);
		vmmctl_run(&o, se.run_dir, -1, "status %d", (int)ps[1].pid);
		cr_expect(strstr(o.out, "imported; released by a group sleep"), "%s", o.out);
		group("wake", ps, n);
		cr_expect_eq(group_free(&observer), before, "cycle %d: the memory is back", cycle);
		check_sharing(ps, n, own, slot, "ok shared-by-0");
	}
	end_sharing(ps, n, &observer);
}

Test(group_share, two_processes_sharing_memory_sleep_and_wake, .timeout = 120)
{
	shared_group(2);
}

Test(group_share, three_processes_sharing_memory_sleep_and_wake, .timeout = 120)
{
	shared_group(3);
}

/* The exporter's release of the shared handle fails after both importers released theirs (the
 * second phase): the exporter rolls back, the importers are woken and fetch the memory again.
 * Every member is awake with its data, the memory still one and resident; the next group sleep
 * succeeds. */
Test(group_share, a_failure_half_way_through_the_sleep_leaves_every_member_as_it_was,
     .timeout = 120)
{
	const char *const *failing = env_and("SIMDEV_FAIL=cuMemRelease:1");
	const char *const *envs[3] = { failing, NULL, NULL };
	struct peer ps[3], observer;
	long long own[3], slot[3], before;
	char pids[64];

	start_observer(&observer);
	/* The exporter has no memory of its own, so its first release is the shared handle's. */
	start_sharing(ps, 3, envs, false, own, slot);
	before = group_free(&observer);
	snprintf(pids, sizeof(pids), "%d %d %d", (int)ps[0].pid, (int)ps[1].pid, (int)ps[2].pid);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 60 sleep %s", pids);
	cr_expect_eq(o.code, 1, "the sleep failed: %s %s", o.out, o.err);
	cr_expect(strstr(o.err, "every process is as it was"), "%s", o.err);
	for (int i = 0; i < 3; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"awake\""), "member %d: %s", i, o.out);
	}
	cr_expect_eq(group_free(&observer), before, "the shared memory is resident, once");
	check_sharing(ps, 3, own, slot, "ok shared-by-0");
	/* The injected failure happened once: now the group sleeps and wakes. */
	group("sleep", ps, 3);
	cr_expect_geq(group_free(&observer) - before, SHARED_BYTES, "released this time");
	group("wake", ps, 3);
	check_sharing(ps, 3, own, slot, "ok shared-by-0");
	end_sharing(ps, 3, &observer);
}

/* An importer cannot import the memory again at the group wake (its second
 * cuMemImportFromShareableHandle fails): it stays asleep, the exporter is put back to sleep, the
 * group wake fails and changes nothing that is lost; the next group wake brings every byte back
 * and the memory is shared again. */
Test(group_share, a_failure_half_way_through_the_wake_keeps_every_member_with_its_data,
     .timeout = 120)
{
	const char *const *failing = env_and("SIMDEV_FAIL=cuMemImportFromShareableHandle:2");
	const char *const *envs[2] = { NULL, failing };
	struct peer ps[2], observer;
	long long own[2], slot[2], before;
	char pids[64];

	start_observer(&observer);
	start_sharing(ps, 2, envs, true, own, slot);
	before = group_free(&observer);
	group("sleep", ps, 2);
	snprintf(pids, sizeof(pids), "%d %d", (int)ps[0].pid, (int)ps[1].pid);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 60 wake %s", pids);
	cr_expect_eq(o.code, 1, "the wake failed: %s %s", o.out, o.err);
	for (int i = 0; i < 2; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"asleep\""), "member %d: %s", i, o.out);
	}
	group("wake", ps, 2);
	cr_expect_eq(group_free(&observer), before, "the memory is back, once");
	check_sharing(ps, 2, own, slot, "ok shared-by-0");
	end_sharing(ps, 2, &observer);
}

/* Who keeps shared memory resident, named: the exporter's program holds a descriptor of it open
 * (the driver cannot free that memory), and a process outside the group imported it. Nothing
 * about it changes: the group sleeps and wakes, and the three still see one memory. */
Test(group_share, holders_that_keep_shared_memory_resident_are_named, .timeout = 120)
{
	struct peer ps[2], outsider;
	long long slot[3];
	char text[128];

	setup_env();
	peer_start(&outsider, env);
	peer_ok(&outsider, "init");
	for (int i = 0; i < 2; i++) {
		peer_start(&ps[i], env);
		peer_ok(&ps[i], "init");
	}
	long long h = peer_ok(&ps[0], "create %u posix", SHARED_BYTES);
	slot[0] = peer_ok(&ps[0], "map %lld %u", h, SHARED_BYTES);
	peer_ok(&ps[0], "write %lld before-sleep", slot[0]);
	long long kept = peer_ok(&ps[0], "export %lld keep", h);   /* the program keeps this one */
	struct peer *to[2] = { &ps[1], &outsider };
	for (int i = 0; i < 2; i++) {
		peer_ok(&ps[0], "export %lld", h);
		cr_assert_geq(ps[0].fd, 0, "the export carries a descriptor");
		long long hi = peer_cmd(to[i], ps[0].fd, "import")[0] == 'o' ?
				       atol(to[i]->reply + 2) : -1;
		close(ps[0].fd);
		cr_assert_geq(hi, 0, "import: %s", to[i]->reply);
		slot[i + 1] = peer_ok(to[i], "map %lld %u", hi, SHARED_BYTES);
	}
	group("sleep", ps, 2);
	snprintf(text, sizeof(text), "pid %d's program holds descriptor %lld of it open",
		 (int)ps[0].pid, kept);
	cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
	snprintf(text, sizeof(text), "pid %d, outside the group, holds it", (int)outsider.pid);
	cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
	/* status of the exporter says so too. */
	vmmctl_run(&o, se.run_dir, -1, "status %d", (int)ps[0].pid);
	snprintf(text, sizeof(text), "the program holds descriptor %lld of it open", kept);
	cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
	/* The same in JSON, per holder. */
	group("wake", ps, 2);
	vmmctl_run(&o, se.run_dir, -1, "--json --timeout 60 sleep %d %d", (int)ps[0].pid,
		   (int)ps[1].pid);
	cr_assert_eq(o.code, 0, "%s %s", o.out, o.err);
	snprintf(text, sizeof(text), "\"outside\": [%d]", (int)outsider.pid);
	cr_expect(strstr(o.out, text), "'%s' in: %s", text, o.out);
	cr_expect(strstr(o.out, "\"program_fds\": 1"), "%s", o.out);
	group("wake", ps, 2);
	peer_ok(&outsider, "write %lld from-outside", slot[2]);
	for (int i = 0; i < 2; i++)
		cr_expect_str_eq(peer_cmd(&ps[i], -1, "read %lld", slot[i]), "ok from-outside");
	for (int i = 0; i < 2; i++)
		peer_exit(&ps[i]);
	peer_exit(&outsider);
	snprintf(text, sizeof(text), "rm -rf '%s'", se.run_dir);
	cr_expect_eq(system(text), 0);
}

/* The shims' duplicates of the descriptors keep nothing alive past the handles: once the
 * exporter and the importer have unmapped and released the shared handle (and closed every
 * descriptor), its bytes are free again, as without the shim. simdev frees shared memory only
 * when no process holds it by a handle, a mapping or an open descriptor, as the driver does. */
Test(group_share, shared_memory_is_freed_when_the_programs_let_it_go, .timeout = 120)
{
	struct peer ps[2], observer;
	long long slot[2], hs[2], before, mapped, after;
	char cmd[128];

	start_observer(&observer);
	for (int i = 0; i < 2; i++) {
		peer_start(&ps[i], env);
		peer_ok(&ps[i], "init");
	}
	before = group_free(&observer);
	hs[0] = peer_ok(&ps[0], "create %u posix", SHARED_BYTES);
	slot[0] = peer_ok(&ps[0], "map %lld %u", hs[0], SHARED_BYTES);
	peer_ok(&ps[0], "export %lld", hs[0]);
	cr_assert_geq(ps[0].fd, 0, "the export carries a descriptor");
	hs[1] = peer_cmd(&ps[1], ps[0].fd, "import")[0] == 'o' ? atol(ps[1].reply + 2) : -1;
	close(ps[0].fd);
	cr_assert_geq(hs[1], 0, "import: %s", ps[1].reply);
	slot[1] = peer_ok(&ps[1], "map %lld %u", hs[1], SHARED_BYTES);
	/* A child forked now (a data-loader worker) inherits the shim's duplicates; it must not
	 * keep the memory alive. */
	pid_t child = (pid_t)peer_ok(&ps[0], "fork");
	cr_assert_gt(child, 0);
	mapped = group_free(&observer);
	cr_expect_leq(mapped, before - (long long)SHARED_BYTES, "the shared handle takes memory: "
		      "free %lld before, %lld mapped", before, mapped);
	/* Each shim lists its duplicate while the handle lives. */
	for (int i = 0; i < 2; i++) {
		vmmctl_run(&o, se.run_dir, -1, "status %d", (int)ps[i].pid);
		cr_expect(strstr(o.out, "shared handle"), "%s", o.out);
	}
	for (int i = 0; i < 2; i++) {
		peer_ok(&ps[i], "unmap %lld", slot[i]);
		peer_ok(&ps[i], "release %lld", hs[i]);
	}
	after = group_free(&observer);
	cr_expect_eq(after, before, "the shared bytes are free again: free %lld before, %lld after "
		     "(a forked child of the exporter lives)", before, after);
	kill(child, SIGKILL);
	for (int i = 0; i < 2; i++)
		peer_exit(&ps[i]);
	peer_exit(&observer);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", se.run_dir);
	cr_expect_eq(system(cmd), 0);
}

/* An exporter and its importer (extra: their settings), each with memory of its own, share a
 * handle whose every byte the exporter filled; they sleep as a group and the exporter is killed
 * before they wake. */
static void exporter_killed_while_asleep(struct peer *ps, struct peer *observer,
					 const char *const *const *envs, long long *own,
					 long long *slot)
{
	start_observer(observer);
	start_sharing(ps, 2, envs, true, own, slot);
	peer_ok(&ps[0], "fill %lld 77", slot[0]);
	group("sleep", ps, 2);
	peer_kill(&ps[0]);
}

/* The importer, awake, has its own bytes and every shared one; the memory stays usable. */
static void importer_has_every_byte(struct peer *ps, struct peer *observer, const long long *own,
				    const long long *slot)
{
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", own[1]), "ok own-1");
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "verify %lld 77", slot[1]), "ok same",
			 "the importer reads every shared byte the exporter wrote");
	peer_ok(&ps[1], "write %lld still-mapped", slot[1]);
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", slot[1]), "ok still-mapped");
	end_sharing(&ps[1], 1, observer);
}

/* The exporter is killed while the group sleeps: it took the memory it had released with it.
 * Natively the importer would keep the memory; here its wake maps fresh memory where the import
 * was (its pointer does not fault) and fills it from the copy it took at the sleep. Before that
 * copy, the contents were lost. */
Test(group_share, an_exporter_killed_while_asleep_leaves_its_importer_every_byte,
     .timeout = 120)
{
	struct peer ps[2], observer;
	long long own[2], slot[2];

	exporter_killed_while_asleep(ps, &observer, NULL, own, slot);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_expect_eq(o.code, 0, "the importer wakes alone: %s %s", o.out, o.err);
	importer_has_every_byte(ps, &observer, own, slot);
}

/* The same, and the importer's copy back fails: that wake fails and leaves it asleep, the copy is
 * kept, and the next wake brings every shared byte back from it. */
Test(group_share, a_failed_copy_back_after_the_exporter_ended_keeps_the_bytes_for_the_next_wake,
     .timeout = 120)
{
	const char *const *failing = env_and("SIMDEV_FAIL=cuMemcpyHtoDAsync:1");
	const char *const *envs[2] = { NULL, failing };
	struct peer ps[2], observer;
	long long own[2], slot[2];

	exporter_killed_while_asleep(ps, &observer, envs, own, slot);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_expect_neq(o.code, 0, "the fault did not hit: %s %s", o.out, o.err);
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)ps[1].pid);
	cr_expect(!strstr(o.out, "\"state\": \"awake\""), "%s", o.out);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_assert_eq(o.code, 0, "%s %s", o.out, o.err);
	importer_has_every_byte(ps, &observer, own, slot);
}

/* After a group sleep the two are woken by hand, each with its own vmmctl, the importer first: its
 * wake asks an exporter that is still asleep, and asks again (within its deadline) until the
 * exporter's own wake has brought the memory back. Both wake, with their data, still sharing. An
 * importer whose exporter stays asleep fails its wake soon, saying why, and stays asleep. */
Test(group_share, an_importer_woken_before_its_exporter_waits_for_it, .timeout = 120)
{
	struct peer ps[2], observer;
	long long own[2], slot[2];
	pid_t importer;
	double t;

	start_observer(&observer);
	start_sharing(ps, 2, NULL, true, own, slot);
	group("sleep", ps, 2);
	t = now_s();
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_expect_neq(o.code, 0, "the importer cannot wake alone: %s", o.out);
	cr_expect(strstr(o.err, "asleep"), "and says why: %s", o.err);
	cr_expect_lt(now_s() - t, 10.0, "soon, not at its deadline");
	vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)ps[1].pid);
	cr_expect(strstr(o.out, "\"state\": \"asleep\""), "it stays asleep: %s", o.out);
	importer = vmmctl_spawn(se.run_dir, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_assert_gt(importer, 0);
	usleep(200 * 1000);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[0].pid);
	cr_expect_eq(o.code, 0, "the exporter wakes: %s %s", o.out, o.err);
	cr_expect_eq(vmmctl_wait(importer, &o, 30000), 0, "the importer, waiting for it, too: %s %s",
		     o.out, o.err);
	check_sharing(ps, 2, own, slot, "ok shared-by-0");
	end_sharing(ps, 2, &observer);
}

/* NCCL's pattern: each member exports a buffer of its own and imports its peer's. Each sleeps in
 * the first phase (its imports go) and again in the second (its exports are copied out once both
 * have drained); at wake each brings back its exports first and fetches its imports second.
 * Both shared memories go back to the driver while the pair sleeps. */
/* Two members, each exporting a buffer ("buffer-of-i" at mine[i]) and importing the other's
 * (theirs[i]); envs[i]: member i's environment, NULL: env. */
static void start_mutual(struct peer *ps, const char *const *const *envs, long long *mine,
			 long long *theirs)
{
	long long h[2];
	char text[32];

	for (int i = 0; i < 2; i++) {
		peer_start(&ps[i], envs && envs[i] ? envs[i] : env);
		peer_ok(&ps[i], "init");
		h[i] = peer_ok(&ps[i], "create %u posix", SHARED_BYTES);
		mine[i] = peer_ok(&ps[i], "map %lld %u", h[i], SHARED_BYTES);
		snprintf(text, sizeof(text), "buffer-of-%d", i);
		peer_ok(&ps[i], "write %lld %s", mine[i], text);
	}
	for (int i = 0; i < 2; i++) {
		struct peer *to = &ps[1 - i];

		peer_ok(&ps[i], "export %lld", h[i]);
		cr_assert_geq(ps[i].fd, 0, "the export carries a descriptor");
		long long hi = peer_cmd(to, ps[i].fd, "import")[0] == 'o' ? atol(to->reply + 2) : -1;
		close(ps[i].fd);
		cr_assert_geq(hi, 0, "import: %s", to->reply);
		theirs[1 - i] = peer_ok(to, "map %lld %u", hi, SHARED_BYTES);
	}
}

/* Both read both buffers, and a write through an import is seen by the exporter, both ways. */
static void check_mutual(struct peer *ps, const long long *mine, const long long *theirs)
{
	char text[32];

	for (int i = 0; i < 2; i++) {
		snprintf(text, sizeof(text), "ok buffer-of-%d", i);
		cr_expect_str_eq(peer_cmd(&ps[i], -1, "read %lld", mine[i]), text);
		snprintf(text, sizeof(text), "ok buffer-of-%d", 1 - i);
		cr_expect_str_eq(peer_cmd(&ps[i], -1, "read %lld", theirs[i]), text);
	}
	peer_ok(&ps[1], "write %lld from-1", theirs[1]);
	cr_expect_str_eq(peer_cmd(&ps[0], -1, "read %lld", mine[0]), "ok from-1");
	peer_ok(&ps[0], "write %lld from-0", theirs[0]);
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", mine[1]), "ok from-0");
	peer_ok(&ps[0], "write %lld buffer-of-0", mine[0]);
	peer_ok(&ps[1], "write %lld buffer-of-1", mine[1]);
}

Test(group_share, members_that_export_and_import_each_other_release_both, .timeout = 120)
{
	struct peer ps[2], observer;
	long long mine[2], theirs[2], before, asleep;

	start_observer(&observer);
	start_mutual(ps, NULL, mine, theirs);
	before = group_free(&observer);
	for (int cycle = 0; cycle < 2; cycle++) {
		group("sleep", ps, 2);
		asleep = group_free(&observer);
		cr_expect_geq(asleep - before, 2LL * SHARED_BYTES, "cycle %d: both buffers released: "
			      "free %lld before, %lld asleep (%s)", cycle, before, asleep, o.out);
		cr_expect(!strstr(o.out, "stays resident"), "%s", o.out);
		group("wake", ps, 2);
		cr_expect_eq(group_free(&observer), before, "cycle %d: both are back", cycle);
		check_mutual(ps, mine, theirs);
	}
	end_sharing(ps, 2, &observer);
}

/* The same pair, member 0's release of its own export failing in the second phase (its second
 * cuMemRelease; the first released its import in the first phase): both are woken again at
 * once, each bringing back its exports before it fetches its imports, and both have their data
 * and still share it both ways. The next group sleep succeeds. */
Test(group_share, a_failure_in_the_second_phase_of_a_mutual_pair_undoes_both, .timeout = 120)
{
	const char *const *failing = env_and("SIMDEV_FAIL=cuMemRelease:2");
	const char *const *envs[2] = { failing, NULL };
	struct peer ps[2], observer;
	long long mine[2], theirs[2], before;
	char pids[64];

	start_observer(&observer);
	start_mutual(ps, envs, mine, theirs);
	before = group_free(&observer);
	snprintf(pids, sizeof(pids), "%d %d", (int)ps[0].pid, (int)ps[1].pid);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 60 sleep %s", pids);
	cr_expect_eq(o.code, 1, "the sleep failed: %s %s", o.out, o.err);
	cr_expect(strstr(o.err, "every process is as it was\n"), "none left behind: %s", o.err);
	for (int i = 0; i < 2; i++) {
		vmmctl_run(&o, se.run_dir, -1, "--json status %d", (int)ps[i].pid);
		cr_expect(strstr(o.out, "\"state\": \"awake\""), "member %d: %s", i, o.out);
	}
	cr_expect_eq(group_free(&observer), before, "both buffers resident, once each");
	check_mutual(ps, mine, theirs);
	group("sleep", ps, 2);
	cr_expect_geq(group_free(&observer) - before, 2LL * SHARED_BYTES, "released this time");
	group("wake", ps, 2);
	check_mutual(ps, mine, theirs);
	end_sharing(ps, 2, &observer);
}

/* The program's value of p's one shared handle, from its status (app_share record). */
static unsigned long long shared_handle_value(struct peer *p)
{
	char sock[600], reply[8192];
	const char *rec, *h;

	snprintf(sock, sizeof(sock), "%s/%d.sock", se.run_dir, (int)p->pid);
	cr_assert_gt(raw_request(sock, "vmmshim/1 status\n", 17, false, 0, reply, sizeof(reply),
				 30000), 0);
	rec = strstr(reply, "\napp_share ");
	h = rec ? strstr(rec, " handle=") : NULL;
	cr_assert(h, "no shared handle in: %s", reply);
	return strtoull(h + 8, NULL, 10);
}

/* Member 1 sleeps releasing its import of member 0's export, the request naming the exporter by
 * pid and start time as a group sleep does (app_release "H:PID:XH:START"); then it wakes alone
 * and fetches the memory from the exporter. With start_skew != 0 the start time names another
 * process (as when the exporter ended while asleep and its pid was reused). hi: the import's
 * handle value in member 1, h: the export's in member 0. */
static void import_sleep_wake(struct peer *ps, unsigned long long hi, unsigned long long h,
			      uint64_t start_skew)
{
	char sock[600], req[256], reply[4096];
	ssize_t n;

	snprintf(sock, sizeof(sock), "%s/%d.sock", se.run_dir, (int)ps[1].pid);
	snprintf(req, sizeof(req), "vmmshim/1 sleep app_release=\"%llu:%d:%llu:%llu\"\n", hi,
		 (int)ps[0].pid, h,
		 (unsigned long long)(proc_start_time(ps[0].pid) + start_skew));
	n = raw_request(sock, req, strlen(req), false, 0, reply, sizeof(reply), 30000);
	cr_assert_gt(n, 0, "no reply to %s", req);
	cr_assert(!strncmp(reply, "vmmshim/1 ok", 12), "%s: %s", req, reply);
	vmmctl_run(&o, se.run_dir, -1, "status %d", (int)ps[1].pid);
	cr_expect(strstr(o.out, "imported; released by a group sleep"), "%s", o.out);
	vmmctl_run(&o, se.run_dir, -1, "--timeout 30 wake %d", (int)ps[1].pid);
	cr_assert_eq(o.code, 0, "the importer wakes: %s %s", o.out, o.err);
}

/* The importer asks for its memory again only the process that exported it: while the start
 * time it was given matches, it fetches it and the two share one memory again; once the start
 * time names another process (the pid reused), it does not ask: it maps fresh memory in place
 * (its pointers do not fault), filled from the copy it took at the sleep, and the exporter's
 * memory is left alone. */
Test(group_share, an_importer_does_not_ask_a_process_that_reused_its_exporters_pid,
     .timeout = 120)
{
	struct peer ps[2], observer;
	long long h, hi, slot[2];
	unsigned long long values[2];   /* the programs' handle values, as status lists them */

	start_observer(&observer);
	for (int i = 0; i < 2; i++) {
		peer_start(&ps[i], env);
		peer_ok(&ps[i], "init");
	}
	h = peer_ok(&ps[0], "create %u posix", SHARED_BYTES);
	slot[0] = peer_ok(&ps[0], "map %lld %u", h, SHARED_BYTES);
	peer_ok(&ps[0], "write %lld shared-by-0", slot[0]);
	peer_ok(&ps[0], "export %lld", h);
	cr_assert_geq(ps[0].fd, 0, "the export carries a descriptor");
	hi = peer_cmd(&ps[1], ps[0].fd, "import")[0] == 'o' ? atol(ps[1].reply + 2) : -1;
	close(ps[0].fd);
	cr_assert_geq(hi, 0, "import: %s", ps[1].reply);
	slot[1] = peer_ok(&ps[1], "map %lld %u", hi, SHARED_BYTES);
	values[0] = shared_handle_value(&ps[0]);
	values[1] = shared_handle_value(&ps[1]);

	import_sleep_wake(ps, values[1], values[0], 0);
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", slot[1]), "ok shared-by-0",
			 "the exporter was asked: the same memory");
	peer_ok(&ps[1], "write %lld from-importer", slot[1]);
	cr_expect_str_eq(peer_cmd(&ps[0], -1, "read %lld", slot[0]), "ok from-importer");
	peer_ok(&ps[0], "write %lld shared-by-0", slot[0]);

	import_sleep_wake(ps, values[1], values[0], 1);
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", slot[1]), "ok shared-by-0",
			 "the importer's own copy fills the memory mapped in place");
	peer_ok(&ps[1], "write %lld from-importer", slot[1]);
	cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", slot[1]), "ok from-importer",
			 "fresh memory is mapped where the import was");
	cr_expect_str_eq(peer_cmd(&ps[0], -1, "read %lld", slot[0]), "ok shared-by-0",
			 "another process's memory was not fetched: the exporter's is its own");
	end_sharing(ps, 2, &observer);
}

#define MANY 32                  /* shared handles one member imports (once: about 10 fit) */
#define TOO_MANY 96              /* more than one sleep request can name (about 58) */
#define MANY_BYTES (2u << 20)

/* Member 0 exports n handles of MANY_BYTES ("buffer-K" in each), member 1 imports and maps
 * them all: slot[i][k] is handle k's address in member i. */
static void share_many(struct peer *ps, int n, long long (*slot)[TOO_MANY])
{
	for (int i = 0; i < 2; i++) {
		peer_start(&ps[i], env);
		peer_ok(&ps[i], "init");
	}
	for (int k = 0; k < n; k++) {
		long long h = peer_ok(&ps[0], "create %u posix", MANY_BYTES), hi;

		slot[0][k] = peer_ok(&ps[0], "map %lld %u", h, MANY_BYTES);
		peer_ok(&ps[0], "write %lld buffer-%d", slot[0][k], k);
		peer_ok(&ps[0], "export %lld", h);
		cr_assert_geq(ps[0].fd, 0, "the export carries a descriptor");
		hi = peer_cmd(&ps[1], ps[0].fd, "import")[0] == 'o' ? atol(ps[1].reply + 2) : -1;
		close(ps[0].fd);
		cr_assert_geq(hi, 0, "import %d: %s", k, ps[1].reply);
		slot[1][k] = peer_ok(&ps[1], "map %lld %u", hi, MANY_BYTES);
	}
}

/* Every import of the n reads its contents, and the memory is still one. */
static void check_many(struct peer *ps, int n, long long (*slot)[TOO_MANY])
{
	char text[64];

	for (int k = 0; k < n; k++) {
		snprintf(text, sizeof(text), "ok buffer-%d", k);
		cr_expect_str_eq(peer_cmd(&ps[1], -1, "read %lld", slot[1][k]), text);
	}
	peer_ok(&ps[1], "write %lld from-importer", slot[1][n - 1]);
	cr_expect_str_eq(peer_cmd(&ps[0], -1, "read %lld", slot[0][n - 1]), "ok from-importer",
			 "still one memory");
}

/* A member that imports many of its peer's handles (MANY, as NCCL's ranks may with many
 * buffers): the group sleep releases every one of them (the sleep request names them all), and
 * at wake each comes back with its contents, still shared. */
Test(group_share, a_member_importing_many_handles_releases_them_all, .timeout = 180)
{
	static long long slot[2][TOO_MANY];
	struct peer ps[2], observer;
	long long before, asleep;

	start_observer(&observer);
	share_many(ps, MANY, slot);
	before = group_free(&observer);
	group("sleep", ps, 2);
	asleep = group_free(&observer);
	cr_expect_geq(asleep - before, (long long)MANY * MANY_BYTES, "every shared handle "
		      "released: free %lld before, %lld asleep: %s", before, asleep, o.out);
	cr_expect(!strstr(o.out, "stays resident"), "%s", o.out);
	group("wake", ps, 2);
	cr_expect_eq(group_free(&observer), before, "the memory is back, once");
	check_many(ps, MANY, slot);
	end_sharing(ps, 2, &observer);
}

/* More imports than one sleep request can name: as many as fit are released, each of the rest
 * stays resident and vmmctl's line for it says why; every byte is intact after the wake. */
Test(group_share, imports_beyond_a_requests_room_stay_resident_and_are_named, .timeout = 240)
{
	static long long slot[2][TOO_MANY];
	struct peer ps[2], observer;
	long long before, asleep;
	int released = 0, left_out = 0;

	start_observer(&observer);
	share_many(ps, TOO_MANY, slot);
	before = group_free(&observer);
	group("sleep", ps, 2);
	asleep = group_free(&observer);
	for (const char *p = o.out; (p = strstr(p, "\nshared ")); p++) {
		const char *end = strchr(p + 1, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (memmem(p, len, "released by the group sleep", 27))
			released++;
		else if (memmem(p, len, "too many shared handles for one sleep request", 45))
			left_out++;
	}
	cr_expect_eq(released + left_out, TOO_MANY, "one line per memory: %s", o.out);
	cr_expect_gt(released, 10, "as many as fit are released: %s", o.out);
	cr_expect_gt(left_out, 0, "%s", o.out);
	cr_expect_eq(asleep - before, (long long)released * MANY_BYTES,
		     "the memory named as released is what was freed");
	group("wake", ps, 2);
	cr_expect_eq(group_free(&observer), before, "the memory is back, once");
	check_many(ps, TOO_MANY, slot);
	end_sharing(ps, 2, &observer);
}
