/* verbs-cost: rdma-core's own mlx5 provider posting and polling on a model HCA driven by Linux
 * mlx5_ib, for qemu-tests/bench/rdma-core-cost.sh, which runs it in the rig guest under
 * callgrind and counts the instructions inside the bench_* functions only (setup, waiting and
 * draining are outside them). The requests are the ones qemu-tests/bench/wqe-cost.sh gives our
 * driver: a 64-byte inline SEND, or a 4 KiB RDMA WRITE from one registered region, in batches
 * with the last request signaled (every request, in the poll modes).
 *
 * Usage: verbs-cost post|wr|poll|start-poll inline64|write4k BATCH ITERS
 *   post        ibv_post_send with a chained list of BATCH work requests
 *   wr          the batch API: ibv_wr_start, ibv_wr_send + ibv_wr_set_inline_data or
 *               ibv_wr_rdma_write + ibv_wr_set_sge per request, ibv_wr_complete
 *   poll        ibv_poll_cq of BATCH completions into struct ibv_wc
 *   start-poll  ibv_start_poll / ibv_next_poll / ibv_end_poll, reading the fields an ibv_wc has
 * Two RC QPs of the first device connected to each other through port 1's LID. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QP_DEPTH 64

static void die(const char *what)
{
	fprintf(stderr, "verbs-cost: %s failed\n", what);
	exit(1);
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq_ex *scq, *rcq;
static struct ibv_qp *qa, *qb;
static struct ibv_qp_ex *qax;
static struct ibv_mr *mr;
static uint8_t *buf;
static uint8_t payload[64];

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(scq),
		.recv_cq = ibv_cq_ex_to_cq(rcq),
		.cap = {.max_send_wr = QP_DEPTH, .max_recv_wr = QP_DEPTH, .max_send_sge = 1,
			.max_recv_sge = 1, .max_inline_data = 64},
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *q = ibv_create_qp_ex(ctx, &a);
	if (!q)
		die("ibv_create_qp_ex");
	return q;
}

static void connect_qp(struct ibv_qp *q, uint32_t peer, uint16_t lid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

__attribute__((noinline)) int bench_post(struct ibv_qp *q, struct ibv_send_wr *wrs)
{
	struct ibv_send_wr *bad;
	return ibv_post_send(q, wrs, &bad);
}

__attribute__((noinline)) int bench_wr(struct ibv_qp_ex *q, int inl, int batch, int all_signaled)
{
	ibv_wr_start(q);
	for (int i = 0; i < batch; i++) {
		q->wr_id = i;
		q->wr_flags = (all_signaled || i == batch - 1) ? IBV_SEND_SIGNALED : 0;
		if (inl) {
			ibv_wr_send(q);
			ibv_wr_set_inline_data(q, payload, sizeof(payload));
		} else {
			ibv_wr_rdma_write(q, mr->rkey, (uintptr_t)buf + 4096);
			ibv_wr_set_sge(q, mr->lkey, (uintptr_t)buf, 4096);
		}
	}
	return ibv_wr_complete(q);
}

__attribute__((noinline)) int bench_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return r;
		got += r;
	}
	return got;
}

/* What an ibv_wc holds, read through the extended CQ's accessors. */
struct wc_fields {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, qp_num, vendor_err, wc_flags;
};

__attribute__((noinline)) int bench_start_poll(struct ibv_cq_ex *cq, int n, struct wc_fields *o)
{
	struct ibv_poll_cq_attr attr = {};
	int got = 0;
	while (ibv_start_poll(cq, &attr) != 0)
		;
	for (;;) {
		o[got].wr_id = cq->wr_id;
		o[got].status = cq->status;
		o[got].opcode = ibv_wc_read_opcode(cq);
		o[got].byte_len = ibv_wc_read_byte_len(cq);
		o[got].qp_num = ibv_wc_read_qp_num(cq);
		o[got].vendor_err = ibv_wc_read_vendor_err(cq);
		o[got].wc_flags = ibv_wc_read_wc_flags(cq);
		if (++got == n || ibv_next_poll(cq) != 0)
			break;
	}
	ibv_end_poll(cq);
	return got;
}

