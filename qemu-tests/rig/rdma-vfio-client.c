/*
 * rdma-vfio-client: opens an mlx5 function bound to vfio-pci with rdma-core's user-space
 * VFIO provider (mlx5_vfio), then allocates a PD, registers and deregisters two memory
 * regions (a whole buffer, then an unaligned sub-range of it), frees the PD and closes the
 * device. Every step is printed; any failure exits non-zero.
 *
 * Usage: rdma-vfio-client PCI-NAME [BYTES]     (e.g. 0000:01:00.0; BYTES >= 4096, default 65536)
 * Built against Debian trixie's libibverbs-dev (rdma-core 56), see test-rdma-vfio.sh.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

static int step_fail(const char *what)
{
	int e = errno;

	printf("RDMA-VFIO FAIL %s: errno %d (%s)\n", what, e, strerror(e));
	fflush(stdout);
	return 1;
}

static void step_ok(const char *what, const char *detail)
{
	printf("RDMA-VFIO OK %s%s%s\n", what, detail[0] ? " " : "", detail);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct mlx5dv_vfio_context_attr attr = {};
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *mr2;
	size_t len = 65536;
	char detail[160];
	void *buf;
	int n, rc;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s PCI-NAME [BYTES]\n", argv[0]);
		return 2;
	}
	if (argc == 3)
		len = strtoul(argv[2], NULL, 0);
	if (len < 4096) {
		fprintf(stderr, "%s: BYTES must be at least 4096\n", argv[0]);
		return 2;
	}

	attr.pci_name = argv[1];
	list = mlx5dv_get_vfio_device_list(&attr);
	if (!list)
		return step_fail("mlx5dv_get_vfio_device_list");
	for (n = 0; list[n]; n++)
		;
	if (n != 1) {
		printf("RDMA-VFIO FAIL mlx5dv_get_vfio_device_list: %d devices, expected 1\n", n);
		return 1;
	}
	snprintf(detail, sizeof(detail), "name=%s", ibv_get_device_name(list[0]));
	step_ok("mlx5dv_get_vfio_device_list", detail);

	ctx = ibv_open_device(list[0]);
	if (!ctx)
		return step_fail("ibv_open_device");
	step_ok("ibv_open_device", "");

	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return step_fail("ibv_alloc_pd");
	step_ok("ibv_alloc_pd", "");

	buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	if (!buf)
		return step_fail("aligned_alloc");
	memset(buf, 0x5a, len);
	mr = ibv_reg_mr(pd, buf, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		return step_fail("ibv_reg_mr");
	snprintf(detail, sizeof(detail), "bytes=%zu lkey=0x%x rkey=0x%x", len, mr->lkey, mr->rkey);
	step_ok("ibv_reg_mr", detail);

	/* A sub-range that starts and ends inside pages: MTT entries with a page offset. */
	mr2 = ibv_reg_mr(pd, (char *)buf + 100, len - 300, IBV_ACCESS_LOCAL_WRITE);
	if (!mr2)
		return step_fail("ibv_reg_mr(unaligned)");
	snprintf(detail, sizeof(detail), "bytes=%zu at +100 lkey=0x%x", len - 300, mr2->lkey);
	step_ok("ibv_reg_mr(unaligned)", detail);

	rc = ibv_dereg_mr(mr2);
	if (rc) {
		errno = rc;
		return step_fail("ibv_dereg_mr(unaligned)");
	}
	step_ok("ibv_dereg_mr(unaligned)", "");

	rc = ibv_dereg_mr(mr);
	if (rc) {
		errno = rc;
		return step_fail("ibv_dereg_mr");
	}
	step_ok("ibv_dereg_mr", "");

	rc = ibv_dealloc_pd(pd);
	if (rc) {
		errno = rc;
		return step_fail("ibv_dealloc_pd");
	}
	step_ok("ibv_dealloc_pd", "");

	rc = ibv_close_device(ctx);
	if (rc) {
		errno = rc;
		return step_fail("ibv_close_device");
	}
	step_ok("ibv_close_device", "");

	ibv_free_device_list(list);
	step_ok("ibv_free_device_list", "");
	free(buf);
	printf("RDMA-VFIO DONE\n");
	return 0;
}
