/* The registry of the program's own VMM handles on simdev: sleep copies each handle once (even
 * when mapped twice, or in parts), releases it, keeps exported ones resident; wake re-creates the
 * same kind, maps at the same addresses and offsets, re-grants access (peers too) and copies back;
 * handle values are translated; "already", device OOM and injected driver failures change nothing
 * and lose nothing. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap_offload.h"
#include "offload/copy_engine.h"
#include "offload/transition.h"
#include "program.h"

#define MiB ((size_t)1 << 20)

static struct tdev td;
static vmm_app_registry *reg;

/* The scene: H1 (8 MiB) mapped twice whole at va1 and va2; H2 (8 MiB, exportable) mapped in two
 * halves at va3 and va4; H3 (6 MiB) mapped only in its middle 2 MiB at va5 (its other bytes were
 * written through a mapping va6 that the program has since unmapped). */
struct scene {
	vmm_phys h1, h2, h3;
	vmm_devptr va1, va2, va3, va4, va5, va6;
	char *p1, *p2, *p3;
};
static struct scene sc;

static void open_with(const char *memory, const char *devices, const char *fail)
{
	vmm_error err = { 0 };

	/* The scenes map parts of handles, which the registry handles for a driver that maps them;
	 * the H100's maps whole handles only (tests/gpu/PROBE.md (k)), simdev too unless told. */
	setenv("SIMDEV_PARTIAL_MAP", "1", 1);
	t_simdev_env(memory, devices, fail);
	t_dev_open(&td);
	prog_open(&td);
	cr_assert_eq(vmm_app_registry_create(td.be, &reg, &err), VMM_OK, "%s", err.msg);
}

static void setup(void)
{
	open_with("1G", "2", NULL);
}

static void teardown(void)
{
	vmm_app_registry_destroy(reg);
	reg = NULL;
	t_dev_close(&td);
	free(sc.p1);
	free(sc.p2);
	free(sc.p3);
	memset(&sc, 0, sizeof(sc));
}

static void build_scene(void)
{
	sc.p1 = malloc(8 * MiB);
	sc.p2 = malloc(8 * MiB);
	sc.p3 = malloc(6 * MiB);
	cr_assert(sc.p1 && sc.p2 && sc.p3);
	t_pattern(sc.p1, 8 * MiB, 101);
	t_pattern(sc.p2, 8 * MiB, 102);
	t_pattern(sc.p3, 6 * MiB, 103);
	sc.h1 = prog_create(reg, 8 * MiB, 0, 0);
	sc.h2 = prog_create(reg, 8 * MiB, 0, 1);
	sc.h3 = prog_create(reg, 6 * MiB, 0, 0);
	sc.va1 = prog_reserve(8 * MiB);
	sc.va2 = prog_reserve(8 * MiB);
	sc.va3 = prog_reserve(8 * MiB);   /* va4 lies in the same reservation, after va3 */
	sc.va4 = sc.va3 + 4 * MiB;
	sc.va5 = prog_reserve(2 * MiB);
	sc.va6 = prog_reserve(6 * MiB);
	prog_map(reg, sc.va1, 8 * MiB, 0, sc.h1);
	prog_map(reg, sc.va2, 8 * MiB, 0, sc.h1);
	prog_map(reg, sc.va3, 4 * MiB, 0, sc.h2);
	prog_map(reg, sc.va4, 4 * MiB, 4 * MiB, sc.h2);
	prog_map(reg, sc.va6, 6 * MiB, 0, sc.h3);
	prog_map(reg, sc.va5, 2 * MiB, 2 * MiB, sc.h3);
	prog_access(reg, sc.va1, 8 * MiB, 1u);
	prog_access(reg, sc.va2, 8 * MiB, 1u);
	prog_access(reg, sc.va3, 8 * MiB, 1u);    /* one call over both halves */
	prog_access(reg, sc.va5, 2 * MiB, 1u);
	prog_access(reg, sc.va6, 6 * MiB, 1u);
	t_write(&td, sc.va1, sc.p1, 8 * MiB);
	t_write(&td, sc.va3, sc.p2, 4 * MiB);
	t_write(&td, sc.va4, sc.p2 + 4 * MiB, 4 * MiB);
	t_write(&td, sc.va6, sc.p3, 6 * MiB);
	prog_unmap(reg, sc.va6, 6 * MiB);
}

static void expect_dev(vmm_devptr va, const char *want, size_t n, const char *what)
{
	char *got = malloc(n);

	cr_assert(got);
	t_read(&td, got, va, n);
	cr_assert_eq(memcmp(got, want, n), 0, "%s: contents differ", what);
	free(got);
}

static void expect_scene_intact(void)
{
	expect_dev(sc.va1, sc.p1, 8 * MiB, "H1 through va1");
	expect_dev(sc.va2, sc.p1, 8 * MiB, "H1 through va2");
	expect_dev(sc.va3, sc.p2, 4 * MiB, "H2 first half");
	expect_dev(sc.va4, sc.p2 + 4 * MiB, 4 * MiB, "H2 second half");
	expect_dev(sc.va5, sc.p3 + 2 * MiB, 2 * MiB, "H3 middle");
	for (vmm_devptr va = sc.va1; va < sc.va1 + 8 * MiB; va += 2 * MiB)
		cr_assert_eq(cu.check_access(0, (void *)va, 2 * MiB), 0);
}

