/* The same-work C baseline of qemu-tests/bench/wqe-cost.sh: a poster and a poller written the
 * way rdma-core 56's providers/mlx5 (qp.c `_mlx5_post_send`, `post_send_db`; cq.c
 * `mlx5_poll_one`, `mlx5_get_next_cqe`, `get_req_context`) do them, doing every piece of work
 * our driver does per call, per WQE and per CQE — no less, so that the ratio against it says
 * what our code costs and not what it skips:
 *
 * per post call:  one lock (rdma-core's sq.lock; ours is the book table's read lock), the QP
 *                 state check, then per request:
 *   - operands loaded from a request array, fm_ce_se from a one-word table;
 *   - the inline limit check or the SGE count check and each data segment's length checked for
 *     mlx5's inline bit (bit 31);
 *   - the room check against the tail the poller moves;
 *   - inline data copied in, split where it passes the end of the ring;
 *   - wr_id and next-index books written;
 *   then the doorbell record, sfence, the doorbell (a lone WQE with inline data that fits half
 *   the BlueFlame register written into it whole, as rdma-core and ours do), the BlueFlame
 *   offset toggled, and
 *   the head a software flush would complete up to (ours keeps it for a failed device).
 *   rdma-core's trailing mmio_flush_writes is left out: our driver has none.
 * per poll call:  one lock (cq.lock), then per CQE: the owner peek, the resize skip, the QPN
 *   compared with the run's cached QP and otherwise looked up in rdma-core's two-level QP
 *   table, the completion record zeroed and filled (opcode by table, status, byte count,
 *   QPN), wr_id and the send queue's tail taken from the book; then the CQ doorbell record.
 *
 * Rings live in ordinary memory (as in the Rust runs); the doorbell register is a volatile
 * variable. Only the bench_c_* functions are counted.
 * Usage: same_work post|poll inline64|write4k BATCH ITERS */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_BBS 64
#define LOG_CQ 12
#define QPN 0x100
#define MAX_INLINE 64
#define MAX_GS 1

enum { QPS_RTS = 3 };

struct req {
	uint64_t wr_id, raddr, addr;
	uint32_t rkey, len, lkey;
	int signaled;
	const uint8_t *inl;
	uint32_t inl_len;
};

struct sq {
	pthread_spinlock_t lock;
	int state;
	uint8_t *buf, *qend;
	uint32_t wqe_cnt, cur_post, tail, head, qpn;
	uint64_t *wrid;
	uint32_t *wqe_head;
	volatile uint32_t *dbrec;
	volatile uint64_t *bf_reg;
	uint32_t bf_offset, bf_size;
	uint32_t flush_head;
};

struct cq {
	pthread_spinlock_t lock;
	uint8_t *buf;
	uint32_t cons_index;
	volatile uint32_t *dbrec;
};

/* rdma-core's ibv_wc, every field written per completion. */
struct wc {
	uint64_t wr_id;
	int status, opcode;
	uint32_t vendor_err, byte_len, imm_data, qp_num, src_qp;
	unsigned wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
};

/* rdma-core ctx->qp_table: 256 tables of 4096 entries, each with a reference count. */
struct qp_table_ent {
	int refcnt;
	struct sq **table;
};
static struct qp_table_ent qp_table[256];

static volatile uint64_t bf_word[64]; /* one BlueFlame register: two halves of 256 bytes */

static const uint8_t fm_ce_se_tbl[2] = {0, MLX5_WQE_CTRL_CQ_UPDATE};
/* ibv_wc_opcode of a requester CQE by the WQE opcode in sop_drop_qpn bits 31:24. */
static const uint8_t req_opcode_tbl[32] = {[MLX5_OPCODE_RDMA_WRITE] = 1, [MLX5_OPCODE_SEND] = 0,
					   [MLX5_OPCODE_RDMA_READ] = 2};

static inline void copy_inline(struct sq *sq, uint8_t *dst, const uint8_t *src, uint32_t len)
{
	if (dst + len > sq->qend) {
		uint32_t first = sq->qend - dst;
		memcpy(dst, src, first);
		memcpy(sq->buf, src + first, len - first);
	} else {
		memcpy(dst, src, len);
	}
}

