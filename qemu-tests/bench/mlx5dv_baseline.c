/* The C baseline for qemu-tests/bench/wqe-cost.sh: posting and polling written with
 * rdma-core's mlx5dv.h inline helpers (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, the CQE
 * accessors), over rings of the same size as the Rust runs. Only the bench_* functions are
 * counted. Usage: mlx5dv_baseline post|poll inline64|write4k BATCH ITERS */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_BBS 64
#define LOG_CQ 12

static volatile uint64_t bf_reg;

__attribute__((noinline)) void bench_c_post(uint8_t *ring, uint32_t *dbr, uint16_t *cur, int inl, int batch,
                                            const uint8_t *payload)
{
	struct mlx5_wqe_ctrl_seg *last = NULL;
	for (int i = 0; i < batch; i++) {
		uint8_t *w = ring + (size_t)(*cur % RING_BBS) * 64;
		struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)w;
		if (inl) {
			mlx5dv_set_ctrl_seg(ctrl, *cur, MLX5_OPCODE_SEND, 0, 0x100, MLX5_WQE_CTRL_CQ_UPDATE, 6, 0, 0);
			/* mlx5dv.h has no inline-segment type: the header is one BE32 (rdma-core wqe.h). */
			*(uint32_t *)(w + 16) = htobe32(MLX5_INLINE_SEG | 64);
			memcpy(w + 20, payload, 64);
			*cur += 2;
		} else {
			mlx5dv_set_ctrl_seg(ctrl, *cur, MLX5_OPCODE_RDMA_WRITE, 0, 0x100, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
			struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)(w + 16);
			r->raddr = htobe64(0x100000000ull);
			r->rkey = htobe32(0x1234);
			mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(w + 32), 4096, 0x5678, 0x200000000ull);
			*cur += 1;
		}
		last = ctrl;
	}
	__asm__ volatile("" ::: "memory"); /* udma_to_device_barrier on x86 */
	dbr[1] = htobe32(*cur);
	__asm__ volatile("sfence" ::: "memory"); /* mmio_wc_start / wmb */
	bf_reg = *(uint64_t *)last;
}

struct out { uint32_t qpn; uint16_t wqe; uint32_t bytes; };

__attribute__((noinline)) int bench_c_poll(uint8_t *ring, uint32_t *dbr, uint32_t *ci, int batch, struct out *o)
{
	int n = 0;
	while (n < batch) {
		struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)(ring + (size_t)(*ci & ((1u << LOG_CQ) - 1)) * 64);
		if (mlx5dv_get_cqe_opcode(cqe) == MLX5_CQE_INVALID ||
		    mlx5dv_get_cqe_owner(cqe) != ((*ci >> LOG_CQ) & 1))
			break;
		__asm__ volatile("" ::: "memory"); /* udma_from_device_barrier on x86 */
		o[n].qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
		o[n].wqe = be16toh(cqe->wqe_counter);
		o[n].bytes = be32toh(cqe->byte_cnt);
		(*ci)++;
		n++;
	}
	dbr[0] = htobe32(*ci & 0xffffff);
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s post|poll inline64|write4k BATCH ITERS\n", argv[0]);
		return 2;
	}
	int inl = strcmp(argv[2], "inline64") == 0, batch = atoi(argv[3]), iters = atoi(argv[4]);
	uint32_t dbr[2] = {0, 0};
	if (strcmp(argv[1], "post") == 0) {
		uint8_t *ring = aligned_alloc(4096, RING_BBS * 64 + 128);
		uint8_t payload[64];
		uint16_t cur = 0;
		memset(payload, 0x5a, 64);
		for (int i = 0; i < iters; i++)
			bench_c_post(ring, dbr, &cur, inl, batch, payload);
		printf("%u\n", (unsigned)bf_reg & 1);
	} else {
		uint8_t *ring = aligned_alloc(4096, (1u << LOG_CQ) * 64);
		struct out *o = calloc(batch, sizeof(*o));
		uint32_t ci = 0;
		memset(ring, 0xf0, (1u << LOG_CQ) * 64);
		for (int i = 0; i < iters; i++) {
			for (int k = 0; k < batch; k++)
				ring[(size_t)((ci + k) & ((1u << LOG_CQ) - 1)) * 64 + 63] = ((ci + k) >> LOG_CQ) & 1;
			if (bench_c_poll(ring, dbr, &ci, batch, o) != batch)
				return 3;
		}
	}
	return 0;
}
