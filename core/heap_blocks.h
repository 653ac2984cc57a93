/* Blocks over mapped memory (heap_blocks.c): each arena's runs of address space, their
 * address-ordered links, the per-page index (which block holds an address, which handle backs a
 * page) and the arena's segregated free index. Calls only the address-space layer (heap_va.h). */
#ifndef VMM_HEAP_BLOCKS_H
#define VMM_HEAP_BLOCKS_H

#include "heap_types.h"
#include "heap_va.h"

struct blk *blk_new(struct devheap *dh);
void blk_put(struct devheap *dh, struct blk *b);
struct blk *blk_containing(struct devheap *dh, vmm_devptr addr);
void free_index_insert(struct arena *a, struct blk *b);
void free_index_remove(struct arena *a, struct blk *b);
struct blk *free_index_find(struct arena *a, size_t size);
/* Where a request aligned to align starts in free block b (its first byte, or the first aligned
 * one past it). */
static inline vmm_devptr blk_aligned_start(const struct blk *b, size_t align)
{
	return align > HEAP_ALIGN ? align_up(b->addr, align) : b->addr;
}
/* Of the first `scan` free blocks that hold size bytes at align, smallest lists first, the first
 * that accept(arena, start, size, arg) takes with the request at its aligned start; NULL when
 * none does. */
typedef bool (*blk_accept_fn)(struct arena *a, vmm_devptr start, size_t size, void *arg);
struct blk *free_index_scan(struct arena *a, size_t size, size_t align, unsigned scan,
			    blk_accept_fn accept, void *arg);
/* Append the arena's free blocks to (*out)[*n..], growing the array (false: no host memory,
 * some may be missing). */
bool free_index_collect(struct arena *a, struct blk ***out, size_t *n, size_t *cap);
/* Split b so that it keeps `size` bytes; the tail becomes a new free block of the same arena,
 * inserted in the index. Returns the tail, or NULL (b stays whole). */
struct blk *blk_split(struct devheap *dh, struct blk *b, size_t size);
/* Mark b free, coalesce it with free neighbours of its arena, index it; the parts of it inside
 * shared handles are retired instead (heap_share.c). Returns the free block, or NULL when all
 * of b was retired. */
struct blk *blk_release(struct devheap *dh, struct blk *b);
/* b (out of the free index) becomes retired memory: never used again (heap_share.c). */
void blk_retire(struct devheap *dh, struct blk *b);
/* Take b out of the address list and the page index and recycle it: the memory under it goes
 * away (its neighbours' links to it are cut, as at the end of a mapped run). */
void blk_unlink(struct devheap *dh, struct blk *b);
/* New mapped memory [va, va+size) for arena a: one free block, coalesced. */
void arena_add_free_range(struct arena *a, vmm_devptr va, size_t size);
/* Take [va, va+size) out of the arena's free memory (it lies inside one free block). */
void arena_take_free_range(struct arena *a, vmm_devptr va, size_t size);
void page_handle_set(struct devheap *dh, vmm_devptr va, size_t size, struct phandle *h);
struct phandle *page_handle_get(struct devheap *dh, vmm_devptr va);

#endif
