/* The host backup pool on simdev: many small backups share a few chunks (the reason it exists:
 * one registration per chunk, not per handle), pieces never overlap and keep their bytes, parts of
 * a piece go back on their own, an empty chunk is unmapped, a large request gets a chunk of its
 * own, provisioning now pins exactly the piece, and bad input changes nothing. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "offload/backup_pool.h"
#include "helpers.h"

#define MiB ((size_t)1 << 20)

static struct tdev td;

static void setup(void)
{
	t_simdev_env("1G", "1", NULL);
	t_dev_open(&td);
}

static void teardown(void)
{
	t_dev_close(&td);
}

static void get_ok(vmm_backup_pool *p, size_t size, int now, vmm_host_buf *b)
{
	vmm_error err = { 0 };

	cr_assert_eq(vmm_backup_get(p, size, now, b, &err), VMM_OK, "%s", err.msg);
	cr_assert_not_null(b->ptr);
	cr_assert_eq(b->size, size);
}

Test(backup_pool, small_backups_share_chunks_and_keep_their_bytes, .init = setup,
     .fini = teardown)
{
	enum { N = 200 };
	vmm_backup_pool *p = vmm_backup_pool_create(td.be);
	vmm_host_buf b[N];
	size_t mapped, in_use, want = 0;

	cr_assert_not_null(p);
	for (int i = 0; i < N; i++) {
		size_t size = (size_t)(1 + i % 3) * 2 * MiB - (i % 2 ? 4096 : 0);

		get_ok(p, size, 0, &b[i]);
		memset(b[i].ptr, i + 1, size);
		want += (size + 2 * MiB - 1) / (2 * MiB) * 2 * MiB;
	}
	for (int i = 0; i < N; i++) {
		unsigned char *c = b[i].ptr;

		cr_expect(c[0] == i + 1 && c[b[i].size - 1] == i + 1,
			  "piece %d lost its bytes: another piece overlaps it", i);
	}
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(in_use, want);
	/* 800 MiB in pieces: chunks of 64 MiB doubling to 1 GiB, so at most a chunk over. */
	cr_expect_leq(mapped, want + 1024 * MiB);
	cr_expect_geq(mapped, want);
	for (int i = 0; i < N; i++)
		vmm_backup_put(p, &b[i]);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(in_use, 0);
	cr_expect_eq(mapped, 0, "every chunk is unmapped once empty (%zu bytes left)", mapped);
	vmm_backup_pool_destroy(p);
}

Test(backup_pool, parts_of_a_piece_go_back_on_their_own, .init = setup, .fini = teardown)
{
	vmm_backup_pool *p = vmm_backup_pool_create(td.be);
	vmm_host_buf whole, part, again;
	size_t mapped, in_use;

	get_ok(p, 16 * MiB, 0, &whole);
	/* The second quarter goes back; a 4 MiB request then fits where it was. */
	part = (vmm_host_buf){ .ptr = (char *)whole.ptr + 4 * MiB, .size = 4 * MiB };
	vmm_backup_put(p, &part);
	cr_expect_null(part.ptr, "put clears the piece");
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(in_use, 12 * MiB);
	get_ok(p, 4 * MiB, 0, &again);
	cr_expect_eq(again.ptr, (char *)whole.ptr + 4 * MiB, "the freed units are reused first");
	/* Giving the same part back twice counts once. */
	part = again;
	vmm_backup_put(p, &again);
	vmm_backup_put(p, &part);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(in_use, 12 * MiB);
	vmm_backup_put(p, &whole);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(in_use, 0);
	cr_expect_eq(mapped, 0);
	vmm_backup_pool_destroy(p);
}

Test(backup_pool, large_request_gets_its_own_chunk_and_now_pins_it, .init = setup,
     .fini = teardown)
{
	vmm_backup_pool *p = vmm_backup_pool_create(td.be);
	vmm_host_buf small, big;
	size_t mapped, in_use;

	get_ok(p, 2 * MiB, 0, &small);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&small), 0, "provisioned by the first copy only");
	get_ok(p, 130 * MiB, 1, &big);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&big), 130 * MiB);
	cr_expect(big.pinned);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(mapped, 64 * MiB + 130 * MiB, "one first chunk, one of the large piece's size");
	memset(big.ptr, 0x5a, big.size);
	vmm_backup_put(p, &big);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(mapped, 64 * MiB);
	vmm_backup_put(p, &small);
	vmm_backup_pool_destroy(p);
}

Test(backup_pool, bad_input_changes_nothing, .init = setup, .fini = teardown)
{
	vmm_backup_pool *p = vmm_backup_pool_create(td.be);
	vmm_host_buf b = { .ptr = (void *)1 }, foreign = { .ptr = (void *)4096, .size = 4096 };
	vmm_error err = { 0 };
	size_t mapped, in_use;

	cr_expect_eq(vmm_backup_get(p, 0, 0, &b, &err), VMM_E_INVALID);
	cr_expect_null(b.ptr);
	cr_expect_eq(vmm_backup_get(NULL, 4096, 0, &b, &err), VMM_E_INVALID);
	cr_expect_eq(vmm_backup_get(p, SIZE_MAX - 4096, 0, &b, &err), VMM_E_HOST_OOM);
	vmm_backup_put(p, &foreign);   /* not the pool's: ignored */
	vmm_backup_put(p, NULL);
	vmm_backup_pool_bytes(p, &mapped, &in_use);
	cr_expect_eq(mapped, 0);
	cr_expect_eq(in_use, 0);
	vmm_backup_pool_destroy(p);
	vmm_backup_pool_destroy(NULL);
}
