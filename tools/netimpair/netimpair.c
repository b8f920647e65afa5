/*
 * netimpair: delay, jitter and loss for packets handed to user space through
 * an NFQUEUE, a stand-in for tc's netem on kernels built without sch_netem
 * (tc qdisc add ... netem fails there with "unknown qdisc").
 *
 *   netimpair -q QUEUENUM [-d DELAY_MS] [-j JITTER_MS] [-l LOSS_PERCENT]
 *             [-s SEED]
 *
 * It binds NFQUEUE QUEUENUM in the network namespace it runs in and gives
 * every packet the kernel queues there a verdict: NF_DROP with probability
 * LOSS_PERCENT/100 (decided at once), otherwise NF_ACCEPT once DELAY_MS plus
 * a uniform offset in [-JITTER_MS, +JITTER_MS) has passed since the packet
 * reached it (never less than 0). DELAY_MS and JITTER_MS may be fractions
 * (0.5); with both 0 every kept packet is accepted at once. As with netem,
 * jitter can reorder packets; packets due at the same time keep their order.
 * Losses and jitter come from a seeded PRNG of our own (splitmix64): -s SEED
 * repeats a sequence of draws; without it the seed comes from the clock and
 * the pid, and is printed when it starts.
 *
 * Packets enter the queue through an iptables rule. To impair what host A
 * sends, queue it where it is received: in the receiver's namespace,
 *
 *   netimpair -q 0 -d 5 -j 1 -l 0.5 &
 *   iptables -t raw -A PREROUTING -i eth0 -s A -j NFQUEUE --queue-num 0 \
 *       --queue-bypass
 *   ...
 *   iptables -t raw -D PREROUTING -i eth0 -s A -j NFQUEUE --queue-num 0 \
 *       --queue-bypass
 *   kill %1
 *
 * and not in A's own OUTPUT chain. A packet that A's TCP sends stays charged
 * to its socket until a receiver's IP layer takes it (veth keeps the
 * reference across namespaces), and TCP Small Queues count the packets held
 * here against the sender: with 5 ms in OUTPUT one bulk transfer between
 * two namespaces made 1 MB/s with BBR and 23 MB/s with CUBIC, against about
 * 390 MB/s with the packets held on arrival. The receiver's ip_rcv releases
 * that reference before PREROUTING (netem orphans the packets it enqueues
 * for the same reason), so there the delay costs TCP only what a longer
 * path would. ping's RTT leaves out a delay added on arrival (it uses the
 * kernel's receive timestamp, taken before PREROUTING); ping -U counts it.
 *
 * --queue-bypass lets packets through untouched while no program has the
 * queue bound, so stopping netimpair before removing the rule does not cut
 * the link. scripts/netns.sh impair does all of this for simulated hosts.
 *
 * Packets are only looked at, never changed: the kernel copies their
 * metadata (NFQNL_COPY_META), not their payload. Without the GSO flag on the
 * queue the kernel segments GSO packets before queueing them, so a loss
 * takes one wire packet, as netem's does, not a 64 KB TCP super-packet.
 *
 * One thread does everything: ppoll() on the netlink socket with a timeout
 * until the earliest pending verdict, a binary min-heap of (due time,
 * arrival order, packet id) on CLOCK_MONOTONIC. Without jitter, packets fall
 * due in id order and one batch verdict accepts all that are due. The queue
 * is made long (65536 packets) and the socket's receive buffer large (8 MB)
 * so that bursts are not dropped by the kernel; if the buffer overflows
 * anyway, recv() fails with ENOBUFS (the kernel dropped those packets),
 * which is counted and otherwise ignored.
 *
 * SIGTERM or SIGINT: the packets still held are accepted, the queue is
 * unbound, and one line goes to stderr: packets seen, dropped, accepted,
 * ENOBUFS count (and verdicts the kernel refused, normally 0).
 *
 * Exit status: 0 after a signal, 1 runtime failure, 2 usage, 3 the queue
 * could not be opened or bound (no nfnetlink_queue in the kernel, not
 * root, or the queue number already taken in this namespace).
 *
 * Build: cc -O2 -Wall -Wextra -o netimpair netimpair.c \
 *            $(pkg-config --cflags --libs libnetfilter_queue)
 * (make netimpair builds build/netimpair.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define QUEUE_MAXLEN 65536
#define RCVBUF_BYTES (8 * 1024 * 1024)
#define MAX_MS 3600000.0 /* an hour: a bound against typos */
#define RECV_BATCH 256   /* messages read before looking at the heap again */

static const char *prog = "netimpair";

/* Settings. */
static double delay_ms, jitter_ms, loss_pct;
/* Without jitter packets fall due in arrival order, which is the order of
 * their ids: one batch verdict (every id up to X) then accepts all that are
 * due. Dropped packets get their verdict at once, so the kernel's queue holds
 * exactly the held packets (and newer ones not yet read). */
static int ordered;