static vmm_status do_sleep(bool discard, vmm_transfer_result *res, vmm_error *err)
{
	vmm_sleep_opts o = { .tag = NULL, .device = -1, .discard = discard };

	return vmm_app_sleep(reg, &o, res, err);
}

static vmm_status do_wake(vmm_transfer_result *res, vmm_error *err)
{
	vmm_sleep_opts o = { .tag = NULL, .device = -1 };

	return vmm_app_wake(reg, &o, res, err);
}

Test(app, sleep_releases_and_wake_restores_every_byte, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;
	uint64_t used0, h1_real0;

	build_scene();
	used0 = t_dev_used(&td, 0);
	h1_real0 = vmm_app_real_handle(reg, sc.h1);
	cr_assert_neq(h1_real0, 0);
	cr_assert(vmm_app_contains(reg, sc.va2 + 5));
	cr_assert_not(vmm_app_contains(reg, sc.va6), "unmapped by the program");

	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 22 * MiB);
	cr_expect_eq(res.bytes_copied, 22 * MiB, "each handle copied once");
	cr_expect_not(res.already);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 22 * MiB, "the physical memory went back");
	cr_expect(vmm_app_is_asleep(reg, 0));
	cr_expect(vmm_app_is_asleep(reg, -1));
	cr_expect_not(vmm_app_is_asleep(reg, 1));
	cr_expect_eq(vmm_app_real_handle(reg, sc.h1), 0, "no real handle while asleep");
	cr_expect_neq(cu.check_access(0, (void *)sc.va1, 4096), 0, "nothing mapped while asleep");
	cr_expect(vmm_app_contains(reg, sc.va1), "the address stays the program's");
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.handles, 3);
	cr_expect_eq(s.asleep_bytes, 22 * MiB);
	cr_expect_geq(s.host_backup_bytes, 22 * MiB);
	cr_expect_eq(s.mapped_bytes, 0);

	cr_assert_eq(do_sleep(false, &res, &err), VMM_E_ALREADY);
	cr_expect(res.already);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 22 * MiB);

	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 22 * MiB);
	cr_expect_eq(res.bytes_copied, 22 * MiB);
	cr_expect_eq(t_dev_used(&td, 0), used0);
	cr_expect_not(vmm_app_is_asleep(reg, -1));
	expect_scene_intact();
	vmm_app_stats_get(reg, -1, &s);
	cr_expect_eq(s.mapped_bytes, 8 * MiB + 8 * MiB + 8 * MiB + 2 * MiB);
	cr_expect_eq(s.asleep_bytes, 0);

	/* The same physical memory behind both mappings of H1. */
	t_write(&td, sc.va2 + 100, "shared", 6);
	{
		char b[6];

		t_read(&td, b, sc.va1 + 100, 6);
		cr_expect_eq(memcmp(b, "shared", 6), 0, "va1 and va2 share H1");
	}
	/* H3's bytes no mapping covered survived too: map it whole again. */
	prog_map(reg, sc.va6, 6 * MiB, 0, sc.h3);
	prog_access(reg, sc.va6, 6 * MiB, 1u);
	expect_dev(sc.va6, sc.p3, 6 * MiB, "H3 whole");
	cr_assert_eq(do_wake(&res, &err), VMM_E_ALREADY);
	cr_expect(res.already);
}

