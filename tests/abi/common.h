/* What the C tests of the drop-in share (tests/abi/verbs_paths.c, hardening.c): CHECK,
 * the context, PD and GID they set up, a clock, an RC connection to a QP of the same device
 * (PSNs derived from the QPNs), and waiting for the next completion. */
#ifndef ROCE_EMU_ABI_TEST_COMMON_H
#define ROCE_EMU_ABI_TEST_COMMON_H
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(c, ...)                                                                    \
	do {                                                                             \
		if (!(c)) {                                                              \
			fprintf(stderr, "FAIL line %d: ", __LINE__);                     \
			fprintf(stderr, __VA_ARGS__);                                    \
			fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));    \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
/* The device's own GID: index 1, as rxe's IPv4 GID (index 0 is the link-local default GID,
 * which the device does not send from; src/verbs/gids.rs). */
static const int GIDX = 1;
static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = ACCESS;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = dest * 7 & 0xffffff;
	a.max_dest_rd_atomic = 8;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = GIDX;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = qp->qp_num * 7 & 0xffffff;
	a.max_rd_atomic = 8;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					  IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

/* The next completion of `cq` (classic poll), waiting at most 10 s. */
static struct ibv_wc next_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = now() + 10;
	while (now() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		if (n == 1)
			return wc;
	}
	CHECK(0, "no completion within 10 s");
	return wc;
}

#endif