/* Counters for the summary. */
static unsigned long long n_seen, n_dropped, n_accepted, n_enobufs,
	n_verdict_err;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

/* ---- PRNG: splitmix64 ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A double uniform in [0, 1), from the top 53 bits. */
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }

/* ---- time ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- min-heap of pending verdicts ---- */

struct pending {
	uint64_t due; /* CLOCK_MONOTONIC ns */
	uint64_t seq; /* arrival order, breaks ties */
	uint32_t id;  /* packet id in the queue */
};

static struct pending *heap;
static size_t heap_len, heap_cap;
static uint64_t next_seq;

static int before(const struct pending *a, const struct pending *b)
{
	return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static int heap_push(uint64_t due, uint32_t id)
{
	if (heap_len == heap_cap) {
		size_t cap = heap_cap ? heap_cap * 2 : 4096;
		struct pending *h = realloc(heap, cap * sizeof *h);
		if (h == NULL)
			return -1;
		heap = h;
		heap_cap = cap;
	}
	struct pending p = {due, next_seq++, id};
	size_t i = heap_len++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!before(&p, &heap[parent]))
			break;
		heap[i] = heap[parent];
		i = parent;
	}
	heap[i] = p;
	return 0;
}

static struct pending heap_pop(void)
{
	struct pending top = heap[0];
	struct pending last = heap[--heap_len];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= heap_len)
			break;
		if (c + 1 < heap_len && before(&heap[c + 1], &heap[c]))
			c++;
		if (!before(&heap[c], &last))
			break;
		heap[i] = heap[c];
		i = c;
	}
	if (heap_len > 0)
		heap[i] = last;
	return top;
}

/* ---- verdicts ---- */

static struct nfq_q_handle *qh;

static void verdict(uint32_t id, int accept)
{
	if (nfq_set_verdict(qh, id, accept ? NF_ACCEPT : NF_DROP, 0, NULL) < 0) {
		n_verdict_err++;
		return;
	}
	if (accept)
		n_accepted++;
	else
		n_dropped++;
}

/* Accepts every packet due by now (all of them when all is set). */
static void flush_due(int all)
{
	uint64_t now = now_ns();
	unsigned long long n = 0;
	uint32_t last = 0;
	while (heap_len > 0 && (all || heap[0].due <= now)) {
		struct pending p = heap_pop();
		if (!ordered) {
			verdict(p.id, 1);
			continue;
		}
		last = p.id;
		n++;
	}
	if (n == 0)
		return;
	if (nfq_set_verdict_batch(qh, last, NF_ACCEPT) < 0)
		n_verdict_err += n;
	else
		n_accepted += n;
}

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg,
		     struct nfq_data *nfa, void *data)
{
	(void)q;
	(void)msg;
	(void)data;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	if (ph == NULL)
		return 0;
	uint32_t id = ntohl(ph->packet_id);
	n_seen++;
	if (loss_pct > 0 && rng_unit() * 100.0 < loss_pct) {
		verdict(id, 0);
		return 0;
	}
	/* With no delay and no jitter d is 0: the packet is due at once and
	 * accepted as soon as the messages at hand have been read. */
	double d = delay_ms;
	if (jitter_ms > 0)
		d += jitter_ms * (2.0 * rng_unit() - 1.0);
	if (d < 0)
		d = 0;
	uint64_t due = now_ns() + (uint64_t)(d * 1e6 + 0.5);
	if (heap_push(due, id) < 0)
		verdict(id, 1); /* out of memory: let it through undelayed */
	return 0;
}

/* ---- arguments ---- */

/* Prints the usage; exits 2 with why, 0 without (-h). */
static void usage(const char *why)
{
	if (why != NULL)
		fprintf(stderr, "%s: %s\n", prog, why);
	fprintf(stderr,
		"usage: %s -q QUEUENUM [-d DELAY_MS] [-j JITTER_MS] "
		"[-l LOSS_PERCENT] [-s SEED]\n"
		"  -q  NFQUEUE number to bind, 0..65535\n"
		"  -d  delay added to each accepted packet, ms (default 0)\n"
		"  -j  uniform jitter, +-ms around the delay (default 0)\n"
		"  -l  loss probability in percent, 0..100 (default 0)\n"
		"  -s  PRNG seed (default from the clock and pid)\n",
		prog);
	exit(why != NULL ? 2 : 0);
}

static double parse_num(int opt, const char *s, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < 0 ||
	    v > max) {
		char msg[160];
		snprintf(msg, sizeof msg,
			 "-%c %s: want a number from 0 to %.0f", opt, s, max);
		usage(msg);
	}
	return v;
}

static unsigned long long parse_uint(int opt, const char *s,
				     unsigned long long max)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (end == s || *end != '\0' || errno != 0 || s[0] == '-' || v > max) {
		char msg[160];
		snprintf(msg, sizeof msg,
			 "-%c %s: want a whole number from 0 to %llu", opt, s,
			 max);
		usage(msg);
	}
	return v;
}