/* Outside the counted functions: wait for `n` completions on `cq` and check them. */
static void drain(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc[64];
	int got = 0, spins = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got > 64 ? 64 : n - got, wc);
		if (r < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < r; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "verbs-cost: completion status %s\n", ibv_wc_status_str(wc[i].status));
				exit(1);
			}
		got += r;
		if (r == 0 && ++spins > 2000000)
			die("waiting for completions");
	}
}

static void post_recvs(int n)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf + 8192, .length = 4096, .lkey = mr->lkey};
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(qb, &wr, &bad))
			die("ibv_post_recv");
	}
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s post|wr|poll|start-poll inline64|write4k BATCH ITERS\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	int inl = strcmp(argv[2], "inline64") == 0, batch = atoi(argv[3]), iters = atoi(argv[4]);
	int polling = !strcmp(mode, "poll") || !strcmp(mode, "start-poll");
	if (batch < 1 || batch > 32 || iters < 1)
		die("arguments");
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	struct ibv_cq_init_attr_ex ca = {.cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS};
	scq = ibv_create_cq_ex(ctx, &ca);
	rcq = ibv_create_cq_ex(ctx, &ca);
	if (!pd || !scq || !rcq)
		die("pd/cq");
	buf = aligned_alloc(4096, 3 * 4096);
	memset(buf, 0x5a, 3 * 4096);
	memset(payload, 0x5a, sizeof(payload));
	mr = ibv_reg_mr(pd, buf, 3 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	qa = make_qp();
	qb = make_qp();
	qax = ibv_qp_to_qp_ex(qa);
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		die("ibv_query_port");
	connect_qp(qa, qb->qp_num, pa.lid);
	connect_qp(qb, qa->qp_num, pa.lid);

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey};
	struct ibv_send_wr wrs[32];
	for (int i = 0; i < batch; i++) {
		memset(&wrs[i], 0, sizeof(wrs[i]));
		wrs[i].wr_id = i;
		wrs[i].next = i + 1 < batch ? &wrs[i + 1] : NULL;
		wrs[i].send_flags = (polling || i == batch - 1) ? IBV_SEND_SIGNALED : 0;
		if (inl) {
			static struct ibv_sge in = {0};
			in.addr = (uintptr_t)payload;
			in.length = sizeof(payload);
			wrs[i].opcode = IBV_WR_SEND;
			wrs[i].send_flags |= IBV_SEND_INLINE;
			wrs[i].sg_list = &in;
			wrs[i].num_sge = 1;
		} else {
			wrs[i].opcode = IBV_WR_RDMA_WRITE;
			wrs[i].sg_list = &sge;
			wrs[i].num_sge = 1;
			wrs[i].wr.rdma.remote_addr = (uintptr_t)buf + 4096;
			wrs[i].wr.rdma.rkey = mr->rkey;
		}
	}
	struct ibv_wc wc[32];
	struct wc_fields wf[32];
	int short_polls = 0;
	for (int it = 0; it < iters; it++) {
		if (inl)
			post_recvs(batch);
		int r;
		if (!strcmp(mode, "wr"))
			r = bench_wr(qax, inl, batch, 0);
		else if (!strcmp(mode, "post"))
			r = bench_post(qa, wrs);
		else
			r = ibv_post_send(qa, wrs, &(struct ibv_send_wr *){NULL});
		if (r)
			die("posting");
		if (polling) {
			/* Let the device write every CQE first, so the counted poll finds them all. */
			usleep(20000);
			int got = !strcmp(mode, "poll") ? bench_poll(ibv_cq_ex_to_cq(scq), batch, wc)
							 : bench_start_poll(scq, batch, wf);
			if (got != batch)
				short_polls++;
			for (int i = 0; i < got; i++)
				if ((!strcmp(mode, "poll") ? wc[i].status : wf[i].status) != IBV_WC_SUCCESS)
					die("a completion");
			if (got < batch)
				drain(ibv_cq_ex_to_cq(scq), batch - got);
		} else {
			drain(ibv_cq_ex_to_cq(scq), 1);
		}
		if (inl)
			drain(ibv_cq_ex_to_cq(rcq), batch);
	}
	if (!inl && memcmp(buf, buf + 4096, 4096))
		die("the written data check");
	printf("verbs-cost: %s %s batch %d iters %d short_polls %d ok\n", mode, argv[2], batch, iters,
	       short_polls);
	return 0;
}
