/* Every inline path of rdma-core 44's verbs.h through the drop-in libibverbs.so.1, compiled
 * against Debian 12's headers: queries through verbs_context (ibv_query_port,
 * ibv_query_device_ex, ibv_query_gid_ex), ibv_post_send/ibv_post_recv/ibv_poll_cq/
 * ibv_req_notify_cq through ibv_context::ops, the ibv_wr_* set through ibv_qp_ex, extended
 * polling through ibv_cq_ex; then what real programs do to a NIC: O_NONBLOCK event fds,
 * unsupported features (EOPNOTSUPP), memory deregistered (and unmapped) while a peer still
 * writes to it, and fork. Two QPs of one context talk to each other over the device's one
 * address. Prints "PASS <step>" per step; any failure exits 1 naming it. tests/abi_paths.rs
 * builds and runs it. */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static struct ibv_qp *rc_qp(struct ibv_cq *cq, uint32_t inline_size)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2,
			.max_recv_sge = 2, .max_inline_data = inline_size},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp");
	CHECK(ia.cap.max_inline_data >= inline_size, "granted inline %u", ia.cap.max_inline_data);
	return qp;
}

/* Two threads polling one CQ at once: every completion is handed out exactly once. */
#define CONCURRENT 512
static atomic_int seen[CONCURRENT];
static atomic_int total;
static struct ibv_cq *shared_cq;

static void *poller(void *arg)
{
	(void)arg;
	struct ibv_wc wc[8];
	double end = now() + 20;
	while (atomic_load(&total) < CONCURRENT && now() < end) {
		int n = ibv_poll_cq(shared_cq, 8, wc);
		if (n < 0)
			return (void *)1;
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id >= CONCURRENT)
				return (void *)2;
			atomic_fetch_add(&seen[wc[i].wr_id], 1);
		}
		atomic_fetch_add(&total, n);
	}
	return NULL;
}

/* A child process: its own context on the same device (the port is shared), two QPs, one
 * SEND; exit status 0 if the bytes arrived. */
