/* The pure parts of the control plane, case by case: the wire format (requests, records, the
 * writer's escaping and caps), the socket folder rules, vmmctl's command line, what vmmctl trusts
 * (trust_decide, with the facts another user or another PID namespace would give) and how it
 * escapes what it prints. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "output.h"
#include "protocol.h"
#include "run_dir.h"
#include "trust.h"

static int parse(const char *s, proto_request *r)
{
	char why[160];

	return proto_parse_request(s, strlen(s), r, why, sizeof(why));
}

Test(wire, a_full_sleep_request)
{
	proto_request r;

	cr_assert_eq(parse("vmmshim/1 sleep tag=\"a%20b\" device=2 discard=true autowake=true "
			   "timeout_ms=500 drain_ms=250\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_SLEEP);
	cr_expect_eq(r.drain_ms, 250);
	cr_expect_str_eq(r.tag, "a b");
	cr_expect_eq(r.device, 2);
	cr_expect(r.discard && r.autowake);
	cr_expect_eq(r.timeout_ms, 500);
}

Test(wire, defaults_and_verbs)
{
	proto_request r;

	cr_assert_eq(parse("vmmshim/1 wake\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_WAKE);
	cr_expect_str_eq(r.tag, "");
	cr_expect_eq(r.device, -1);
	cr_expect(!r.discard);
	cr_assert_eq(parse("vmmshim/1 hello\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_HELLO);
	cr_assert_eq(parse("vmmshim/1 status device=-1 tag=\"x\"\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_STATUS);
	cr_assert_eq(parse("vmmshim/1 cancel timeout_ms=2500\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_CANCEL);
	cr_expect_eq(r.timeout_ms, 2500);
}

/* GPU sharing's requests: a peer's trim of one device, a sleep that says why (round trip). */
Test(wire, trim_and_a_sleep_with_a_reason)
{
	proto_request r = { .verb = PROTO_SLEEP, .device = 0, .autowake = true }, back;
	char line[PROTO_MAX_REQUEST + 1];

	cr_assert_eq(parse("vmmshim/1 trim device=3\n", &r), 0);
	cr_expect_eq(r.verb, PROTO_TRIM);
	cr_expect_eq(r.device, 3);
	cr_assert_eq(parse("vmmshim/1 trim\n", &r), 0);
	cr_expect_eq(r.device, -1);
	memset(&r, 0, sizeof(r));
	r.verb = PROTO_SLEEP;
	r.autowake = true;
	snprintf(r.reason, sizeof(r.reason), "pid 7 (priority 1) needed 4096 bytes on GPU-x");
	cr_assert_gt(proto_format_request(&r, line, sizeof(line)), 0);
	cr_assert_eq(parse(line, &back), 0, "%s", line);
	cr_expect_str_eq(back.reason, r.reason);
	cr_expect(back.autowake);
}

Test(wire, a_group_sleep_names_its_share_group)
{
	proto_request r, back;
	char line[PROTO_MAX_REQUEST + 1];

	cr_assert_eq(parse("vmmshim/1 sleep share_group=\"4101,4102,77\"\n", &r), 0);
	cr_expect_str_eq(r.share_group, "4101,4102,77");
	cr_assert_eq(parse("vmmshim/1 sleep\n", &r), 0);
	cr_expect_str_eq(r.share_group, "", "a single sleep names no group");
	memset(&r, 0, sizeof(r));
	r.verb = PROTO_SLEEP;
	r.device = -1;
	snprintf(r.share_group, sizeof(r.share_group), "12,13");
	cr_assert_gt(proto_format_request(&r, line, sizeof(line)), 0);
	cr_expect(strstr(line, " share_group=\"12,13\""), "%s", line);
	cr_assert_eq(parse(line, &back), 0, "%s", line);
	cr_expect_str_eq(back.share_group, "12,13");
}

