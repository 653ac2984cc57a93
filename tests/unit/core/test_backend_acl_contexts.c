/* The Ascend backend's synchronize visits every context the program created (aclrtCreateContext,
 * reported as the shim does), since aclrtSynchronizeDevice waits for the current context only,
 * and leaves the calling thread in the context it had. simdev's ACL work runs at once, so what
 * is checked is which contexts were synchronized (simdev counts them per context). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "backend/acl_api.h"
#include "backend/backend.h"
#include "helpers.h"

unsigned long simdev_acl_context_syncs(void *context, int dev);

#define ACL_OK(call) cr_assert_eq((call), ACL_SUCCESS, "%s failed", #call)

struct run {
	vmm_backend *be;
	vmm_status st;
	aclError after;      /* aclrtGetCurrentContext afterwards */
	aclrtContext current;
};

/* A thread with no context of its own, as the control thread that sleeps a program. */
static void *sync_from_fresh_thread(void *arg)
{
	struct run *r = arg;

	r->st = r->be->synchronize(r->be, 0, NULL);
	r->after = aclrtGetCurrentContext(&r->current);
	return NULL;
}

Test(backend_acl_contexts, synchronize_visits_every_created_context)
{
	aclrtContext a, b, c1, cur;
	struct run r = { .be = NULL };
	struct tctx t;
	pthread_t th;

	setenv("VMM_TEST_BACKEND", "acl", 1);
	t_simdev_env(NULL, "2", NULL);
	t_open(&t, NULL);
	ACL_OK(aclrtCreateContext(&a, 0));
	ACL_OK(aclrtCreateContext(&c1, 1));
	ACL_OK(aclrtCreateContext(&b, 0)); /* current here */
	cr_assert_eq(vmm_context_created(VMM_CTX_ACL, a, 0), 0);
	cr_assert_eq(vmm_context_created(VMM_CTX_ACL, c1, 1), 0);
	cr_assert_eq(vmm_context_created(VMM_CTX_ACL, b, 0), 0);
	r.be = t.be;
	cr_assert_eq(pthread_create(&th, NULL, sync_from_fresh_thread, &r), 0);
	pthread_join(th, NULL);
	cr_expect_eq(r.st, VMM_OK);
	cr_expect_geq(simdev_acl_context_syncs(a, 0), 1, "context a was not synchronized");
	cr_expect_geq(simdev_acl_context_syncs(b, 0), 1, "context b was not synchronized");
	cr_expect_eq(simdev_acl_context_syncs(c1, 1), 0, "device 1's context is not device 0's");
	cr_expect_geq(simdev_acl_context_syncs(NULL, 0), 1, "the default context");
	cr_expect(r.after != ACL_SUCCESS || (r.current != a && r.current != b),
		  "the control thread was left in a program's context");
	/* From a thread in a context of its own: it keeps it. */
	cr_assert_eq(t.be->synchronize(t.be, 0, NULL), VMM_OK);
	ACL_OK(aclrtGetCurrentContext(&cur));
	cr_expect_eq(cur, b);
	cr_expect_geq(simdev_acl_context_syncs(a, 0), 2);
	/* A context destroyed as the shim brackets it is no longer visited. */
	vmm_context_destroy_begin(VMM_CTX_ACL, a);
	ACL_OK(aclrtDestroyContext(a));
	vmm_context_destroy_end(VMM_CTX_ACL, a, true);
	cr_assert_eq(t.be->synchronize(t.be, 0, NULL), VMM_OK);
	cr_expect_eq(simdev_acl_context_syncs(a, 0), 2);
	t_close(&t);
}

int simdev_acl_device_refs(int dev);

struct fresh_call {
	vmm_backend *be;
	vmm_status st;
};

static void *mem_info_from_fresh_thread(void *arg)
{
	struct fresh_call *c = arg;
	size_t free_bytes, total;

	c->st = c->be->mem_info(c->be, 1, &free_bytes, &total, NULL);
	return NULL;
}

/* aclrtSetDevice counts references, and only the program's aclrtResetDevice calls may bring the
 * count to 0: the backend's calls on another device than the thread's must neither add one each
 * time (the program's last reset would then never release the device) nor leave the thread in
 * that device's default context instead of the program's own. */
Test(backend_acl_contexts, calls_on_another_device_keep_the_threads_context_and_count_once)
{
	size_t free_bytes, total, gran;
	aclrtContext own, cur;
	struct tctx t;
	int refs0, refs1;

	setenv("VMM_TEST_BACKEND", "acl", 1);
	t_simdev_env(NULL, "2", NULL);
	t_open(&t, NULL);
	ACL_OK(aclrtCreateContext(&own, 0)); /* the program's thread, in a context of its own */
	cr_assert_eq(t.be->mem_info(t.be, 1, &free_bytes, &total, NULL), VMM_OK);
	refs0 = simdev_acl_device_refs(0);
	refs1 = simdev_acl_device_refs(1);
	cr_expect_geq(refs1, 1, "device 1 was used without aclrtSetDevice");
	for (int i = 0; i < 100; i++) {
		cr_assert_eq(t.be->mem_info(t.be, 1, &free_bytes, &total, NULL), VMM_OK);
		cr_assert_eq(t.be->granularity(t.be, 1, &gran, NULL), VMM_OK);
		cr_assert_eq(t.be->synchronize(t.be, 1, NULL), VMM_OK);
	}
	ACL_OK(aclrtGetCurrentContext(&cur));
	cr_expect_eq(cur, own, "the thread left its own context");
	cr_expect_eq(simdev_acl_device_refs(0), refs0, "references to device 0 added");
	cr_expect_eq(simdev_acl_device_refs(1), refs1, "references to device 1 added");
	/* Fresh threads (a control thread each) add none either. */
	for (int i = 0; i < 8; i++) {
		struct fresh_call c = { .be = t.be, .st = VMM_E_INVALID };
		pthread_t th;

		cr_assert_eq(pthread_create(&th, NULL, mem_info_from_fresh_thread, &c), 0);
		pthread_join(th, NULL);
		cr_expect_eq(c.st, VMM_OK);
	}
	cr_expect_eq(simdev_acl_device_refs(1), refs1, "fresh threads added references");
	/* The program's own pair leaves the count where it was. */
	ACL_OK(aclrtSetDevice(1));
	ACL_OK(aclrtResetDevice(1));
	cr_expect_eq(simdev_acl_device_refs(1), refs1);
	t_close(&t);
}
