/* Signals and the blocking event calls, as on the kernel's fds (tests/abi_paths.rs):
 * ibv_get_cq_event and ibv_get_async_event wait in a read(2) of the program's fd, so a
 * signal handler installed without SA_RESTART ends the wait with EINTR, and one installed
 * with it does not. qperf's test loop needs the first: its SIGALRM sets Finished while it
 * sleeps in ibv_get_cq_event, and its peer has stopped sending by then. */
#include "common.h"
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* SIGALRM once, after `ms`, its handler installed with `flags`. */
static void alarm_in(int ms, int flags)
{
	struct sigaction act;
	memset(&act, 0, sizeof act);
	act.sa_handler = on_alarm;
	act.sa_flags = flags;
	CHECK(!sigaction(SIGALRM, &act, NULL), "sigaction");
	struct itimerval it = { .it_value = { .tv_sec = ms / 1000, .tv_usec = ms % 1000 * 1000 } };
	CHECK(!setitimer(ITIMER_REAL, &it, NULL), "setitimer");
}

static struct ibv_qp *qa, *qb;
static struct ibv_mr *mr;
static char buf[64];

/* After 300 ms, a SEND from qa to qb: a completion on qb's receive CQ. */
static void *send_later(void *arg)
{
	(void)arg;
	usleep(300000);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	CHECK(!ibv_post_send(qa, &wr, &bad), "post_send");
	return NULL;
}

static void readable(int fd, int want, const char *what)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == want, "%s: poll says %d", what, !want);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	CHECK(!ibv_query_gid(ctx, 1, GIDX, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel");
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(scq && rcq, "ibv_create_cq");
	mr = ibv_reg_mr(pd, buf, sizeof buf, ACCESS);
	CHECK(mr, "ibv_reg_mr");
	struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	qa = ibv_create_qp(pd, &ia);
	ia.recv_cq = rcq;
	qb = ibv_create_qp(pd, &ia);
	CHECK(qa && qb, "ibv_create_qp");
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);
	struct ibv_sge sge = { .addr = (uintptr_t)buf + 32, .length = 32, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(qb, &rwr, &rbad), "post_recv");
	CHECK(!ibv_req_notify_cq(rcq, 0), "ibv_req_notify_cq");

	/* Without SA_RESTART: the wait ends with EINTR once the handler ran. */
	struct ibv_cq *ecq;
	void *ectx;
	double t0 = now();
	alarm_in(100, 0);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EINTR,
	      "ibv_get_cq_event with no event, interrupted: EINTR");
	double waited = now() - t0;
	CHECK(alarms == 1 && waited >= 0.09 && waited < 5, "%d alarms, %.3f s", alarms, waited);
	readable(ch->fd, 0, "no event after EINTR");
	printf("PASS ibv_get_cq_event: EINTR after %.0f ms\n", waited * 1e3);

	/* With SA_RESTART: the handler runs and the wait goes on until the event. */
	pthread_t t;
	t0 = now();
	alarm_in(100, SA_RESTART);
	pthread_create(&t, NULL, send_later, NULL);
	CHECK(!ibv_get_cq_event(ch, &ecq, &ectx), "ibv_get_cq_event with SA_RESTART");
	waited = now() - t0;
	pthread_join(t, NULL);
	CHECK(ecq == rcq && alarms == 2 && waited >= 0.25, "cq %p, %d alarms, %.3f s",
	      (void *)ecq, alarms, waited);
	ibv_ack_cq_events(rcq, 1);
	readable(ch->fd, 0, "no event after the one taken");
	struct ibv_wc wc = next_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "receive %d", wc.status);
	wc = next_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "send %d", wc.status);
	printf("PASS ibv_get_cq_event: restarted, the event after %.0f ms\n", waited * 1e3);

	/* The async fd likewise. */
	struct ibv_async_event ae;
	t0 = now();
	alarm_in(100, 0);
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EINTR,
	      "ibv_get_async_event interrupted: EINTR");
	CHECK(alarms == 3, "%d alarms", alarms);
	readable(ctx->async_fd, 0, "async fd after EINTR");
	printf("PASS ibv_get_async_event: EINTR after %.0f ms\n", (now() - t0) * 1e3);

	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy_qp");
	CHECK(!ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq), "destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	CHECK(!ibv_dereg_mr(mr), "dereg");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	return 0;
}