Test(wire, a_group_sleep_names_the_shared_handles_it_releases)
{
	proto_request r, back;
	char line[PROTO_MAX_REQUEST + 1];

	cr_assert_eq(parse("vmmshim/1 sleep app_release=\"11,12:4101:13\"\n", &r), 0);
	cr_expect_str_eq(r.app_release, "11,12:4101:13");
	/* An import may carry its exporter's start time, to tell a reused pid. */
	cr_assert_eq(parse("vmmshim/1 sleep app_release=\"11,12:4101:13:987654\"\n", &r), 0);
	cr_expect_str_eq(r.app_release, "11,12:4101:13:987654");
	memset(&r, 0, sizeof(r));
	r.verb = PROTO_SLEEP;
	r.device = -1;
	snprintf(r.app_release, sizeof(r.app_release), "11947282573287456768:9:42");
	cr_assert_gt(proto_format_request(&r, line, sizeof(line)), 0);
	cr_assert_eq(parse(line, &back), 0, "%s", line);
	cr_expect_str_eq(back.app_release, r.app_release);
	/* A list longer than one value (40 imports with start times) goes in several keys and
	 * comes back whole. */
	memset(&r, 0, sizeof(r));
	r.verb = PROTO_SLEEP;
	r.device = -1;
	for (int i = 0, len = 0; i < 40; i++)
		len += snprintf(r.app_release + len, sizeof(r.app_release) - (size_t)len,
				"%s%d:4101:%d:987654321", i ? "," : "", 94000000 + i, 95000000 + i);
	cr_assert_gt(strlen(r.app_release), PROTO_VALUE_MAX);
	cr_assert_gt(proto_format_request(&r, line, sizeof(line)), 0);
	cr_expect(strstr(line, " app_release2=\""), "%s", line);
	cr_assert_eq(parse(line, &back), 0, "%s", line);
	cr_expect_str_eq(back.app_release, r.app_release);
	/* app_open names a handle value, which may pass LLONG_MAX (quoted). */
	memset(&r, 0, sizeof(r));
	r.verb = PROTO_APP_OPEN;
	r.device = -1;
	r.app_handle = 0xA5F0000000000001ull;
	cr_assert_gt(proto_format_request(&r, line, sizeof(line)), 0);
	cr_assert_eq(parse(line, &back), 0, "%s", line);
	cr_expect_eq(back.verb, PROTO_APP_OPEN);
	cr_expect_eq(back.app_handle, 0xA5F0000000000001ull);
}

