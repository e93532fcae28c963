/* The GID table through the C API, as rxe's (src/verbs/gids.rs) for a device on an address
 * of no interface (ROCE_EMU_DEVICES=rxe0=127.0.21.6, MAC all zeros): gid_tbl_len 1024;
 * index 0 the link-local default GID fe80::200:ff:fe00:0, index 1 ::ffff:127.0.21.6, the
 * rest empty. ibv_query_gid succeeds on every index (zero GIDs for empty ones, as UCX
 * needs), ibv_query_gid_ex says ENODATA for an empty one, ibv_query_gid_table lists the
 * two in use, ibv_query_gid_type and the sysfs files (gids/N, gid_attrs/types/N,
 * gid_attrs/ndevs/N) read as the kernel's; modify_qp takes sgid_index 1 and refuses the
 * others (EINVAL). */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                                    \
	do {                                                                             \
		if (!(c)) {                                                              \
			fprintf(stderr, "FAIL line %d: ", __LINE__);                     \
			fprintf(stderr, __VA_ARGS__);                                    \
			fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));   \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

/* infiniband/driver.h's, without the rest of that header. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);

static void expect_gid(const union ibv_gid *g, const char *text)
{
	char s[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, g->raw, s, sizeof s);
	CHECK(!strcmp(s, text), "GID %s, expected %s", s, text);
}

static int rtr(struct ibv_qp *qp, uint8_t sgid_index)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");

	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port");
	CHECK(pa.gid_tbl_len == 1024, "gid_tbl_len %d, rxe's is 1024", pa.gid_tbl_len);
	int used = 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		CHECK(!ibv_query_gid(ctx, 1, i, &g), "ibv_query_gid %d", i);
		static const union ibv_gid zero;
		used += !!memcmp(&g, &zero, sizeof g);
		if (i == 0)
			expect_gid(&g, "fe80::200:ff:fe00:0");
		if (i == 1) {
			expect_gid(&g, "::ffff:127.0.21.6");
			gid = g;
		}
	}
	CHECK(used == 2, "%d GIDs in use, expected 2", used);
	union ibv_gid g;
	CHECK(ibv_query_gid(ctx, 1, 1024, &g) && errno == EINVAL, "index 1024: EINVAL");
	CHECK(ibv_query_gid(ctx, 2, 0, &g) && errno == EINVAL, "port 2: EINVAL");
	printf("PASS ibv_query_gid\n");

	struct ibv_gid_entry e;
	CHECK(!ibv_query_gid_ex(ctx, 1, 1, &e, 0), "ibv_query_gid_ex 1");
	CHECK(e.gid_index == 1 && e.port_num == 1 && e.gid_type == IBV_GID_TYPE_ROCE_V2,
	      "entry 1: index %u port %u type %u", e.gid_index, e.port_num, e.gid_type);
	expect_gid(&e.gid, "::ffff:127.0.21.6");
	CHECK(!ibv_query_gid_ex(ctx, 1, 0, &e, 0), "ibv_query_gid_ex 0");
	expect_gid(&e.gid, "fe80::200:ff:fe00:0");
	CHECK(ibv_query_gid_ex(ctx, 1, 2, &e, 0) == ENODATA, "empty slot: ENODATA");
	CHECK(ibv_query_gid_ex(ctx, 1, 1024, &e, 0) == EINVAL, "index 1024: EINVAL");
	printf("PASS ibv_query_gid_ex\n");

	struct ibv_gid_entry t[4];
	ssize_t k = ibv_query_gid_table(ctx, t, 4, 0);
	CHECK(k == 2, "ibv_query_gid_table: %zd entries", k);
	CHECK(t[0].gid_index == 0 && t[1].gid_index == 1 && t[1].gid_type == IBV_GID_TYPE_ROCE_V2,
	      "table indices %u %u", t[0].gid_index, t[1].gid_index);
	expect_gid(&t[1].gid, "::ffff:127.0.21.6");
	CHECK(ibv_query_gid_table(ctx, t, 1, 0) < 0, "a table too small for the GIDs fails");
	printf("PASS ibv_query_gid_table\n");

	int ty = -1;
	CHECK(!ibv_query_gid_type(ctx, 1, 1, &ty) && ty == 1, "type of 1: %d (RoCE v2 = 1)", ty);
	CHECK(!ibv_query_gid_type(ctx, 1, 7, &ty) && ty == 0, "type of an empty slot: %d", ty);
	printf("PASS ibv_query_gid_type\n");

	char buf[64];
	const char *dir = list[0]->ibdev_path;
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gids/1", buf, sizeof buf) > 0 &&
		      !strcmp(buf, "0000:0000:0000:0000:0000:ffff:7f00:1506"),
	      "gids/1: %s", buf);
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gids/0", buf, sizeof buf) > 0 &&
		      !strcmp(buf, "fe80:0000:0000:0000:0200:00ff:fe00:0000"),
	      "gids/0: %s", buf);
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gids/9", buf, sizeof buf) > 0 &&
		      !strcmp(buf, "0000:0000:0000:0000:0000:0000:0000:0000"),
	      "gids/9: %s", buf);
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gid_attrs/types/1", buf, sizeof buf) > 0 &&
		      !strcmp(buf, "RoCE v2"),
	      "types/1: %s", buf);
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gid_attrs/types/9", buf, sizeof buf) < 0 &&
		      errno == EINVAL,
	      "types/9 of an empty slot: EINVAL");
	/* An address on no interface: no netdev (the kernel's EINVAL for a NULL ndev). */
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gid_attrs/ndevs/1", buf, sizeof buf) < 0,
	      "ndevs/1 without an interface");
	CHECK(ibv_read_sysfs_file(dir, "ports/1/gids/1024", buf, sizeof buf) < 0,
	      "gids/1024 does not exist");
	printf("PASS sysfs\n");

	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = {.max_send_wr = 1, .max_recv_wr = 1,
					       .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	CHECK(qp, "ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS), "INIT");
	CHECK(rtr(qp, 0) == EINVAL, "sgid_index 0 (link-local) must be EINVAL");
	CHECK(rtr(qp, 2) == EINVAL, "sgid_index 2 (empty) must be EINVAL");
	CHECK(!rtr(qp, 1), "sgid_index 1 (the device's address)");
	/* ibv_query_qp gives back the index set: a program that re-applies the queried
	 * attributes after a reset (pyverbs' test_mr) must get a usable one. */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qinit;
	CHECK(!ibv_query_qp(qp, &q, IBV_QP_AV, &qinit), "ibv_query_qp");
	CHECK(q.ah_attr.is_global && q.ah_attr.grh.sgid_index == 1 &&
		      !memcmp(&q.ah_attr.grh.dgid, &gid, 16),
	      "ibv_query_qp: sgid_index %d, want 1", q.ah_attr.grh.sgid_index);
	printf("PASS sgid_index\n");

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