__attribute__((noinline)) int bench_c_post(struct sq *sq, const struct req *reqs, int n, int inl)
{
	int err = 0, nreq;
	uint8_t *ctrl = NULL;
	uint32_t size = 0;

	pthread_spin_lock(&sq->lock);
	if (sq->state != QPS_RTS) {
		pthread_spin_unlock(&sq->lock);
		return -1;
	}
	for (nreq = 0; nreq < n; nreq++) {
		const struct req *r = &reqs[nreq];
		uint32_t idx = sq->cur_post & (sq->wqe_cnt - 1);
		uint8_t *seg;
		uint8_t opcode = inl ? MLX5_OPCODE_SEND : MLX5_OPCODE_RDMA_WRITE;

		/* Room for the largest WQE this request can take (as ours checks per request). */
		if (sq->cur_post - sq->tail + 2 > sq->wqe_cnt) {
			err = -2;
			break;
		}
		ctrl = sq->buf + (size_t)idx * 64;
		seg = ctrl + sizeof(struct mlx5_wqe_ctrl_seg);
		size = sizeof(struct mlx5_wqe_ctrl_seg) / 16;
		if (!inl) {
			struct mlx5_wqe_raddr_seg *rs = (struct mlx5_wqe_raddr_seg *)seg;
			rs->raddr = htobe64(r->raddr);
			rs->rkey = htobe32(r->rkey);
			rs->reserved = 0;
			seg += sizeof(*rs);
			size += sizeof(*rs) / 16;
		}
		if (inl) {
			if (r->inl_len > MAX_INLINE) {
				err = -3;
				break;
			}
			*(uint32_t *)seg = htobe32(MLX5_INLINE_SEG | r->inl_len);
			copy_inline(sq, seg + 4, r->inl, r->inl_len);
			size += (r->inl_len + 4 + 15) / 16;
		} else {
			if (MAX_GS < 1 || (r->len & 0x80000000u)) {
				err = -4;
				break;
			}
			if (seg == sq->qend)
				seg = sq->buf;
			mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, r->len, r->lkey, r->addr);
			size += 1;
		}
		struct mlx5_wqe_ctrl_seg *c = (struct mlx5_wqe_ctrl_seg *)ctrl;
		c->opmod_idx_opcode = htobe32(((sq->cur_post & 0xffff) << 8) | opcode);
		c->qpn_ds = htobe32((sq->qpn << 8) | size);
		c->signature = 0;
		c->dci_stream_channel_id = 0;
		c->fm_ce_se = fm_ce_se_tbl[r->signaled != 0];
		c->imm = 0;
		sq->wrid[idx] = r->wr_id;
		sq->wqe_head[idx] = sq->head + nreq;
		sq->cur_post += (size * 16 + 63) / 64;
	}
	if (nreq) {
		sq->head += nreq;
		__asm__ volatile("" ::: "memory"); /* udma_to_device_barrier on x86 */
		sq->dbrec[1] = htobe32(sq->cur_post & 0xffff);
		__asm__ volatile("sfence" ::: "memory"); /* mmio_wc_start */
		/* BlueFlame for a lone WQE with inline data that fits half the register (rdma-core
		 * `post_send_db`: nreq == 1, inl, size <= bf->buf_size / 16), else the doorbell word
		 * alone. */
		volatile uint64_t *bf = sq->bf_reg + sq->bf_offset / 8;
		uint32_t bbs = (size * 16 + 63) / 64; /* the last (here: only) WQE's */
		if (nreq == 1 && inl && bbs * 64 <= sq->bf_size) {
			for (uint32_t k = 0; k < bbs * 8; k++) {
				const uint8_t *src = sq->buf + (((size_t)(ctrl - sq->buf) + k * 8) & ((size_t)sq->wqe_cnt * 64 - 1));
				bf[k] = *(const uint64_t *)src;
			}
		} else {
			bf[0] = *(uint64_t *)ctrl;
		}
		sq->bf_offset ^= sq->bf_size;
		/* What a software flush completes up to, should the device fail (ours keeps it;
		 * rdma-core has no software flush). */
		__atomic_store_n(&sq->flush_head, sq->cur_post, __ATOMIC_RELEASE);
	}
	pthread_spin_unlock(&sq->lock);
	return err;
}

static inline struct sq *find_qp(uint32_t qpn)
{
	int tind = qpn >> 12;
	if (qp_table[tind].refcnt)
		return qp_table[tind].table[qpn & 0xfff];
	return NULL;
}