Test(app, handles_translate_after_wake, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	CUmemGenericAllocationHandle r;
	vmm_phys real, fresh;
	int fd = -1;

	build_scene();
	for (int cycle = 0; cycle < 3; cycle++) {
		cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
		cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	}
	real = vmm_app_real_handle(reg, sc.h2);
	cr_assert_neq(real, 0);
	cr_assert_eq(cu.retain(&r, (void *)sc.va4), CUDA_SUCCESS);
	cr_expect_eq((vmm_phys)r, real, "the driver's handle behind va4 is the translated one");
	cr_expect_eq(vmm_app_program_handle(reg, real), sc.h2);
	cr_expect_eq(vmm_app_real_handle(reg, 0x1234), 0x1234, "unknown values pass through");
	/* Re-created as the same kind: H2 asked for an exportable handle. */
	cr_expect_eq(cu.export_fd(&fd, real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		     CUDA_SUCCESS, "wake kept the program's allocation properties");
	/* A driver value equal to a handle value the program still holds gets a value of its
	 * own, so that the program's two handles never collide. */
	fresh = vmm_app_created_value(reg, sc.h1, 2 * MiB, 0, NULL, 0);
	cr_expect_neq(fresh, 0);
	if (vmm_app_real_handle(reg, sc.h1) != sc.h1 || fresh != sc.h1) {
		cr_expect_neq(fresh, sc.h1);
		cr_expect_neq(fresh, sc.h2);
		cr_expect_neq(fresh, sc.h3);
		cr_expect_eq(vmm_app_real_handle(reg, fresh), sc.h1);
	}
	expect_scene_intact();
}

Test(app, new_handles_after_wake_never_share_a_value, .init = setup, .fini = teardown)
{
	/* simdev's handle values are addresses, like the real driver's: after a wake released the
	 * old ones, new handles often get their values back. */
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_phys v[16];
	vmm_devptr va[16];
	int collided = 0;

	vmm_phys filler[3];

	build_scene();
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	/* Someone else takes the values the sleep freed, so that wake gets new ones; then they
	 * are free again for the program's next handles. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(td.be->create(td.be, 0, 2 * MiB, &filler[i], &err), VMM_OK);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(td.be->release(td.be, filler[i], &err), VMM_OK);
	for (int i = 0; i < 16; i++) {
		v[i] = prog_create(reg, 2 * MiB, 0, 0);
		cr_assert(v[i] != sc.h1 && v[i] != sc.h2 && v[i] != sc.h3, "new handle %d", i);
		for (int j = 0; j < i; j++)
			cr_assert_neq(v[i], v[j]);
		collided += vmm_app_real_handle(reg, v[i]) != v[i];
		va[i] = prog_reserve(2 * MiB);
		prog_map(reg, va[i], 2 * MiB, 0, v[i]);
		prog_access(reg, va[i], 2 * MiB, 1u);
		t_fill(&td, va[i], 0x30 + i, 2 * MiB);
	}
	cr_log_info("%d of 16 new handles got a registry value", collided);
	expect_scene_intact();
	for (int i = 0; i < 16; i++) {
		unsigned char b[2];

		t_read(&td, b, va[i] + 2 * MiB - 2, 2);
		cr_expect(b[0] == 0x30 + i && b[1] == 0x30 + i, "handle %d", i);
	}
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 22 * MiB + 32 * MiB);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
}

Test(app, exported_handle_stays_and_is_reported, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;
	uint64_t used0;

	build_scene();
	vmm_app_exported(reg, sc.h1);
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 14 * MiB, "H2 and H3 only");
	cr_expect_eq(t_dev_used(&td, 0), used0 - 14 * MiB);
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.unreleasable_bytes, 8 * MiB);
	expect_dev(sc.va1, sc.p1, 8 * MiB, "exported H1 stays readable while asleep");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
}

Test(app, imported_handle_stays_and_is_reported, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	CUmemGenericAllocationHandle imp;
	vmm_app_stats s;
	vmm_devptr va7;
	int fd = -1;

	build_scene();
	/* The program imports H2's memory (as if from another process) and maps it once more. */
	cr_assert_eq(cu.export_fd(&fd, vmm_app_real_handle(reg, sc.h2),
				  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
	vmm_app_exported(reg, sc.h2);
	cr_assert_eq(cu.import_fd(&imp, (void *)(intptr_t)fd,
				  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_SUCCESS);
	vmm_app_imported(reg, imp, 0);
	va7 = prog_reserve(8 * MiB);
	prog_map(reg, va7, 8 * MiB, 0, imp);
	prog_access(reg, va7, 8 * MiB, 1u);
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.handles, 3, "imported memory is not the program's own");
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 14 * MiB, "H1 and H3; H2 exported, its import stays");
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.unreleasable_bytes, 16 * MiB);
	expect_dev(va7, sc.p2, 8 * MiB, "the imported mapping stays readable");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	prog_unmap(reg, va7, 8 * MiB);
	prog_release(reg, imp);
}

Test(app, partial_mappings_stay_when_the_backend_cannot_remap_them, .init = setup,
     .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;

	build_scene();
	td.be->map_at = NULL;   /* like Ascend: whole handles at offset 0 only */
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 8 * MiB, "only H1 is mapped whole");
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.unreleasable_bytes, 14 * MiB, "H2 and H3 are reported");
	expect_dev(sc.va3, sc.p2, 4 * MiB, "H2 stays mapped");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
}

Test(app, discard_skips_copies, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	uint64_t used0;

	build_scene();
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(true, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_copied, 0);
	cr_expect_eq(res.bytes_released, 22 * MiB);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_copied, 0);
	cr_expect_eq(t_dev_used(&td, 0), used0);
	for (vmm_devptr va = sc.va1; va < sc.va1 + 8 * MiB; va += 2 * MiB)
		cr_assert_eq(cu.check_access(0, (void *)va, 2 * MiB), 0, "mapped and granted");
}

Test(app, peers_regain_access, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };

	build_scene();
	prog_access(reg, sc.va1, 8 * MiB, 2u);   /* device 1 added; device 0 keeps its access */
	cr_assert_eq(cu.check_access(1, (void *)sc.va1, 8 * MiB), 0);
	cr_assert_neq(cu.check_access(1, (void *)sc.va3, 4096), 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(cu.check_access(1, (void *)sc.va1, 8 * MiB), 0, "the peer got access back");
	cr_expect_eq(cu.check_access(0, (void *)sc.va1, 8 * MiB), 0);
	cr_expect_neq(cu.check_access(1, (void *)sc.va2, 4096), 0, "no more than it had");
	cr_expect_neq(cu.check_access(1, (void *)sc.va3, 4096), 0);
	/* The program takes device 1's access away again: the next wake must not give it back. */
	prog_revoke(reg, sc.va1, 8 * MiB, 2u);
	cr_assert_neq(cu.check_access(1, (void *)sc.va1, 4096), 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	cr_expect_neq(cu.check_access(1, (void *)sc.va1, 4096), 0, "revoked stays revoked");
	expect_scene_intact();
}

Test(app, two_devices_sleep_and_wake_together, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	char *p = malloc(6 * MiB);
	vmm_phys h = prog_create(reg, 6 * MiB, 1, 0);
	vmm_devptr va = prog_reserve(6 * MiB);
	uint64_t used1;

	build_scene();
	t_pattern(p, 6 * MiB, 55);
	prog_map(reg, va, 6 * MiB, 0, h);
	prog_access(reg, va, 6 * MiB, 3u);
	t_write(&td, va, p, 6 * MiB);
	used1 = t_dev_used(&td, 1);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 28 * MiB);
	cr_expect_eq(res.bytes_copied, 28 * MiB);
	cr_expect_eq(t_dev_used(&td, 1), used1 - 6 * MiB);
	cr_expect(vmm_app_is_asleep(reg, 1));
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_copied, 28 * MiB);
	expect_dev(va, p, 6 * MiB, "device 1's handle");
	cr_expect_eq(cu.check_access(1, (void *)va, 6 * MiB), 0);
	cr_expect_eq(cu.check_access(0, (void *)va, 6 * MiB), 0);
	expect_scene_intact();
	free(p);
}

