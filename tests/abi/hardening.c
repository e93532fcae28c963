/* The drop-in libibverbs.so.1 where programs push it: memory the NIC may not write (or read)
 * refused at registration with EFAULT, as the kernel's ib_umem_get refuses it; memory
 * made read-only after registration failing a peer's WRITE cleanly (REM_ACCESS_ERR) instead
 * of killing the program; a forked child destroying what it inherited and closing the
 * device, then exiting 0 while the parent's QPs carry on; and several threads posting to
 * one QP at once, through ibv_post_send and through ibv_wr_* batches. Prints "PASS <step>"
 * per step; any failure exits 1 naming it. tests/abi_paths.rs builds and runs it. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* An RC QP whose send side is created through ibv_create_qp_ex with the ibv_wr_* set. */
static struct ibv_qp *qp_ex(struct ibv_cq *cq, uint32_t depth)
{
	struct ibv_qp_init_attr_ex qx = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1,
			.max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qx);
	CHECK(qp, "ibv_create_qp_ex");
	return qp;
}

/* ---- several threads posting to one QP ---- */
#define PER_THREAD 64
#define ROUNDS 25
#define SLOT 64
static struct ibv_qp *shared_qp;
static struct ibv_mr *src_mr, *dst_mr;
static char *src, *dst;
static atomic_int start_gate;

/* The bytes of slot `i` in round `r`. The SENDs (odd ids of threads 1 and 2) land in the
 * receives in arrival order, which the two threads interleave: they all carry one pattern;
 * every WRITE names its own slot and carries its own. */
static char pattern(int i, int r)
{
	return i >= PER_THREAD && i % 2 ? 'A' + r : 'a' + (i + r) % 26;
}

/* Thread 0: classic ibv_post_send WRITEs. Threads 1 and 2: ibv_wr_* batches of two
 * (a WRITE and a SEND). Each work request names its own slot, so the bytes tell whether
 * each one landed whole. */
static void *poster(void *arg)
{
	int t = (int)(intptr_t)arg;
	while (!atomic_load(&start_gate))
		;
	if (t == 0) {
		for (int i = 0; i < PER_THREAD; i++) {
			int id = i;
			struct ibv_sge s = {(uintptr_t)src + id * SLOT, SLOT, src_mr->lkey};
			struct ibv_send_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1,
						.opcode = IBV_WR_RDMA_WRITE,
						.send_flags = IBV_SEND_SIGNALED}, *bad;
			w.wr.rdma.remote_addr = (uintptr_t)dst + id * SLOT;
			w.wr.rdma.rkey = dst_mr->rkey;
			if (ibv_post_send(shared_qp, &w, &bad))
				return (void *)1;
		}
		return NULL;
	}
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(shared_qp);
	for (int i = 0; i < PER_THREAD / 2; i++) {
		int id = t * PER_THREAD + 2 * i;
		ibv_wr_start(qx);
		qx->wr_id = id;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, dst_mr->rkey, (uintptr_t)dst + id * SLOT);
		ibv_wr_set_sge(qx, src_mr->lkey, (uintptr_t)src + id * SLOT, SLOT);
		qx->wr_id = id + 1;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qx);
		ibv_wr_set_sge(qx, src_mr->lkey, (uintptr_t)src + (id + 1) * SLOT, SLOT);
		if (ibv_wr_complete(qx))
			return (void *)2;
	}
	return NULL;
}