__attribute__((noinline)) int bench_c_poll(struct cq *cq, int ne, struct wc *wc)
{
	struct sq *cur = NULL;
	uint32_t cur_qpn = 0xffffffff;
	int n = 0;

	pthread_spin_lock(&cq->lock);
	while (n < ne) {
		struct mlx5_cqe64 *cqe =
			(struct mlx5_cqe64 *)(cq->buf + (size_t)(cq->cons_index & ((1u << LOG_CQ) - 1)) * 64);
		uint8_t op = mlx5dv_get_cqe_opcode(cqe);
		if (op == MLX5_CQE_INVALID || mlx5dv_get_cqe_owner(cqe) != ((cq->cons_index >> LOG_CQ) & 1))
			break;
		__asm__ volatile("" ::: "memory"); /* udma_from_device_barrier on x86 */
		cq->cons_index++;
		if (op == MLX5_CQE_RESIZE_CQ)
			continue;
		uint32_t word = be32toh(cqe->sop_drop_qpn);
		uint32_t qpn = word & 0xffffff;
		if (qpn != cur_qpn) {
			cur = find_qp(qpn);
			cur_qpn = qpn;
		}
		if (!cur) {
			pthread_spin_unlock(&cq->lock);
			return -1;
		}
		struct wc *w = &wc[n];
		memset(w, 0, sizeof(*w));
		w->qp_num = qpn;
		if (op == MLX5_CQE_REQ) {
			uint32_t idx = be16toh(cqe->wqe_counter) & (cur->wqe_cnt - 1);
			w->opcode = req_opcode_tbl[word >> 24 & 31];
			w->byte_len = be32toh(cqe->byte_cnt);
			w->wr_id = cur->wrid[idx];
			cur->tail = cur->wqe_head[idx] + 1;
			w->status = 0;
		} else {
			w->status = 1;
		}
		n++;
	}
	cq->dbrec[0] = htobe32(cq->cons_index & 0xffffff);
	pthread_spin_unlock(&cq->lock);
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s post|poll inline64|write4k BATCH ITERS\n", argv[0]);
		return 2;
	}
	int inl = strcmp(argv[2], "inline64") == 0, batch = atoi(argv[3]), iters = atoi(argv[4]);
	static uint32_t dbr[2];
	static struct sq sq;
	static struct sq *table[4096];
	pthread_spin_init(&sq.lock, 0);
	sq.state = QPS_RTS;
	sq.wqe_cnt = RING_BBS;
	sq.buf = aligned_alloc(4096, RING_BBS * 64);
	sq.qend = sq.buf + RING_BBS * 64;
	sq.wrid = calloc(RING_BBS, sizeof(uint64_t));
	sq.wqe_head = calloc(RING_BBS, sizeof(uint32_t));
	sq.dbrec = dbr;
	sq.bf_reg = bf_word;
	sq.bf_size = 256;
	sq.qpn = QPN;
	table[QPN & 0xfff] = &sq;
	qp_table[QPN >> 12] = (struct qp_table_ent){1, table};
	if (strcmp(argv[1], "post") == 0) {
		uint8_t payload[64];
		memset(payload, 0x5a, 64);
		struct req *reqs = calloc(batch, sizeof(*reqs));
		for (int i = 0; i < batch; i++)
			reqs[i] = (struct req){.wr_id = 1, .raddr = 0x100000000ull, .addr = 0x200000000ull,
					       .rkey = 0x1234, .len = 4096, .lkey = 0x5678,
					       .signaled = i == batch - 1, .inl = payload, .inl_len = 64};
		for (int i = 0; i < iters; i++) {
			if (bench_c_post(&sq, reqs, batch, inl) != 0)
				return 3;
			sq.tail = sq.cur_post; /* what the poller does when the completions come */
		}
		printf("%u\n", (unsigned)bf_word[0] & 1);
	} else {
		static struct cq cq;
		pthread_spin_init(&cq.lock, 0);
		cq.buf = aligned_alloc(4096, (1u << LOG_CQ) * 64);
		cq.dbrec = dbr;
		struct wc *o = calloc(batch, sizeof(*o));
		memset(cq.buf, 0xf0, (1u << LOG_CQ) * 64);
		uint64_t sum = 0;
		for (int i = 0; i < iters; i++) {
			for (int k = 0; k < batch; k++) {
				uint32_t ci = cq.cons_index + k;
				struct mlx5_cqe64 *c =
					(struct mlx5_cqe64 *)(cq.buf + (size_t)(ci & ((1u << LOG_CQ) - 1)) * 64);
				c->sop_drop_qpn = htobe32(MLX5_OPCODE_RDMA_WRITE << 24 | QPN);
				c->wqe_counter = htobe16(ci);
				c->op_own = (MLX5_CQE_REQ << 4) | ((ci >> LOG_CQ) & 1);
			}
			if (bench_c_poll(&cq, batch, o) != batch)
				return 3;
			for (int k = 0; k < batch; k++)
				sum += o[k].wr_id ^ o[k].qp_num ^ o[k].byte_len ^ o[k].opcode;
		}
		printf("%llu\n", (unsigned long long)(sum & 1));
	}
	return 0;
}