Test(app, device_selection_tags_and_bad_input, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_sleep_opts o = { .tag = "default", .device = -1 };

	build_scene();
	cr_assert_eq(vmm_app_sleep(reg, &o, &res, &err), VMM_E_ALREADY, "tags exclude app mappings");
	cr_expect(res.already);
	o = (vmm_sleep_opts){ .device = 1 };
	cr_assert_eq(vmm_app_sleep(reg, &o, &res, &err), VMM_E_ALREADY, "nothing on device 1");
	o = (vmm_sleep_opts){ .device = 99 };
	cr_assert_eq(vmm_app_sleep(reg, &o, &res, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_app_sleep(NULL, &o, &res, &err), VMM_E_INVALID);
	cr_expect_not(vmm_app_is_asleep(reg, -1), "nothing changed");
	o = (vmm_sleep_opts){ .device = 0 };
	cr_assert_eq(vmm_app_sleep(reg, &o, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_app_wake(reg, &o, NULL, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	/* Mappings of handles the registry never saw are not tracked. */
	vmm_app_mapped(reg, 0x7000000, 2 * MiB, 0, 0xdead);
	cr_expect_not(vmm_app_contains(reg, 0x7000000));
}

Test(app, released_handle_lives_while_mapped, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;
	char *p = malloc(4 * MiB);
	vmm_phys h = prog_create(reg, 4 * MiB, 0, 0);
	vmm_devptr va = prog_reserve(4 * MiB);
	uint64_t used0;

	t_pattern(p, 4 * MiB, 7);
	prog_map(reg, va, 4 * MiB, 0, h);
	prog_access(reg, va, 4 * MiB, 1u);
	t_write(&td, va, p, 4 * MiB);
	prog_release(reg, h);   /* PyTorch and NCCL drop the handle right after mapping */
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_dev(va, p, 4 * MiB, "released handle");
	cr_expect_eq(t_dev_used(&td, 0), used0);
	/* The program's unmap frees it, as it would have without the sleep. */
	prog_unmap(reg, va, 4 * MiB);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB);
	vmm_app_stats_get(reg, -1, &s);
	cr_expect_eq(s.handles, 0);
	cr_expect_eq(s.host_backup_bytes, 0, "the backup went with the handle");
	free(p);
}

/* One handle of 4 MiB, mapped whole at *va with the pattern `seed`. */
static vmm_phys one_handle(vmm_devptr *va, char *p, int seed)
{
	vmm_phys h = prog_create(reg, 4 * MiB, 0, 0);

	*va = prog_reserve(4 * MiB);
	t_pattern(p, 4 * MiB, seed);
	prog_map(reg, *va, 4 * MiB, 0, h);
	prog_access(reg, *va, 4 * MiB, 1u);
	t_write(&td, *va, p, 4 * MiB);
	return h;
}

Test(app, a_retained_reference_is_not_the_program_dropping_the_handle, .init = setup,
     .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;
	char *p = malloc(4 * MiB);
	vmm_devptr va;
	vmm_phys h, r, real;
	uint64_t used0;

	cr_assert(p);
	h = one_handle(&va, p, 21);
	used0 = t_dev_used(&td, 0);
	/* cuMemRetainAllocationHandle + cuMemRelease, as a program finding a segment's handle. */
	r = prog_retain(reg, va + MiB);
	cr_expect_eq(r, h, "the retain answers the program's value");
	prog_release(reg, r);
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_eq(s.handles, 1, "the program still holds its own reference");
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, 4 * MiB, "the handle slept like any other");
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_dev(va, p, 4 * MiB, "after wake");
	/* Twice more after the wake: the re-created handle keeps one driver reference. */
	cr_expect_eq(prog_retain(reg, va), h);
	cr_expect_eq(prog_retain(reg, va + 2 * MiB), h);
	prog_release(reg, h);
	prog_release(reg, h);
	real = vmm_app_real_handle(reg, h);
	cr_assert_neq(real, 0);
	prog_unmap(reg, va, 4 * MiB);
	cr_expect_eq(t_dev_used(&td, 0), used0, "the program's reference keeps the memory");
	prog_release(reg, h);   /* the last one reaches the driver with the new real handle */
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB);
	vmm_app_stats_get(reg, -1, &s);
	cr_expect_eq(s.handles, 0);
	cr_expect_eq(vmm_app_release_ref(reg, h, &real), VMM_APP_RELEASE_DRIVER,
		     "a forgotten value goes to the driver unchanged");
	cr_expect_eq(real, h);
	free(p);
}

Test(app, references_taken_and_dropped_while_asleep, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	char *p1 = malloc(4 * MiB), *p2 = malloc(4 * MiB);
	vmm_devptr va1, va2;
	vmm_phys h1, h2, real = 1;
	bool driver_ref = true;
	uint64_t used0;

	cr_assert(p1 && p2);
	h1 = one_handle(&va1, p1, 31);
	h2 = one_handle(&va2, p2, 32);
	prog_release(reg, h1);   /* dropped right after mapping, as PyTorch and NCCL do */
	cr_expect_eq(vmm_app_release_ref(reg, h1, &real), VMM_APP_RELEASE_INVALID,
		     "a second release of the same reference is refused");
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	/* Asleep: neither call may reach the driver (there is no real handle). */
	cr_expect_eq(vmm_app_retained(reg, va1, &driver_ref), h1);
	cr_expect_not(driver_ref, "an asleep handle takes no driver reference");
	cr_expect_eq(vmm_app_release_ref(reg, h2, &real), VMM_APP_RELEASE_COUNTED);
	cr_expect_eq(real, 0);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_dev(va1, p1, 4 * MiB, "h1 after wake");
	expect_dev(va2, p2, 4 * MiB, "h2 after wake");
	cr_expect_eq(t_dev_used(&td, 0), used0);
	/* h2 lives by its mapping alone now, h1 by the reference retained while asleep. */
	prog_unmap(reg, va2, 4 * MiB);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB, "h2 went with its mapping");
	prog_unmap(reg, va1, 4 * MiB);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 4 * MiB, "h1 is still held");
	prog_release(reg, h1);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 8 * MiB);
	free(p1);
	free(p2);
}