int main(int argc, char **argv)
{
	long queue = -1;
	int have_seed = 0;
	uint64_t seed = 0;
	int opt;

	opterr = 0;
	while ((opt = getopt(argc, argv, ":q:d:j:l:s:h")) != -1) {
		switch (opt) {
		case 'q':
			queue = (long)parse_uint(opt, optarg, 65535);
			break;
		case 'd':
			delay_ms = parse_num(opt, optarg, MAX_MS);
			break;
		case 'j':
			jitter_ms = parse_num(opt, optarg, MAX_MS);
			break;
		case 'l':
			loss_pct = parse_num(opt, optarg, 100);
			break;
		case 's':
			seed = parse_uint(opt, optarg, UINT64_MAX);
			have_seed = 1;
			break;
		case 'h':
			usage(NULL);
			break;
		case ':': {
			char msg[64];
			snprintf(msg, sizeof msg, "-%c needs a value", optopt);
			usage(msg);
			break;
		}
		default: {
			char msg[64];
			snprintf(msg, sizeof msg, "unknown option -%c", optopt);
			usage(msg);
		}
		}
	}
	if (optind < argc) {
		char msg[160];
		snprintf(msg, sizeof msg, "unexpected argument '%s'", argv[optind]);
		usage(msg);
	}
	if (queue < 0)
		usage("-q QUEUENUM is required");
	ordered = jitter_ms == 0;
	if (!have_seed)
		seed = now_ns() ^ ((uint64_t)getpid() << 32);
	rng_state = seed;

	/* SIGTERM and SIGINT stay blocked except inside ppoll(), so a signal
	 * is noticed there and never lost between a check and the wait. */
	sigset_t block, waitmask;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &waitmask);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct nfq_handle *h = nfq_open();
	if (h == NULL) {
		fprintf(stderr, "%s: nfq_open: %s (needs root and nfnetlink_queue in the kernel)\n",
			prog, strerror(errno));
		return 3;
	}
	qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
	if (qh == NULL) {
		fprintf(stderr, "%s: cannot bind queue %ld: %s (taken by another program in this namespace, or no nfnetlink_queue)\n",
			prog, queue, strerror(errno));
		nfq_close(h);
		return 3;
	}
	if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
		fprintf(stderr, "%s: nfq_set_mode: %s\n", prog, strerror(errno));
		nfq_destroy_queue(qh);
		nfq_close(h);
		return 3;
	}
	if (nfq_set_queue_maxlen(qh, QUEUE_MAXLEN) < 0)
		fprintf(stderr, "%s: warning: queue length %d not set: %s\n",
			prog, QUEUE_MAXLEN, strerror(errno));

	int fd = nfq_fd(h);
	int rcvbuf = RCVBUF_BYTES;
	/* SO_RCVBUFFORCE (root) goes past net.core.rmem_max. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) < 0)
		fprintf(stderr, "%s: warning: receive buffer not enlarged: %s\n",
			prog, strerror(errno));

	fprintf(stderr,
		"%s: ready: queue %ld, delay %g ms, jitter %g ms, loss %g%%, seed %llu\n",
		prog, queue, delay_ms, jitter_ms, loss_pct,
		(unsigned long long)seed);

	static char buf[65536] __attribute__((aligned(8)));
	int status = 0;
	while (!stop_signal) {
		flush_due(0);

		struct timespec ts, *tsp = NULL;
		if (heap_len > 0) {
			uint64_t now = now_ns(), due = heap[0].due;
			uint64_t wait = due > now ? due - now : 0;
			ts.tv_sec = (time_t)(wait / 1000000000ULL);
			ts.tv_nsec = (long)(wait % 1000000000ULL);
			tsp = &ts;
		}
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = ppoll(&pfd, 1, tsp, &waitmask);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s: ppoll: %s\n", prog, strerror(errno));
			status = 1;
			break;
		}
		if (r == 0)
			continue;
		/* Read what is there, a bounded batch, then back to the heap. */
		/* A receive buffer overflow shows as POLLERR; recv() below
		 * returns it once as ENOBUFS. */
		for (int n = 0; n < RECV_BATCH; n++) {
			ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
			if (len < 0) {
				if (errno == ENOBUFS) {
					n_enobufs++;
					continue;
				}
				if (errno == EAGAIN || errno == EWOULDBLOCK ||
				    errno == EINTR)
					break;
				fprintf(stderr, "%s: recv: %s\n", prog, strerror(errno));
				status = 1;
				goto out;
			}
			if (len == 0)
				break;
			nfq_handle_packet(h, buf, (int)len);
		}
	}
out:
	flush_due(1);
	nfq_destroy_queue(qh);
	nfq_close(h);
	fprintf(stderr,
		"%s: queue %ld: seen %llu, dropped %llu, accepted %llu, enobufs %llu, verdict errors %llu\n",
		prog, queue, n_seen, n_dropped, n_accepted, n_enobufs, n_verdict_err);
	free(heap);
	return status;
}