Test(wire, refusals_say_why)
{
	static const char *const bad[][2] = {
		{ "vmmshim/1 hello", "newline" },
		{ "vmmshim/3 hello\n", "version" },
		{ "vmm hello\n", "not a vmmshim request" },
		{ "vmmshim/1 hello tag=\"x\"\n", "does not take" },
		{ "vmmshim/1 sleep device=16\n", "device" },
		{ "vmmshim/1 sleep tag=\"\"\n", "tag" },
		{ "vmmshim/1 sleep tag=\"0123456789012345678901234567890123\"\n", "tag" },
		{ "vmmshim/1 sleep timeout_ms=-5\n", "timeout_ms" },
		{ "vmmshim/1 sleep discard=1\n", "true or false" },
		{ "vmmshim/1 sleep discard=true discard=false\n", "twice" },
		{ "vmmshim/1 sleep tag=\"%4\"\n", "escape" },
		{ "vmmshim/1 sleep tag=\"%00\"\n", "NUL" },
		{ "vmmshim/1 sleep \n", "" },
		{ "vmmshim/1 hello\nvmmshim/1 hello\n", "after" },
		{ "vmmshim/1 cancel tag=\"x\"\n", "does not take" },
		{ "vmmshim/1 cancel device=0\n", "does not take" },
		{ "vmmshim/1 wake drain_ms=100\n", "does not take" },
		{ "vmmshim/1 sleep drain_ms=-1\n", "drain_ms" },
		{ "vmmshim/1 trim tag=\"x\"\n", "does not take" },
		{ "vmmshim/1 wake reason=\"x\"\n", "does not take" },
		{ "vmmshim/1 sleep reason=\"\"\n", "reason" },
		{ "vmmshim/1 sleep reason=5\n", "reason" },
		{ "vmmshim/1 sleep reason=\"%01\"\n", "reason" },
		{ "vmmshim/1 wake share_group=\"1\"\n", "does not take" },
		{ "vmmshim/1 sleep share_group=\"\"\n", "share_group" },
		{ "vmmshim/1 sleep share_group=\"1,,2\"\n", "share_group" },
		{ "vmmshim/1 sleep share_group=\"0\"\n", "share_group" },
		{ "vmmshim/1 sleep share_group=\"12,x\"\n", "share_group" },
		{ "vmmshim/1 sleep share_group=\"12345678901\"\n", "share_group" },
		{ "vmmshim/1 sleep share_group=12\n", "share_group" },
		{ "vmmshim/1 wake app_release=\"1\"\n", "does not take" },
		{ "vmmshim/1 sleep app_release=\"\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1,\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1:2\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1::2:3\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1:2:x\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1:2:3:4:5\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release=\"1:2:3:\"\n", "app_release" },
		{ "vmmshim/1 sleep app_release2=\"1:2:3:\"\n", "app_release2" },
		{ "vmmshim/1 sleep app_release9=\"1\"\n", "does not take" },
		{ "vmmshim/1 sleep app_release1=\"1\"\n", "does not take" },
		{ "vmmshim/1 sleep app_release=\"1\" app_release=\"2\"\n", "twice" },
		{ "vmmshim/1 app_open\n", "handle" },
		{ "vmmshim/1 app_open handle=5\n", "handle" },
		{ "vmmshim/1 app_open handle=\"0\"\n", "handle" },
		{ "vmmshim/1 app_open handle=\"99999999999999999999999\"\n", "handle" },
		{ "vmmshim/1 status handle=\"5\"\n", "does not take" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		proto_request r;
		char why[160] = "";

		int rc = proto_parse_request(bad[i][0], strlen(bad[i][0]), &r, why, sizeof(why));

		cr_expect_eq(rc, -1, "accepted: %s", bad[i][0]);
		cr_expect(why[0] && strstr(why, bad[i][1]), "'%s': reason '%s' lacks '%s'",
			  bad[i][0], why, bad[i][1]);
	}
}

Test(wire, format_is_exact_and_round_trips)
{
	proto_request r = { .verb = PROTO_SLEEP, .device = 1, .discard = true }, back;
	char line[PROTO_MAX_REQUEST + 1];
	size_t n;

	snprintf(r.tag, sizeof(r.tag), "kv \"cache\"=1%%");
	n = proto_format_request(&r, line, sizeof(line));
	cr_assert_gt(n, 0);
	cr_expect_str_eq(line, "vmmshim/1 sleep tag=\"kv%20%22cache%22%3D1%25\" device=1 "
			       "discard=true autowake=false\n");
	cr_assert_eq(parse(line, &back), 0);
	cr_expect_str_eq(back.tag, r.tag);
	cr_expect_eq(proto_format_request(&r, line, 20), 0, "too small a buffer is refused");
	r.device = 40;
	cr_expect_eq(proto_format_request(&r, line, sizeof(line)), 0, "a bad device is refused");
}

Test(wire, records_and_their_getters)
{
	const char *line = "device backend=\"cuda\" dev=0 live=1234 seconds=0.5 held=true neg=-3";
	proto_record r;
	char why[160];
	uint64_t u;
	double d;
	bool b;

	cr_assert_eq(proto_parse_record(line, strlen(line), &r, why, sizeof(why)), 0, "%s", why);
	cr_expect_str_eq(r.kind, "device");
	cr_expect_eq(r.nfields, 6);
	cr_expect_str_eq(proto_record_str(&r, "backend"), "cuda");
	cr_expect(proto_record_u64(&r, "live", &u) && u == 1234);
	cr_expect(!proto_record_u64(&r, "neg", &u), "negative is not a u64");
	cr_expect(!proto_record_u64(&r, "backend", &u), "a string is not a number");
	cr_expect(proto_record_double(&r, "seconds", &d) && d == 0.5);
	cr_expect(proto_record_bool(&r, "held", &b) && b);
	cr_expect_null(proto_record_str(&r, "missing"));
	cr_expect_str_eq(proto_parse_header("vmmshim/1 already", 17), "already");
	cr_expect_null(proto_parse_header("vmmshim/1 maybe", 15));
	cr_expect_null(proto_parse_header("vmmshim/2 ok", 12));
}

Test(wire, the_writer_escapes_and_frames)
{
	proto_writer w;

	proto_writer_init(&w);
	proto_error_response(&w, PROTO_ERR_OOM, "need 2 GiB, have 1 GiB");
	cr_assert(!w.failed);
	cr_expect_str_eq(w.buf,
			 "vmmshim/1 error\n"
			 "error status=\"oom\" message=\"need%202%20GiB,%20have%201%20GiB\"\n"
			 "end\n");
	proto_writer_free(&w);
	proto_writer_init(&w);
	proto_header(&w, "ok");
	for (int i = 0; i < 100000 && !w.failed; i++) {
		proto_record_begin(&w, "tag");
		proto_put_str(&w, "name", "0123456789012345678901234567890");
		proto_record_end(&w);
	}
	cr_expect(w.failed, "a reply is capped at %u bytes", PROTO_MAX_RESPONSE);
	cr_expect_leq(w.len, PROTO_MAX_RESPONSE);
	proto_writer_free(&w);
	/* ...and at PROTO_MAX_RECORDS records, however small. */
	proto_writer_init(&w);
	proto_header(&w, "ok");
	for (int i = 0; i < PROTO_MAX_RECORDS; i++) {
		proto_record_begin(&w, "t");
		proto_record_end(&w);
	}
	cr_expect(!w.failed);
	proto_record_begin(&w, "t");
	cr_expect(w.failed, "record %d is refused", PROTO_MAX_RECORDS + 1);
	proto_writer_free(&w);
}

Test(run_dir, where_the_sockets_are)
{
	char d[256], p[256];

	cr_assert_eq(run_dir_resolve("/run/x", "/run/user/5", 5, d, sizeof(d)), 0);
	cr_expect_str_eq(d, "/run/x");
	cr_assert_eq(run_dir_resolve(NULL, "/run/user/5", 5, d, sizeof(d)), 0);
	cr_expect_str_eq(d, "/run/user/5/vmmshim");
	cr_assert_eq(run_dir_resolve("relative", "also-relative", 5, d, sizeof(d)), 0);
	cr_expect_str_eq(d, "/tmp/vmmshim-5");
	cr_expect_eq(run_dir_resolve("/a/long/path", NULL, 5, d, 8), -1);
	cr_assert_eq(run_dir_socket_path("/tmp/x", 42, p, sizeof(p)), 0);
	cr_expect_str_eq(p, "/tmp/x/42.sock");
	memset(d, 'a', 200);
	d[0] = '/';
	d[200] = '\0';
	cr_expect_eq(run_dir_socket_path(d, 42, p, sizeof(p)), -1, "longer than sun_path");
}

Test(run_dir, only_a_private_folder_is_used)
{
	char base[] = "/tmp/vmmshim-wire-XXXXXX", dir[300], link[300], why[256];

	cr_assert(mkdtemp(base));
	snprintf(dir, sizeof(dir), "%s/run", base);
	cr_expect_eq(run_dir_prepare(dir, why, sizeof(why)), 0, "%s", why);
	struct stat st;
	cr_assert_eq(stat(dir, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0700);
	cr_expect(run_dir_trusted(dir, geteuid()));
	chmod(dir, 0770);
	cr_expect_eq(run_dir_prepare(dir, why, sizeof(why)), -1);
	cr_expect(strstr(why, "mode 770"), "%s", why);
	chmod(dir, 0700);
	snprintf(link, sizeof(link), "%s/link", base);
	cr_assert_eq(symlink(dir, link), 0);
	cr_expect_eq(run_dir_prepare(link, why, sizeof(why)), -1, "a symlink is refused");
	cr_expect(!run_dir_trusted(link, geteuid()));
	if (geteuid() == 0) {
		cr_assert_eq(chown(dir, 65534, 65534), 0);
		cr_expect_eq(run_dir_prepare(dir, why, sizeof(why)), -1, "another user's folder");
		cr_expect(strstr(why, "65534"), "%s", why);
	}
	unlink(link);
	rmdir(dir);
	rmdir(base);
}

static int cli(const char *line, vmmctl_args *a)
{
	char buf[512], *argv[32], *save = NULL, why[256];
	int argc = 0;

	snprintf(buf, sizeof(buf), "vmmctl %s", line);
	for (char *t = strtok_r(buf, " ", &save); t && argc < 31; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	return cli_parse(argc, argv, a, why, sizeof(why));
}

Test(cli, commands_and_options)
{
	vmmctl_args a;

	cr_assert_eq(cli("sleep 42 --tag=kv --device 1 --discard --autowake --json --timeout 2.5",
			 &a), 0);
	cr_expect_eq(a.cmd, CMD_SLEEP);
	cr_expect_eq(a.pid, 42);
	cr_expect_str_eq(a.tag, "kv");
	cr_expect_eq(a.device, 1);
	cr_expect(a.discard && a.autowake && a.json);
	cr_expect_eq(a.timeout, 2.5);
	cr_assert_eq(cli("--json wake 7", &a), 0);
	cr_expect_eq(a.cmd, CMD_WAKE);
	cr_expect_eq(a.device, -1);
	cr_expect_str_eq(a.tag, "");
	cr_assert_eq(cli("list", &a), 0);
	cr_expect_eq(a.cmd, CMD_LIST);
	cr_assert_eq(cli("status 1 --help", &a), 0);
	cr_expect_eq(a.cmd, CMD_HELP);
	cr_assert_eq(cli("sleep 7 8 9 --autowake", &a), 0);
	cr_expect_eq(a.cmd, CMD_SLEEP);
	cr_expect_eq(a.npids, 3);
	cr_expect(a.pid == 7 && a.pids[1] == 8 && a.pids[2] == 9 && a.autowake);
	cr_assert_eq(cli("wake 7 8", &a), 0);
	cr_expect_eq(a.npids, 2);
	cr_assert_eq(cli("cancel 9 --timeout 3", &a), 0);
	cr_expect_eq(a.cmd, CMD_CANCEL);
	cr_expect_eq(a.pid, 9);
	cr_assert_eq(cli("metrics --output /x/y.prom --label pod=p-1 --label job=7", &a), 0);
	cr_expect_eq(a.cmd, CMD_METRICS);
	cr_expect_str_eq(a.output, "/x/y.prom");
	cr_assert_eq(a.nlabels, 2);
	cr_expect_str_eq(a.labels[1], "job=7");
	cr_expect(!a.watch);
	cr_assert_eq(cli("list --json --watch --interval 0.5 --count 3", &a), 0);
	cr_expect(a.watch && a.json);
	cr_expect_eq(a.interval, 0.5);
	cr_expect_eq(a.count, 3);
	cr_assert_eq(cli("status 5 --watch", &a), 0);
	cr_expect_eq(a.interval, 2.0);
	cr_assert_eq(cli("wake 5 --progress", &a), 0);
	cr_expect(a.progress);
}

Test(cli, usage_errors)
{
	static const char *const bad[] = {
		"", "sleep", "sleep 0", "sleep -4", "sleep 12x", "status 1 2", "cancel 1 2",
		"sleep 1 1", "sleep 1 2 --tag x", "sleep 1 2 --device 0", "sleep 1 2 --discard",
		"wake 1 2x", "list 5",
		"wake 1 --discard", "list --tag x", "status 1 --device 16", "status 1 --device",
		"status 1 --timeout 0", "status 1 --timeout abc", "sleep 1 --tag=",
		"sleep 1 --json=yes", "sleep 1 --frob", "dance 1",
		"sleep 1 --tag 0123456789012345678901234567890123",
		"cancel", "cancel 1 --tag x", "cancel 1 --device 0", "cancel 1 --discard",
		"list --progress", "status 1 --progress", "sleep 1 --watch", "cancel 1 --watch",
		"list --interval 1", "list --watch --interval 0.1", "list --watch --count 0",
		"list --output f", "metrics --output", "metrics --output=", "metrics --label x",
		"metrics --label pid=1", "metrics --label 9a=1", "metrics --label __a=1",
		"metrics --label =v", "metrics 4",
		/* one element: more labels than vmmctl takes (parentheses: clang -Wstring-concatenation) */
		("metrics --label a=1 --label b=1 --label c=1 --label d=1 --label e=1 --label f=1 "
		 "--label g=1 --label h=1 --label i=1"),
	};
	vmmctl_args a;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(cli(bad[i], &a), -1, "accepted: vmmctl %s", bad[i]);
}

/* What a genuine server in the caller's own private folder looks like. */
static trust_facts genuine(void)
{
	return (trust_facts){
		.caller = 1000, .dir_is_dir = true, .dir_owner = 1000, .dir_mode = 040700,
		.dir_named_uid = 1000, .peer_uid = 1000, .peer_pid = 4242, .name_pid = 4242,
		.same_pidns = 1,
	};
}

static void refused(const trust_facts *f, const char *want)
{
	char why[256] = "";

	cr_expect_eq(trust_decide(f, why, sizeof(why)), -1, "believed (want: %s)", want);
	cr_expect(strstr(why, want), "reason '%s' lacks '%s'", why, want);
}

Test(trust, a_genuine_server_is_believed)
{
	trust_facts f = genuine();
	char why[256] = "";

	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
	f.caller = 0; /* root drives everyone */
	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
	f.dir_named_uid = -1; /* VMMSHIM_RUN_DIR: any name */
	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
}

/* Containers: SO_PEERCRED translates pids, so the pid in the name cannot be compared with the
 * peer's across PID namespaces; such a server is still believed. */
Test(trust, another_pid_namespace_keeps_working)
{
	trust_facts f = genuine();
	char why[256] = "";

	f.peer_pid = 981234; /* the host's view of the container's pid 4242 */
	f.same_pidns = 0;
	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
	f.peer_pid = 0;      /* a server in a parent namespace: not visible */
	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
	f.peer_pid = 77;
	f.same_pidns = -1;   /* cannot tell (its /proc entry is not readable) */
	cr_expect_eq(trust_decide(&f, why, sizeof(why)), 0, "%s", why);
}

Test(trust, impostors_are_refused)
{
	trust_facts f = genuine();

	/* Another user's server in my folder (only root could have put it there, or the folder
	 * is not private). */
	f.peer_uid = 1001;
	refused(&f, "runs as uid 1001");
	/* Root walking /tmp/vmmshim-*: another user's server in a folder of a third user. */
	f = genuine();
	f.caller = 0;
	f.peer_uid = 1001;
	refused(&f, "runs as uid 1001");
	/* A folder named for uid 1000 that uid 1001 made. */
	f = genuine();
	f.caller = 0;
	f.dir_owner = f.peer_uid = 1001;
	refused(&f, "named for uid 1000");
	/* A server posing as another process (same PID namespace). */
	f = genuine();
	f.peer_pid = 31337;
	refused(&f, "not pid 4242");
	/* Folders vmmctl does not use: another user's (for a non-root caller), writable by
	 * others, not a real folder. */
	f = genuine();
	f.dir_owner = f.peer_uid = 1001;
	f.dir_named_uid = -1;
	refused(&f, "not to you");
	f = genuine();
	f.dir_mode = 040777;
	refused(&f, "group or others");
	f = genuine();
	f.dir_is_dir = false;
	refused(&f, "not a real folder");
}

Test(trust, folder_names_say_whose_they_are)
{
	cr_expect_eq(trust_dir_named_uid("/tmp/vmmshim-1000"), 1000);
	cr_expect_eq(trust_dir_named_uid("/run/user/42/vmmshim"), 42);
	cr_expect_eq(trust_dir_named_uid("/tmp/vmmshim-1000x"), -1);
	cr_expect_eq(trust_dir_named_uid("/tmp/vmmshim-ctltest-abc"), -1);
	cr_expect_eq(trust_dir_named_uid("/run/user/42/other"), -1);
	cr_expect_eq(trust_dir_named_uid("/srv/run"), -1);
}

Test(output, printed_text_is_escaped)
{
	cr_expect_str_eq(out_safe("plain text 1.5 GiB"), "plain text 1.5 GiB");
	cr_expect_str_eq(out_safe("a\x1b[31mb\x07"), "a\\x1b[31mb\\x07");
	cr_expect_str_eq(out_safe("line\nbreak\r\x7f\xc3\xa9\\"),
			 "line\\x0abreak\\x0d\\x7f\\xc3\\xa9\\x5c");
}