Test(app, properties_are_answered_from_the_record, .init = setup, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	CUmemAllocationProp prop;
	char small[4];
	vmm_phys h = prog_create(reg, 2 * MiB, 1, 1);
	vmm_devptr va = prog_reserve(2 * MiB);

	prog_map(reg, va, 2 * MiB, 0, h);
	prog_access(reg, va, 2 * MiB, 3u);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(vmm_app_real_handle(reg, h), 0, "asleep");
	memset(&prop, 0, sizeof(prop));
	cr_assert(vmm_app_prop_of(reg, h, &prop, sizeof(prop)));
	cr_expect_eq(prop.location.id, 1);
	cr_expect_eq(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	cr_expect_not(vmm_app_prop_of(reg, h, small, sizeof(small)), "another size is refused");
	cr_expect_not(vmm_app_prop_of(reg, 0x1234, &prop, sizeof(prop)), "unknown value");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
}

Test(app, backend_creates_only_from_properties_it_can_read, .init = setup, .fini = teardown)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 },
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	vmm_error err = { 0 };
	vmm_phys ph = 0;
	uint64_t used0 = t_dev_used(&td, 1);
	int fd = -1;

	cr_expect_eq(td.be->create_with_prop(td.be, 1, 2 * MiB, &p, sizeof(p) - 1, &ph, &err),
		     VMM_E_INVALID, "a truncated CUmemAllocationProp");
	cr_expect_eq(td.be->create_with_prop(td.be, 0, 2 * MiB, &p, sizeof(p), &ph, &err),
		     VMM_E_INVALID, "properties of another device");
	cr_expect_neq(strstr(err.msg, "device 0"), NULL, "%s", err.msg);
	cr_expect_eq(t_dev_used(&td, 1), used0, "nothing was created");
	cr_assert_eq(td.be->create_with_prop(td.be, 1, 2 * MiB, &p, sizeof(p), &ph, &err), VMM_OK,
		     "%s", err.msg);
	cr_expect_eq(t_dev_used(&td, 1), used0 + 2 * MiB);
	cr_expect_eq(cu.export_fd(&fd, ph, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		     CUDA_SUCCESS, "created as the exportable kind asked for");
	if (fd >= 0)
		close(fd);
	cr_assert_eq(td.be->release(td.be, ph, &err), VMM_OK, "%s", err.msg);
}

