/* librdmacm's semantics through its C API (tests/rdmacm_semantics.rs compiles this against
 * Debian 12's rdma_cma.h and runs it on the drop-in, attached to a daemon): O_NONBLOCK and
 * poll on the channel fd, the device an id gets on ADDR_RESOLVED, rdma_migrate_id and
 * rdma_destroy_id waiting for the ack of an event handed out, the route, the synchronous
 * mode of a NULL channel (rdma_connect to a port nobody listens on: ECONNREFUSED),
 * rdma_getaddrinfo's answers, a signal in a blocking rdma_get_cm_event (EINTR without
 * SA_RESTART, the wait going on with it). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, ...)                                    \
	do {                                                 \
		if (!(c)) {                                      \
			printf("FAIL line %d: ", __LINE__);          \
			printf(__VA_ARGS__);                         \
			printf(" (errno %d)\n", errno);              \
			return 1;                                    \
		}                                                \
	} while (0)

static struct rdma_cm_event *pending;

static void *ack_later(void *arg)
{
	(void)arg;
	usleep(300000);
	rdma_ack_cm_event(pending);
	return NULL;
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* SIGALRM once, after 100 ms, its handler installed with `flags`. */
static int alarm_soon(int flags)
{
	struct sigaction act;
	memset(&act, 0, sizeof act);
	act.sa_handler = on_alarm;
	act.sa_flags = flags;
	struct itimerval it = { .it_value = { .tv_usec = 100000 } };
	return sigaction(SIGALRM, &act, NULL) || setitimer(ITIMER_REAL, &it, NULL);
}

static struct rdma_cm_id *late_id;
static struct sockaddr_in late_sa;

static void *resolve_later(void *arg)
{
	(void)arg;
	usleep(300000);
	rdma_resolve_addr(late_id, NULL, (struct sockaddr *)&late_sa, 2000);
	return NULL;
}

