/* A group sleep releases the memory its members share through the program's own VMM handles
 * (NCCL's buffers) when every holder is a member: the importers release their handles in the
 * first phase (nothing to copy: the exporter has the contents), the exporter copies its handle
 * out and releases it in the second, once no importer can write to it any more. Each member's
 * sleep names the handles (app_release); the shims re-share them at wake (docs/vmmctl.md). */
#include "group_release.h"

#include <stdio.h>
#include <string.h>

#include "proc_start.h"

static int member_of(const client_target *t, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		if (t[i].pid == pid)
			return i;
	return -1;
}

/* Memory mi of the matched shares, as a release_memory; false when some holder keeps it. */
static bool candidate(const client_target *t, int n, const struct share *s, int ns,
		      const struct memory *m, int mi, struct release_memory *out)
{
	*out = (struct release_memory){ .exporter = -1 };
	if (m->kcmp_errno || m->noutside)
		return false;
	for (int k = 0; k < ns; k++) {
		int who;

		if (s[k].memory != mi)
			continue;
		who = member_of(t, n, s[k].pid);
		if (who < 0 || s[k].program_fds != 0 || s[k].released || !s[k].nfds)
			return false;
		if (s[k].exporter) {
			if (out->exporter >= 0)
				return false;   /* exported twice: not one memory of one process */
			out->exporter = who;
			out->handle = s[k].handle;
			out->exporter_start = proc_start_time(s[k].pid);
		} else if (out->nimporters < GROUP_RELEASE_MAX_IMPORTERS) {
			out->importer[out->nimporters] = who;
			out->import_handle[out->nimporters++] = s[k].handle;
		} else {
			return false;
		}
	}
	for (int j = 0; j < out->nimporters; j++)
		if (out->importer[j] == out->exporter)
			return false;   /* imported by its own exporter: one member, both phases */
	return out->exporter >= 0 && out->nimporters > 0;
}

/* Member's entry for import j of rm ("H:PID:XH:START") or, j < 0, for rm's export ("XH"), in
 * one; returns its length. The exporter's start time goes with its pid: at wake the importer
 * asks that process only, not a later one that reused the pid. */
static size_t entry(const struct release_memory *rm, int j, const client_target *t, char *one,
		    size_t cap)
{
	int len;

	if (j < 0)
		return (size_t)snprintf(one, cap, "%llu", (unsigned long long)rm->handle);
	len = snprintf(one, cap, "%llu:%ld:%llu", (unsigned long long)rm->import_handle[j],
		       (long)t[rm->exporter].pid, (unsigned long long)rm->handle);
	if (rm->exporter_start)
		len += snprintf(one + len, cap - (size_t)len, ":%llu",
				(unsigned long long)rm->exporter_start);
	return (size_t)len;
}

/* Keep out each memory that some member's app_release has no more room for (imports and
 * exports are separate requests): it stays resident, and the report says why. */
static void fit_requests(struct group_release *g, const client_target *t)
{
	static size_t imports[VMMCTL_MAX_GROUP], exports[VMMCTL_MAX_GROUP];
	const size_t cap = PROTO_APP_RELEASE_MAX - 1;
	char one[96];

	memset(imports, 0, sizeof(imports));
	memset(exports, 0, sizeof(exports));
	for (int k = 0; k < g->nmem; k++) {
		struct release_memory *rm = &g->mem[k];
		bool fits = true;

		if (rm->dropped)
			continue;
		for (int j = 0; j < rm->nimporters && fits; j++)
			fits = imports[rm->importer[j]] + 1 + entry(rm, j, t, one, sizeof(one)) <= cap;
		fits = fits && exports[rm->exporter] + 1 + entry(rm, -1, t, one, sizeof(one)) <= cap;
		if (!fits) {
			rm->dropped = rm->over = true;
			continue;
		}
		for (int j = 0; j < rm->nimporters; j++)
			imports[rm->importer[j]] += 1 + entry(rm, j, t, one, sizeof(one));
		exports[rm->exporter] += 1 + entry(rm, -1, t, one, sizeof(one));
	}
}

void group_release_plan(const client_target *t, const client_reply *const *r, int n,
			const bool *second, struct group_release *g)
{
	static struct share s[MAX_SHARES];
	static struct memory m[MAX_SHARES];
	int ns = 0, nm;

	memset(g, 0, sizeof(*g));
	for (int i = 0; i < n; i++)
		if (r[i])
			ns = group_shares_take(t[i].pid, r[i], s, ns);
	nm = group_shares_match(s, ns, m);
	group_shares_outside(t, n, s, ns, m, nm);
	for (int i = 0; i < nm; i++)
		if (candidate(t, n, s, ns, &m[i], i, &g->mem[g->nmem]))
			g->nmem++;
	/* An importer must have drained before the exporter copies: it sleeps in the first phase.
	 * One that exports legacy-IPC memory sleeps only in the second, beside the exporter. */
	for (int i = 0; i < g->nmem; i++) {
		struct release_memory *rm = &g->mem[i];

		for (int j = 0; j < rm->nimporters; j++)
			rm->dropped = rm->dropped || second[rm->importer[j]];
	}
	fit_requests(g, t);
	for (int i = 0; i < g->nmem; i++)
		if (!g->mem[i].dropped)
			g->exporter[g->mem[i].exporter] = true;
	for (int i = 0; i < g->nmem; i++)
		for (int j = 0; !g->mem[i].dropped && j < g->mem[i].nimporters; j++)
			g->importer[g->mem[i].importer[j]] = true;
}

/* Does reply r list the import `handle` as released by a group sleep? */
static bool import_released(const client_reply *r, uint64_t handle)
{
	for (int j = 0; r && j < r->nrecords; j++) {
		const proto_record *rec = r->records[j];
		const char *role = proto_record_str(rec, "role");
		uint64_t h = 0;
		bool released = false;

		if (!strcmp(rec->kind, "app_share") && role && !strcmp(role, "import") &&
		    proto_record_u64(rec, "handle", &h) && h == handle &&
		    proto_record_bool(rec, "released", &released))
			return released;
	}
	return false;
}

void group_release_confirm(struct group_release *g, const client_reply *const *r, int n)
{
	for (int k = 0; k < g->nmem; k++) {
		struct release_memory *rm = &g->mem[k];

		rm->confirmed = !rm->dropped;
		for (int j = 0; j < rm->nimporters && rm->confirmed; j++)
			rm->confirmed = rm->importer[j] < n &&
					import_released(r[rm->importer[j]], rm->import_handle[j]);
	}
}

static void append(char *out, size_t cap, const char *one)
{
	size_t len = strlen(out), k = strlen(one);

	if (len + (len ? 1 : 0) + k < cap)
		snprintf(out + len, cap - len, "%s%s", len ? "," : "", one);
}

void group_release_request(const struct group_release *g, int i, const client_target *t,
			   bool exports, char *out, size_t cap)
{
	char one[96];

	out[0] = '\0';
	for (int k = 0; k < g->nmem; k++) {
		const struct release_memory *rm = &g->mem[k];

		if (rm->dropped)
			continue;
		for (int j = 0; j < rm->nimporters && !exports; j++) {
			if (rm->importer[j] != i)
				continue;
			entry(rm, j, t, one, sizeof(one));
			append(out, cap, one);
		}
		if (exports && rm->exporter == i && rm->confirmed) {
			entry(rm, -1, t, one, sizeof(one));
			append(out, cap, one);
		}
	}
}