Test(app, wake_without_device_memory_stays_asleep, .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_phys filler;

	open_with("64M", "1", NULL);
	build_scene();
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(td.be->create(td.be, 0, 50 * MiB, &filler, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(do_wake(&res, &err), VMM_E_OOM);
	cr_expect_neq(strstr(err.msg, "needs"), NULL, "%s", err.msg);
	cr_expect_neq(strstr(err.msg, "available"), NULL, "%s", err.msg);
	cr_expect(vmm_app_is_asleep(reg, 0), "still asleep, host copy kept");
	cr_assert_eq(td.be->release(td.be, filler, &err), VMM_OK);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
}

/* A whole-process wake that fails in the heap after the program's handles came back undoes
 * what it can. Handles it cannot sleep again (shared since: a group sleep had released them, and
 * they came back as the program's exports) stay resident, as a sleep of the process alone leaves
 * shared memory: that undo is whole, not the partial state (CI's share soak, 7 Dec, logged "wake
 * roll-back: the app mappings could not be brought back" for it and left the process partial). */
Test(app, a_wake_undo_that_finds_the_handles_shared_is_whole, .fini = teardown)
{
	vmm_selection all = { .device = -1, .app = true };
	vmm_offload_parts parts = { .nheaps = 1 };
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_phys filler;
	vmm_devptr heap_p;
	vmm_core *core;
	char *want = malloc(16 * MiB);

	cr_assert(want);
	open_with("64M", "1", NULL);
	cr_assert_eq(vmm_core_create(td.be, NULL, &core, &err), VMM_OK, "%s", err.msg);
	build_scene();
	cr_assert_eq(vmm_malloc(core, 0, 16 * MiB, 0, NULL, &heap_p, &err), VMM_OK, "%s", err.msg);
	t_pattern(want, 16 * MiB, 104);
	t_write(&td, heap_p, want, 16 * MiB);
	parts.heaps[0].name = "cuda heap";
	parts.heaps[0].core = core;
	parts.app = reg;
	cr_assert_eq(vmm_offload_sleep(&parts, &all, NULL, &res, &err), VMM_OK, "%s", err.msg);
	vmm_app_exported(reg, sc.h1);
	vmm_app_exported(reg, sc.h2);
	vmm_app_exported(reg, sc.h3);
	/* Room for the program's 22 MiB, not for the heap's 16 after them. */
	cr_assert_eq(td.be->create(td.be, 0, 64 * MiB - t_dev_used(&td, 0) - 30 * MiB, &filler,
				   &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_offload_wake(&parts, &all, NULL, &res, &err), VMM_E_OOM, "%s", err.msg);
	cr_expect_eq(res.partial_bytes, 0, "not partial: %s", err.msg);
	cr_expect_null(strstr(err.msg, "partially asleep"), "%s", err.msg);
	cr_expect(vmm_is_asleep(core, 0, NULL), "the heap is still asleep");
	cr_expect_not(vmm_app_is_asleep(reg, 0), "the shared handles stay resident");
	expect_scene_intact();
	cr_assert_eq(td.be->release(td.be, filler, &err), VMM_OK);
	cr_assert_eq(vmm_offload_wake(&parts, &all, NULL, &res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	expect_dev(heap_p, want, 16 * MiB, "the heap's allocation");
	vmm_free(core, heap_p, NULL);
	vmm_core_destroy(core);
	free(want);
}

Test(app, sleep_refused_without_host_memory_for_it, .init = setup, .fini = teardown)
{
	/* A handle larger than the host could hold: created by "the program" on a big device. */
	vmm_error err = { 0 };
	vmm_transfer_result res;

	build_scene();
	vmm_app_created(reg, 0x42000, (size_t)vmm_host_available_bytes() * 2, 0, NULL, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_E_HOST_OOM);
	cr_expect_neq(strstr(err.msg, "available"), NULL, "%s", err.msg);
	cr_expect_not(vmm_app_is_asleep(reg, -1), "refused before anything changed");
	expect_scene_intact();
	vmm_app_released(reg, 0x42000);
}

Test(app, provision_ahead_pins_backups_before_the_first_sleep, .init = setup, .fini = teardown)
{
	vmm_sleep_opts o = { .device = -1 };
	vmm_transfer_result res;
	vmm_error err = { 0 };
	vmm_app_stats s;

	build_scene();
	cr_assert_eq(vmm_app_provision_backup(reg, &o, &err), VMM_OK, "%s", err.msg);
	vmm_app_stats_get(reg, 0, &s);
	cr_expect_geq(s.host_backup_bytes, 22 * MiB);
	cr_expect_eq(s.asleep_bytes, 0, "provisioning alone changes nothing on the device");
	expect_scene_intact();
	cr_assert_eq(vmm_app_provision_backup(reg, &o, &err), VMM_OK, "twice is harmless");
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	o.device = 77;
	cr_assert_eq(vmm_app_provision_backup(reg, &o, &err), VMM_E_INVALID);
	vmm_app_created(reg, 0x42000, (size_t)vmm_host_available_bytes() * 2, 0, NULL, 0);
	o.device = -1;
	cr_assert_eq(vmm_app_provision_backup(reg, &o, &err), VMM_E_HOST_OOM);
	vmm_app_released(reg, 0x42000);
}

/* Failure injection: the sleep or wake fails part-way, reports it, and leaves every byte where a
 * later call finds it. */
static void faulty_cycle(const char *fail, bool fails_in_sleep, vmm_status want)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	uint64_t used0;
	vmm_status st;

	open_with("1G", "1", fail);
	build_scene();
	used0 = t_dev_used(&td, 0);
	st = do_sleep(false, &res, &err);
	if (fails_in_sleep) {
		cr_assert_eq(st, want, "%s: sleep gave %s (%s)", fail, vmm_status_name(st),
			     err.msg);
		cr_expect_neq(err.msg[0], 0);
		cr_expect_not(vmm_app_is_asleep(reg, -1), "%s: rolled back", fail);
		cr_expect_eq(t_dev_used(&td, 0), used0, "%s: nothing left released", fail);
		expect_scene_intact();
		cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
		cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	} else {
		cr_assert_eq(st, VMM_OK, "%s: %s", fail, err.msg);
		st = do_wake(&res, &err);
		cr_assert_eq(st, want, "%s: wake gave %s (%s)", fail, vmm_status_name(st),
			     err.msg);
		cr_expect(vmm_app_is_asleep(reg, 0), "%s: stays asleep", fail);
		cr_expect_eq(t_dev_used(&td, 0), used0 - 22 * MiB, "%s: nothing half-created",
			     fail);
		cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	}
	expect_scene_intact();
	cr_expect_eq(t_dev_used(&td, 0), used0);
}

/* The scene makes 3 cuMemCreate, 6 cuMemMap, 1 cuMemUnmap, 4 H2D copies, no release, no D2H. */
Test(app, fail_copy_out, .fini = teardown)
{
	faulty_cycle("cuMemcpyDtoHAsync:2", true, VMM_E_DRIVER);
}

Test(app, fail_first_unmap_in_sleep, .fini = teardown)
{
	/* unmap 2 undoes the temporary mapping of H3; 3 is the first program mapping */
	faulty_cycle("cuMemUnmap:3", true, VMM_E_DRIVER);
}

Test(app, fail_late_unmap_in_sleep_restores_released_handles, .fini = teardown)
{
	faulty_cycle("cuMemUnmap:6", true, VMM_E_DRIVER);
}

Test(app, a_temporary_mapping_that_will_not_unmap_is_not_forgotten, .fini = teardown)
{
	/* grant 6 is the sleep's temporary mapping of H3 (5 are the scene's); its unmap after the
	 * refused grant is refused twice (unmaps 2 and 3) */
	faulty_cycle("cuMemSetAccess:6,cuMemUnmap:2,cuMemUnmap:3", true, VMM_E_DRIVER);
}

/* The sleep's copy is done and the temporary mapping of H3 will not unmap (unmap 2 and its
 * retry 3): it is kept and tried again before H3 is released, so the sleep still completes,
 * nothing stays held, and the wake brings every byte back. */
Test(app, a_temporary_mapping_refused_after_the_copy_is_unmapped_before_the_release,
     .fini = teardown)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	uint64_t used0;

	open_with("1G", "1", "cuMemUnmap:2,cuMemUnmap:3");
	build_scene();
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(t_dev_used(&td, 0), used0 - 22 * MiB, "every handle went back");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	cr_expect_eq(t_dev_used(&td, 0), used0);
}

Test(app, fail_release_in_sleep, .fini = teardown)
{
	faulty_cycle("cuMemRelease:2", true, VMM_E_DRIVER);
}

Test(app, fail_create_in_wake, .fini = teardown)
{
	faulty_cycle("cuMemCreate:5", false, VMM_E_OOM);
}

Test(app, fail_map_in_wake, .fini = teardown)
{
	/* 6 maps in the scene, 1 temporary in sleep; the wake's second map fails */
	faulty_cycle("cuMemMap:9", false, VMM_E_DRIVER);
}

Test(app, fail_access_in_wake, .fini = teardown)
{
	/* 5 grants in the scene, 1 for the temporary mapping in sleep */
	faulty_cycle("cuMemSetAccess:8", false, VMM_E_DRIVER);
}

Test(app, fail_copy_in_wake, .fini = teardown)
{
	faulty_cycle("cuMemcpyHtoDAsync:6", false, VMM_E_DRIVER);
}

/* A wake that fails (faults: the injected failure `what`, and two refused unmaps of H1's
 * mapping in the unwind): it stays asleep, the driver still holds H1's 8 MiB (kept: where), and
 * the next wake maps the same addresses, with the scene intact and nothing more held than before
 * the sleep. */
static void wake_failure_keeps_what_will_not_unmap(const char *faults, const char *what,
						   const char *kept_where)
{
	vmm_transfer_result res;
	vmm_error err = { 0 };
	uint64_t used0, kept;

	open_with("1G", "1", faults);
	build_scene();
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_neq(do_wake(&res, &err), VMM_OK, "the injected %s failure", what);
	cr_expect(vmm_app_is_asleep(reg, 0), "the failed wake stays asleep");
	kept = t_dev_used(&td, 0) - (used0 - 22 * MiB);
	cr_expect_eq(kept, 8 * MiB, "the driver still holds H1 (%llu bytes), %s",
		     (unsigned long long)kept, kept_where);
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "the next wake maps the same addresses: %s",
		     err.msg);
	expect_scene_intact();
	cr_expect_eq(t_dev_used(&td, 0), used0, "and holds what it held before the sleep");
}

/* The wake's copy back fails (H2D copy 6) after every handle is mapped, and the unwind's unmap of
 * the first handle's (H1's) first mapping is refused twice (unmap 1 is the scene's, 2-7 the sleep's, 8
 * the wake's temporary mapping of H3): that handle is not released under its mappings but kept,
 * and the next wake unmaps and releases it before it maps the same addresses again. */
Test(app, a_wake_unwind_keeps_a_handle_that_will_not_unmap, .fini = teardown)
{
	wake_failure_keeps_what_will_not_unmap("cuMemcpyHtoDAsync:6,cuMemUnmap:9,cuMemUnmap:10", "copy", "which would not unmap");
}

/* The wake's second map fails (map 9: H1 at va2, after va1), and its rollback's unmap of va1 is
 * refused twice (unmap 1 is the scene's, 2-7 the sleep's): H1's new handle is not released
 * under that mapping but kept, and the next wake unmaps it and maps the same addresses again. */
Test(app, a_wake_map_rollback_keeps_a_mapping_that_will_not_unmap, .fini = teardown)
{
	wake_failure_keeps_what_will_not_unmap("cuMemMap:9,cuMemUnmap:8,cuMemUnmap:9", "map", "mapped at va1");
}

/* The wake's grant of H1 at va2 fails (grant 8: 5 are the scene's, 6 the sleep's temporary
 * mapping's, 7 va1's) and the unmap of va2 after it is refused twice (unmaps 8 and 9): the same,
 * the mapping is kept and the next wake undoes it. */
Test(app, a_wake_grant_failure_keeps_a_mapping_that_will_not_unmap, .fini = teardown)
{
	wake_failure_keeps_what_will_not_unmap("cuMemSetAccess:8,cuMemUnmap:8,cuMemUnmap:9", "grant", "mapped at va1");
}

/* Each recorder owns its own stretch of one address range reserved for the test, so that no two
 * threads (nor simdev's own mappings) ever record the same address. */
#define REC_ITERS 400
#define REC_STRIDE ((uint64_t)REC_ITERS * 2 * MiB)

struct rec_arg {
	int id;
	int ok;
	vmm_devptr base;
};

/* The program keeps creating, mapping, unmapping and releasing handles on several threads while
 * another thread sleeps and wakes device 0: no deadlock, and the records stay consistent. The
 * recorded handles are pretend ones on device 1 (the shim's gate, not the registry, keeps a
 * program's driver calls out of a sleep of the same device). */
static void *recorder(void *a)
{
	struct rec_arg *ra = a;

	for (int i = 0; i < REC_ITERS; i++) {
		vmm_phys h = vmm_app_created_value(reg, 0x100000 * (uint64_t)(ra->id + 1) + (uint64_t)i,
						   2 * MiB, 1, NULL, 0);
		vmm_devptr va = ra->base + (uint64_t)ra->id * REC_STRIDE + (uint64_t)i * 2 * MiB;

		vmm_app_mapped(reg, va, 2 * MiB, 0, h);
		if (!vmm_app_contains(reg, va + 1))
			return NULL;
		vmm_app_access_set(reg, va, 2 * MiB, 1u);
		vmm_app_unmapped(reg, va, 2 * MiB);
		vmm_app_released(reg, h);
	}
	ra->ok = 1;
	return NULL;
}

Test(app, recording_from_threads_during_sleep_and_wake, .init = setup, .fini = teardown)
{
	struct rec_arg ra[4];
	pthread_t th[4];
	vmm_app_stats s;
	vmm_error err = { 0 };

	void *range = mmap(NULL, 4 * REC_STRIDE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			   -1, 0);

	cr_assert_neq(range, MAP_FAILED);
	build_scene();
	for (int i = 0; i < 4; i++) {
		ra[i] = (struct rec_arg){ .id = i, .base = (vmm_devptr)(uintptr_t)range };
		pthread_create(&th[i], NULL, recorder, &ra[i]);
	}
	for (int c = 0; c < 5; c++) {
		vmm_sleep_opts o = { .device = 0 };
		vmm_transfer_result res;

		cr_assert_eq(vmm_app_sleep(reg, &o, &res, &err), VMM_OK, "%s", err.msg);
		cr_assert_eq(vmm_app_wake(reg, &o, &res, &err), VMM_OK, "%s", err.msg);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_expect(ra[i].ok, "thread %d", i);
	}
	vmm_app_stats_get(reg, -1, &s);
	cr_expect_eq(s.handles, 3, "only the scene's handles are left");
	expect_scene_intact();
	munmap(range, 4 * REC_STRIDE);
}

/* A synchronize of the wake's copy streams fails while the copies still run (simdev's copies are
 * slowed down, and an injected failure returns at once): the unwind must not unmap the memory
 * they write to. The engine asks again, finds the streams drained, and the wake is undone as
 * usual. The sleep makes 8 synchronizes, so the 9th is the wake's first. */
Test(app, fail_synchronize_in_wake_with_copies_in_flight, .fini = teardown)
{
	setenv("SIMDEV_COPY_DELAY", "20", 1);
	faulty_cycle("cuStreamSynchronize:9", false, VMM_E_DRIVER);
}

Test(app, fail_synchronize_and_its_retry_in_wake, .fini = teardown)
{
	setenv("SIMDEV_COPY_DELAY", "20", 1);
	faulty_cycle("cuStreamSynchronize:9,cuStreamSynchronize:10", false, VMM_E_DRIVER);
}

/* Every attempt at the first stream's synchronize fails: the copies may still run, so the wake
 * keeps what it mapped until the next wake, which finds the streams idle, gives it back and
 * brings every byte back. */
Test(app, a_wake_whose_copies_never_synchronize_is_undone_by_the_next, .fini = teardown)
{
	const char *fail = "cuStreamSynchronize:9,cuStreamSynchronize:10,cuStreamSynchronize:11";
	vmm_transfer_result res;
	vmm_error err = { 0 };
	uint64_t used0;

	setenv("SIMDEV_COPY_DELAY", "20", 1);
	open_with("1G", "1", fail);
	build_scene();
	used0 = t_dev_used(&td, 0);
	cr_assert_eq(do_sleep(false, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(do_wake(&res, &err), VMM_E_DRIVER, "%s: the wake fails", fail);
	cr_expect(vmm_app_is_asleep(reg, 0), "stays asleep");
	cr_assert_eq(do_wake(&res, &err), VMM_OK, "%s", err.msg);
	expect_scene_intact();
	cr_expect_eq(t_dev_used(&td, 0), used0, "what the failed wake kept is given back");
}