static void concurrent_posts(void)
{
	const int total = 3 * PER_THREAD;
	struct ibv_cq *scq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	CHECK(scq && rcq, "CQs");
	size_t len = (size_t)total * SLOT;
	src = aligned_alloc(4096, len);
	dst = aligned_alloc(4096, len);
	src_mr = ibv_reg_mr(pd, src, len, ACCESS);
	dst_mr = ibv_reg_mr(pd, dst, len, ACCESS);
	CHECK(src_mr && dst_mr, "MRs");
	shared_qp = qp_ex(scq, 256);
	struct ibv_qp *peer = qp_ex(rcq, 256);
	connect_qp(shared_qp, peer->qp_num);
	connect_qp(peer, shared_qp->qp_num);
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < total; i++)
			memset(src + i * SLOT, pattern(i, round), SLOT);
		memset(dst, 0, len);
		/* A receive for every SEND (the odd ids of threads 1 and 2), into its slot. */
		for (int id = PER_THREAD; id < total; id += 2) {
			struct ibv_sge s = {(uintptr_t)dst + (id + 1) * SLOT, SLOT, dst_mr->lkey};
			struct ibv_recv_wr w = {.wr_id = id + 1, .sg_list = &s, .num_sge = 1}, *bad;
			CHECK(!ibv_post_recv(peer, &w, &bad), "post_recv");
		}
		atomic_store(&start_gate, 0);
		pthread_t th[3];
		for (int t = 0; t < 3; t++)
			CHECK(!pthread_create(&th[t], NULL, poster, (void *)(intptr_t)t), "pthread_create");
		atomic_store(&start_gate, 1);
		for (int t = 0; t < 3; t++) {
			void *r;
			pthread_join(th[t], &r);
			CHECK(r == NULL, "round %d: poster %d failed (%p)", round, t, r);
		}
		static int seen[3 * PER_THREAD];
		memset(seen, 0, sizeof seen);
		for (int i = 0; i < total; i++) {
			struct ibv_wc wc = next_wc(scq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id < (uint64_t)total,
			      "round %d: send completion %d: %s wr_id %lu", round, i,
			      ibv_wc_status_str(wc.status), (unsigned long)wc.wr_id);
			seen[wc.wr_id]++;
		}
		for (int i = 0; i < total / 3; i++) {
			struct ibv_wc wc = next_wc(rcq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == SLOT, "receive %d", i);
		}
		for (int i = 0; i < total; i++) {
			CHECK(seen[i] == 1, "round %d: wr %d completed %d times", round, i, seen[i]);
			for (int k = 0; k < SLOT; k++)
				CHECK(dst[i * SLOT + k] == pattern(i, round),
				      "round %d: slot %d byte %d is %d", round, i, k, dst[i * SLOT + k]);
		}
	}
	CHECK(!ibv_destroy_qp(shared_qp) && !ibv_destroy_qp(peer), "destroy QPs");
	CHECK(!ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq), "destroy CQs");
	CHECK(!ibv_dereg_mr(src_mr) && !ibv_dereg_mr(dst_mr), "dereg");
	free(src);
	free(dst);
	printf("PASS three threads posting to one QP (ibv_post_send and ibv_wr_*): %d rounds of %d\n",
	       ROUNDS, total);
}

/* ---- registration of memory the NIC cannot use ---- */
static void registration_checks(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char *ro = mmap(NULL, 4 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *none = mmap(NULL, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *rw = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED && none != MAP_FAILED && rw != MAP_FAILED, "mmap");
	const int write_rights[] = {
		IBV_ACCESS_LOCAL_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
		ACCESS,
	};
	for (unsigned i = 0; i < sizeof write_rights / sizeof *write_rights; i++) {
		errno = 0;
		CHECK(!ibv_reg_mr(pd, ro, 4 * page, write_rights[i]) && errno == EFAULT,
		      "read-only memory with access %#x must be EFAULT", write_rights[i]);
	}
	/* Read-only memory is fine for rights that only read it. */
	struct ibv_mr *mr = ibv_reg_mr(pd, ro, 4 * page, IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "read-only memory with REMOTE_READ");
	CHECK(!ibv_dereg_mr(mr), "dereg");
	const int any[] = {0, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE, ACCESS};
	for (unsigned i = 0; i < sizeof any / sizeof *any; i++) {
		errno = 0;
		CHECK(!ibv_reg_mr(pd, none, 4 * page, any[i]) && errno == EFAULT,
		      "PROT_NONE memory with access %#x must be EFAULT", any[i]);
	}
	/* One PROT_NONE page in the middle of a writable range: the whole range is refused. */
	CHECK(!mprotect(rw + page, page, PROT_NONE), "mprotect");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, rw, 4 * page, ACCESS) && errno == EFAULT, "a hole of PROT_NONE");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, rw + page / 2, page, 0) && errno == EFAULT,
	      "a range reaching into PROT_NONE");
	mr = ibv_reg_mr(pd, rw + 2 * page, 2 * page, ACCESS);
	CHECK(mr, "the writable part");
	CHECK(!ibv_dereg_mr(mr), "dereg");
	munmap(ro, 4 * page);
	munmap(none, 4 * page);
	munmap(rw, 4 * page);
	printf("PASS registration: read-only memory with a write right, and PROT_NONE, are EFAULT\n");
}