static int child_traffic(struct ibv_device *dev)
{
	ctx = ibv_open_device(dev);
	CHECK(ctx, "child: ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq, "child: pd/cq");
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, ACCESS);
	CHECK(mr, "child: reg_mr");
	struct ibv_qp *a = rc_qp(cq, 0), *b = rc_qp(cq, 0);
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	struct ibv_sge rs = {(uintptr_t)buf + 2048, 64, mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
	CHECK(!ibv_post_recv(b, &rw, &bad_r), "child: post_recv");
	strcpy(buf, "from the child");
	struct ibv_sge ss = {(uintptr_t)buf, 32, mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK(!ibv_post_send(a, &sw, &bad), "child: post_send");
	for (int i = 0; i < 2; i++)
		CHECK(next_wc(cq).status == IBV_WC_SUCCESS, "child: completion");
	CHECK(!strcmp(buf + 2048, "from the child"), "child: bytes");
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");

	/* ---- queries through verbs_context ---- */
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET,
	      "port state %d link %d", pa.state, pa.link_layer);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2 must be EINVAL");
	struct ibv_device_attr_ex dx;
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "ibv_query_device_ex");
	CHECK(dx.orig_attr.vendor_id == 0xffffff && dx.orig_attr.phys_port_cnt == 1, "device attr");
	CHECK(!ibv_query_gid(ctx, 1, GIDX, &gid), "ibv_query_gid");
	struct ibv_gid_entry ge;
	CHECK(!ibv_query_gid_ex(ctx, 1, GIDX, &ge, 0), "ibv_query_gid_ex");
	CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(&ge.gid, &gid, 16), "gid entry");
	printf("PASS queries\n");

	/* ---- objects: PD, MRs, a channel, a CQ on it, an extended CQ, two QPs ---- */
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	char *a_buf = aligned_alloc(4096, 65536), *b_buf = aligned_alloc(4096, 65536);
	memset(a_buf, 0, 65536);
	memset(b_buf, 0, 65536);
	struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, 65536, ACCESS);
	struct ibv_mr *b_mr = ibv_reg_mr(pd, b_buf, 65536, ACCESS);
	CHECK(a_mr && b_mr, "ibv_reg_mr");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel");
	struct ibv_cq *a_cq = ibv_create_cq(ctx, 64, (void *)0x1234, ch, 0);
	CHECK(a_cq, "ibv_create_cq");
	struct ibv_cq_init_attr_ex cx = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			    IBV_WC_EX_WITH_SRC_QP,
	};
	struct ibv_cq_ex *b_cqx = ibv_create_cq_ex(ctx, &cx);
	CHECK(b_cqx, "ibv_create_cq_ex");
	struct ibv_cq *b_cq = ibv_cq_ex_to_cq(b_cqx);
	cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	CHECK(!ibv_create_cq_ex(ctx, &cx) && errno == EOPNOTSUPP, "wall clock timestamps must be EOPNOTSUPP");
	struct ibv_qp *a = rc_qp(a_cq, 64);
	struct ibv_qp_init_attr_ex qx = {
		.send_cq = b_cq, .recv_cq = b_cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
	};
	struct ibv_qp *b = ibv_create_qp_ex(ctx, &qx);
	CHECK(b, "ibv_create_qp_ex");
	struct ibv_qp_ex *bx = ibv_qp_to_qp_ex(b);
	CHECK(bx, "ibv_qp_to_qp_ex");
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(a, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi), "ibv_query_qp");
	CHECK(qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == b->qp_num, "query_qp: %d %u",
	      qa.qp_state, qa.dest_qp_num);
	printf("PASS objects\n");

	/* ---- classic posts: inline SEND with immediate, and a solicited SEND from an SGE ---- */
	struct ibv_sge rs[2] = {{(uintptr_t)b_buf, 64, b_mr->lkey},
				{(uintptr_t)b_buf + 64, 64, b_mr->lkey}};
	struct ibv_recv_wr rw[2] = {{.wr_id = 11, .sg_list = &rs[0], .num_sge = 1},
				    {.wr_id = 12, .sg_list = &rs[1], .num_sge = 1}};
	rw[0].next = &rw[1];
	struct ibv_recv_wr *bad_r;
	CHECK(!ibv_post_recv(b, rw, &bad_r), "ibv_post_recv");
	char msg[32] = "inline hello";
	strcpy(a_buf + 1024, "sge hello");
	struct ibv_sge s0 = {(uintptr_t)msg, sizeof msg, 0};
	struct ibv_sge s1 = {(uintptr_t)a_buf + 1024, 16, a_mr->lkey};
	struct ibv_send_wr sw[2] = {
		{.wr_id = 1, .sg_list = &s0, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE, .imm_data = htonl(0xabcd)},
		{.wr_id = 2, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_SEND,
		 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED},
	};
	sw[0].next = &sw[1];
	struct ibv_send_wr *bad;
	memset(msg + 20, 0, 1); /* the inline bytes were copied at post time */
	CHECK(!ibv_post_send(a, sw, &bad), "ibv_post_send");
	strcpy(msg, "changed after post");
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = next_wc(a_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send wc %s",
		      ibv_wc_status_str(wc.status));
	}
	/* Extended polling on B. */
	struct ibv_poll_cq_attr pattr = {0};
	int got = 0, ret;
	double end = now() + 10;
	while (got < 2 && now() < end) {
		ret = ibv_start_poll(b_cqx, &pattr);
		if (ret == ENOENT)
			continue;
		CHECK(!ret, "ibv_start_poll %d", ret);
		do {
			CHECK(b_cqx->status == IBV_WC_SUCCESS, "recv status %d", b_cqx->status);
			CHECK(ibv_wc_read_opcode(b_cqx) == IBV_WC_RECV, "recv opcode");
			CHECK(ibv_wc_read_qp_num(b_cqx) == b->qp_num, "qp_num");
			CHECK(ibv_wc_read_src_qp(b_cqx) == a->qp_num, "src_qp");
			if (b_cqx->wr_id == 11) {
				CHECK(ibv_wc_read_byte_len(b_cqx) == 32, "byte_len");
				CHECK(ibv_wc_read_wc_flags(b_cqx) & IBV_WC_WITH_IMM, "imm flag");
				CHECK(ntohl(ibv_wc_read_imm_data(b_cqx)) == 0xabcd, "imm value");
			}
			got++;
		} while ((ret = ibv_next_poll(b_cqx)) == 0);
		CHECK(ret == ENOENT, "ibv_next_poll %d", ret);
		ibv_end_poll(b_cqx);
	}
	CHECK(got == 2, "two receive completions, got %d", got);
	CHECK(!strcmp(b_buf, "inline hello") && !strcmp(b_buf + 64, "sge hello"), "received bytes");
	printf("PASS post_send, post_recv, poll_cq, extended polling\n");

	/* ---- completion events on an O_NONBLOCK channel ---- */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "EAGAIN before any event");
	CHECK(!ibv_req_notify_cq(a_cq, 0), "ibv_req_notify_cq");
	memset(a_buf, 'w', 4096);
	struct ibv_sge ws = {(uintptr_t)a_buf, 4096, a_mr->lkey};
	struct ibv_send_wr ww = {.wr_id = 3, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	ww.wr.rdma.remote_addr = (uintptr_t)b_buf + 8192;
	ww.wr.rdma.rkey = b_mr->rkey;
	CHECK(!ibv_post_send(a, &ww, &bad), "post WRITE");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1, "channel fd never readable");
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event");
	CHECK(ev_cq == a_cq && ev_ctx == (void *)0x1234, "event names the CQ and its context");
	ibv_ack_cq_events(ev_cq, 1);
	CHECK(next_wc(a_cq).wr_id == 3, "WRITE completion");
	CHECK(b_buf[8192] == 'w' && b_buf[8192 + 4095] == 'w', "WRITE landed in B's memory");
	printf("PASS completion channel (O_NONBLOCK)\n");

	/* ---- the ibv_wr_* set from B ---- */
	uint64_t *counter = (uint64_t *)(a_buf + 16384);
	*counter = 40;
	memset(b_buf + 20000, 'r', 1000);
	struct ibv_recv_wr arw = {.wr_id = 13, .sg_list = &(struct ibv_sge){(uintptr_t)a_buf + 30000, 64, a_mr->lkey}, .num_sge = 1};
	CHECK(!ibv_post_recv(a, &arw, &bad_r), "post_recv on A");
	ibv_wr_start(bx);
	bx->wr_id = 100;
	bx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(bx, a_mr->rkey, (uintptr_t)a_buf + 20000);
	ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf + 20000, 1000);
	bx->wr_id = 101;
	ibv_wr_rdma_read(bx, a_mr->rkey, (uintptr_t)a_buf + 20000);
	ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf + 40000, 1000);
	bx->wr_id = 102;
	ibv_wr_atomic_fetch_add(bx, a_mr->rkey, (uintptr_t)counter, 2);
	ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf + 50000, 8);
	bx->wr_id = 103;
	ibv_wr_atomic_cmp_swp(bx, a_mr->rkey, (uintptr_t)counter, 42, 7);
	ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf + 50008, 8);
	bx->wr_id = 104;
	ibv_wr_send_imm(bx, htonl(77));
	ibv_wr_set_inline_data(bx, "wr api", 7);
	CHECK(!ibv_wr_complete(bx), "ibv_wr_complete");
	for (int want = 100; want <= 104; want++) {
		struct ibv_wc wc = next_wc(b_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)want, "wr %d: %s (wr_id %lu)",
		      want, ibv_wc_status_str(wc.status), (unsigned long)wc.wr_id);
	}
	struct ibv_wc wc = next_wc(a_cq);
	CHECK(wc.wr_id == 13 && ntohl(wc.imm_data) == 77 && !strcmp(a_buf + 30000, "wr api"), "SEND_IMM");
	CHECK(a_buf[20000] == 'r' && b_buf[40000 + 999] == 'r', "WRITE then READ");
	CHECK(*(uint64_t *)(b_buf + 50000) == 40 && *(uint64_t *)(b_buf + 50008) == 42 && *counter == 7,
	      "atomics: %lu %lu %lu", *(unsigned long *)(b_buf + 50000),
	      *(unsigned long *)(b_buf + 50008), (unsigned long)*counter);
	ibv_wr_start(bx);
	ibv_wr_atomic_write(bx, a_mr->rkey, (uintptr_t)counter, counter);
	CHECK(ibv_wr_complete(bx) == EOPNOTSUPP, "atomic_write must be EOPNOTSUPP");
	printf("PASS ibv_wr_* (write, read, atomics, send_imm inline)\n");

	/* ---- async fd non-blocking; unsupported features fail cleanly ---- */
	fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "async O_NONBLOCK");
	struct ibv_async_event ae;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, "async EAGAIN");
	struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 1, .max_sge = 1}, .pd = pd,
					  .comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
					  .srq_type = IBV_SRQT_XRC};
	CHECK(!ibv_create_srq_ex(ctx, &sx) && errno == EOPNOTSUPP, "XRC SRQ must be EOPNOTSUPP");
	CHECK(!ibv_alloc_mw(pd, 3) && errno == EINVAL, "MW type 3 must be EINVAL");
	char *hole = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 8192);
	CHECK(!ibv_reg_mr(pd, hole, 8192, ACCESS) && errno == EFAULT, "unmapped memory must be EFAULT");
	CHECK(!ibv_reg_mr(pd, a_buf, 4096, IBV_ACCESS_ON_DEMAND) && errno == EOPNOTSUPP, "ODP");
	printf("PASS unsupported features and bad memory fail cleanly\n");

	/* ---- deregister (and unmap) memory while the peer still writes into it ---- */
	struct ibv_cq *c_cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_qp *c = rc_qp(c_cq, 0), *d = rc_qp(c_cq, 0);
	connect_qp(c, d->qp_num);
	connect_qp(d, c->qp_num);
	char *victim = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *v_mr = ibv_reg_mr(pd, victim, 1 << 20, ACCESS);
	CHECK(v_mr, "reg victim");
	uint32_t v_rkey = v_mr->rkey;
	int ok = 0, access_err = 0, flushed = 0;
	for (int i = 0; i < 200; i++) {
		struct ibv_sge cs = {(uintptr_t)a_buf, 65536, a_mr->lkey};
		struct ibv_send_wr cw = {.wr_id = 1000 + i, .sg_list = &cs, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		cw.wr.rdma.remote_addr = (uintptr_t)victim + (i % 16) * 65536;
		cw.wr.rdma.rkey = v_rkey;
		if (ibv_post_send(c, &cw, &bad))
			break; /* the QP is in error: nothing more to post */
		if (i == 20) {
			CHECK(!ibv_dereg_mr(v_mr), "dereg while written");
			CHECK(!munmap(victim, 1 << 20), "munmap");
		}
		struct ibv_wc cwc = next_wc(c_cq);
		if (cwc.status == IBV_WC_SUCCESS)
			ok++;
		else if (cwc.status == IBV_WC_REM_ACCESS_ERR)
			access_err++;
		else if (cwc.status == IBV_WC_WR_FLUSH_ERR)
			flushed++;
		else
			CHECK(0, "unexpected status %s", ibv_wc_status_str(cwc.status));
		if (cwc.status != IBV_WC_SUCCESS)
			break;
	}
	CHECK(ok >= 20 && access_err == 1, "writes before %d, access errors %d, flushed %d", ok, access_err, flushed);
	/* The NIC and the program's other QPs carry on. */
	CHECK(!ibv_post_recv(b, rw, &bad_r), "post_recv after the failure");
	sw[0].next = NULL;
	CHECK(!ibv_post_send(a, &sw[0], &bad), "post_send after the failure");
	CHECK(next_wc(a_cq).status == IBV_WC_SUCCESS, "A still sends");
	printf("PASS deregistered memory: %d writes, then a remote access error; other QPs unaffected\n", ok);

	/* ---- two threads polling one CQ ---- */
	shared_cq = ibv_create_cq(ctx, CONCURRENT, NULL, NULL, 0);
	CHECK(shared_cq, "shared CQ");
	struct ibv_qp *e = rc_qp(shared_cq, 0), *f = rc_qp(shared_cq, 0);
	connect_qp(e, f->qp_num);
	connect_qp(f, e->qp_num);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_create(&th[i], NULL, poller, NULL), "pthread_create");
	for (int i = 0; i < CONCURRENT; i++) {
		struct ibv_sge es = {(uintptr_t)a_buf, 256, a_mr->lkey};
		struct ibv_send_wr ew = {.wr_id = i, .sg_list = &es, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		ew.wr.rdma.remote_addr = (uintptr_t)b_buf + (i % 64) * 256;
		ew.wr.rdma.rkey = b_mr->rkey;
		/* At most 48 in flight (the send queue holds 64). */
		double end2 = now() + 10;
		while (i - atomic_load(&total) >= 48 && now() < end2)
			;
		CHECK(!ibv_post_send(e, &ew, &bad), "post WRITE %d", i);
	}
	for (int i = 0; i < 2; i++) {
		void *r;
		pthread_join(th[i], &r);
		CHECK(r == NULL, "poller %d failed: %p", i, r);
	}
	CHECK(atomic_load(&total) == CONCURRENT, "completions %d", atomic_load(&total));
	for (int i = 0; i < CONCURRENT; i++)
		CHECK(atomic_load(&seen[i]) == 1, "wr %d seen %d times", i, atomic_load(&seen[i]));
	CHECK(!ibv_destroy_qp(e) && !ibv_destroy_qp(f) && !ibv_destroy_cq(shared_cq), "destroy");
	printf("PASS two threads polling one CQ: %d completions, each once\n", CONCURRENT);

	/* ---- fork ---- */
	CHECK(ibv_fork_init() == 0, "ibv_fork_init");
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "fork status");
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(30);
		_exit(child_traffic(list[0]));
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	CHECK(!ibv_post_send(a, &sw[0], &bad), "post_send after fork");
	CHECK(next_wc(a_cq).status == IBV_WC_SUCCESS, "A sends after the fork");
	printf("PASS fork: the child opened its own context and sent; the parent carries on\n");

	/* ---- teardown in the documented order ---- */
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_qp(c) && !ibv_destroy_qp(d), "destroy_qp");
	CHECK(!ibv_destroy_cq(a_cq) && !ibv_destroy_cq(b_cq) && !ibv_destroy_cq(c_cq), "destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy channel");
	CHECK(!ibv_dereg_mr(a_mr) && !ibv_dereg_mr(b_mr), "dereg");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