static double ms_since(struct timespec *a)
{
	struct timespec b;
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (b.tv_sec - a->tv_sec) * 1e3 + (b.tv_nsec - a->tv_nsec) / 1e6;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id, *sid;
	struct pollfd p = { .events = POLLIN };
	struct timespec t0;
	pthread_t t;

	if (argc < 2)
		return 2;
	inet_pton(AF_INET, argv[1], &sa.sin_addr);

	/* A signal in a blocking wait: EINTR without SA_RESTART, as the kernel's
	 * interruptible GET_EVENT; with it, the wait goes on to the event. */
	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	CHECK(!alarm_soon(0), "alarm");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EINTR && alarms == 1,
	      "interrupted without SA_RESTART: EINTR (%d alarms)", alarms);
	CHECK(rdma_create_id(ch, &late_id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	late_sa = sa;
	CHECK(!alarm_soon(SA_RESTART), "alarm");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&t, NULL, resolve_later, NULL);
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "with SA_RESTART the wait goes on");
	pthread_join(t, NULL);
	CHECK(alarms == 2 && ms_since(&t0) >= 250, "%d alarms, %.0f ms", alarms, ms_since(&t0));
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(late_id) == 0, "destroy");
	rdma_destroy_event_channel(ch);
	printf("signals: EINTR without SA_RESTART, restarted with it\n");

	ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "O_NONBLOCK: EAGAIN");
	printf("nonblocking empty channel: EAGAIN\n");

	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000) == 0, "resolve_addr");
	p.fd = ch->fd;
	CHECK(poll(&p, 1, 5000) == 1, "poll: the event makes the fd readable");
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get");
	CHECK(ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id && ev->status == 0,
	      "%s status %d", rdma_event_str(ev->event), ev->status);
	CHECK(id->verbs && id->pd && id->context == (void *)0x1234 && id->port_num == 1,
	      "the id's device");
	CHECK(poll(&p, 1, 0) == 0, "readable with no event left");
	printf("%s: verbs %s\n", rdma_event_str(ev->event),
	       ibv_get_device_name(id->verbs->device));

	/* rdma_migrate_id waits until the event handed out is acked. */
	ch2 = rdma_create_event_channel();
	CHECK(ch2, "second channel");
	pending = ev;
	pthread_create(&t, NULL, ack_later, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(rdma_migrate_id(id, ch2) == 0, "migrate");
	double waited = ms_since(&t0);
	pthread_join(t, NULL);
	CHECK(waited >= 250, "migrate returned before the ack (%.0f ms)", waited);
	CHECK(id->channel == ch2, "id->channel");
	printf("migrate waited %.0f ms for the ack\n", waited);

	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	p.fd = ch2->fd;
	CHECK(poll(&p, 1, 5000) == 1, "the new channel's fd");
	p.fd = ch->fd;
	CHECK(poll(&p, 1, 0) == 0, "the old channel stays quiet");
	CHECK(rdma_get_cm_event(ch2, &ev) == 0 && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "route event");
	CHECK(id->route.path_rec && id->route.num_paths == 1, "path record");
	CHECK(rdma_get_local_addr(id)->sa_family == AF_INET &&
	      rdma_get_peer_addr(id)->sa_family == AF_INET, "addresses");
	printf("%s: num_paths %d\n", rdma_event_str(ev->event), id->route.num_paths);

	/* rdma_destroy_id waits until the event handed out is acked. */
	pending = ev;
	pthread_create(&t, NULL, ack_later, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	waited = ms_since(&t0);
	pthread_join(t, NULL);
	CHECK(waited >= 250, "destroy returned before the ack (%.0f ms)", waited);
	printf("destroy waited %.0f ms for the ack\n", waited);

	/* A NULL channel: each call waits for its own event. */
	CHECK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0, "sync id");
	sa.sin_port = htons(7999);
	CHECK(rdma_resolve_addr(sid, NULL, (struct sockaddr *)&sa, 2000) == 0, "sync resolve");
	CHECK(sid->verbs != NULL && sid->event != NULL, "resolved on return");
	CHECK(rdma_resolve_route(sid, 2000) == 0, "sync route");
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.qp_num = 0x123;
	cp.retry_count = 1;
	errno = 0;
	CHECK(rdma_connect(sid, &cp) == -1 && errno == ECONNREFUSED,
	      "connect to a port nobody listens on");
	printf("sync connect to an empty port: ECONNREFUSED\n");
	CHECK(rdma_destroy_id(sid) == 0, "destroy sync id");
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);

	/* rdma_getaddrinfo: a passive numeric host and port service, an active one, the
	 * wildcard, and a name refused under RAI_NUMERICHOST. */
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(argv[1], "7471", &hints, &res) == 0, "getaddrinfo passive");
	struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_src_addr;
	CHECK(res->ai_flags & RAI_PASSIVE && res->ai_family == AF_INET && sin &&
	      ntohs(sin->sin_port) == 7471 && sin->sin_addr.s_addr == sa.sin_addr.s_addr &&
	      res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP &&
	      !res->ai_dst_addr, "passive answer");
	rdma_freeaddrinfo(res);
	hints.ai_flags = 0;
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_qp_type = IBV_QPT_UD;
	CHECK(rdma_getaddrinfo(argv[1], "7174", &hints, &res) == 0, "getaddrinfo active");
	sin = (struct sockaddr_in *)res->ai_dst_addr;
	CHECK(sin && ntohs(sin->sin_port) == 7174 && !res->ai_src_addr &&
	      res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP, "active answer");
	rdma_freeaddrinfo(res);
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	CHECK(rdma_getaddrinfo(NULL, "7471", &hints, &res) == 0, "getaddrinfo wildcard");
	sin = (struct sockaddr_in *)res->ai_src_addr;
	CHECK(sin && sin->sin_addr.s_addr == htonl(INADDR_ANY), "wildcard answer");
	rdma_freeaddrinfo(res);
	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo("localhost", "7471", &hints, &res) != 0, "a name under RAI_NUMERICHOST");
	printf("rdma_getaddrinfo: passive, active, wildcard, numeric-only\n");
	printf("OK\n");
	return 0;
}