/* ---- memory made read-only (or unmapped) after registration ---- */
static void changed_after_registration(void)
{
	long page = sysconf(_SC_PAGESIZE);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *c = qp_ex(cq, 16), *d = qp_ex(cq, 16);
	connect_qp(c, d->qp_num);
	connect_qp(d, c->qp_num);
	char *src_buf = aligned_alloc(4096, 4096);
	memset(src_buf, 'z', 4096);
	struct ibv_mr *smr = ibv_reg_mr(pd, src_buf, 4096, ACCESS);
	char *victim = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *vmr = ibv_reg_mr(pd, victim, 2 * page, ACCESS);
	CHECK(smr && vmr, "reg");
	CHECK(!mprotect(victim, 2 * page, PROT_READ), "mprotect");
	struct ibv_sge s = {(uintptr_t)src_buf, 256, smr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)victim;
	w.wr.rdma.rkey = vmr->rkey;
	CHECK(!ibv_post_send(c, &w, &bad), "post WRITE");
	struct ibv_wc wc = next_wc(cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "WRITE into read-only memory: %s", ibv_wc_status_str(wc.status));
	CHECK(victim[0] == 0, "nothing written");
	CHECK(!ibv_destroy_qp(c) && !ibv_destroy_qp(d), "destroy");
	CHECK(!ibv_dereg_mr(vmr) && !ibv_dereg_mr(smr), "dereg");
	CHECK(!ibv_destroy_cq(cq), "destroy cq");
	munmap(victim, 2 * page);
	free(src_buf);
	printf("PASS memory made read-only after registration: the peer's WRITE is REM_ACCESS_ERR, the program lives\n");
}

/* ---- a forked child tidies what it inherited ---- */
static void fork_child_cleans_up(void)
{
	struct ibv_pd *cpd = ibv_alloc_pd(ctx);
	struct ibv_cq *ccq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cpd && ccq, "pd/cq");
	char *buf = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	struct ibv_mr *cmr = ibv_reg_mr(cpd, buf, 4096, ACCESS);
	struct ibv_qp_init_attr ia = {
		.send_cq = ccq, .recv_cq = ccq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *q1 = ibv_create_qp(cpd, &ia), *q2 = ibv_create_qp(cpd, &ia);
	CHECK(cmr && q1 && q2, "mr/qp");
	connect_qp(q1, q2->qp_num);
	connect_qp(q2, q1->qp_num);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		alarm(20);
		/* Data calls on inherited objects fail with an errno, never touch the NIC. */
		struct ibv_sge s = {(uintptr_t)buf, 8, cmr->lkey};
		struct ibv_send_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
		if (ibv_post_send(q1, &w, &bad) == 0)
			_exit(10);
		struct ibv_wc wc;
		if (ibv_poll_cq(ccq, 1, &wc) >= 0)
			_exit(11);
		if (ibv_alloc_pd(ctx) != NULL)
			_exit(12);
		/* Destroy and close work quietly. */
		if (ibv_destroy_qp(q1) || ibv_destroy_qp(q2))
			_exit(13);
		if (ibv_destroy_cq(ccq))
			_exit(14);
		if (ibv_dereg_mr(cmr))
			_exit(15);
		if (ibv_dealloc_pd(cpd))
			_exit(16);
		if (ibv_close_device(ctx))
			_exit(17);
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x (exit %d, signal %d)",
	      status, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	      WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	/* The parent's objects are untouched: q1 still sends to q2. */
	strcpy(buf + 64, "after the fork");
	struct ibv_sge rs = {(uintptr_t)buf + 1024, 64, cmr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *bad_r;
	CHECK(!ibv_post_recv(q2, &rw, &bad_r), "post_recv after the fork");
	struct ibv_sge ss = {(uintptr_t)buf + 64, 32, cmr->lkey};
	struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
	CHECK(!ibv_post_send(q1, &sw, &bad), "post_send after the fork");
	for (int i = 0; i < 2; i++)
		CHECK(next_wc(ccq).status == IBV_WC_SUCCESS, "completion after the fork");
	CHECK(!strcmp(buf + 1024, "after the fork"), "bytes after the fork");
	CHECK(!ibv_destroy_qp(q1) && !ibv_destroy_qp(q2) && !ibv_destroy_cq(ccq), "destroy");
	CHECK(!ibv_dereg_mr(cmr) && !ibv_dealloc_pd(cpd), "dereg/dealloc");
	free(buf);
	printf("PASS fork: the child destroyed what it inherited and closed the device; the parent's QP works\n");
}

int main(int argc, char **argv)
{
	/* Line-buffered even into a pipe: a crash still shows the steps that passed. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	CHECK(!ibv_query_gid(ctx, 1, GIDX, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	/* argv[1] names one step (for trying one alone); none runs them all. */
	const char *only = argc > 1 ? argv[1] : NULL;
	if (!only || !strcmp(only, "reg"))
		registration_checks();
	if (!only || !strcmp(only, "changed"))
		changed_after_registration();
	if (!only || !strcmp(only, "fork"))
		fork_child_cleans_up();
	if (!only || !strcmp(only, "threads"))
		concurrent_posts();
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
