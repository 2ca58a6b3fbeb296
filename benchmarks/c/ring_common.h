// What the single-threaded C liburing servers (plaintext_server.c, echo_server.c) set up the same way: the stop flag
// SIGINT/SIGTERM set, the listening socket, the ring (SINGLE_ISSUER | DEFER_TASKRUN, registered fd), a submission
// entry that is always there, and the wait for completions. Each helper exits the program on failure.
#ifndef RING_COMMON_H
#define RING_COMMON_H

#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) { (void)sig; stop = 1; }

// SIGINT and SIGTERM set `stop` (and interrupt the wait); SIGPIPE is ignored (a send to a gone peer fails instead).
static void handle_stop_signals(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_stop };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// A TCP socket listening on host:port (both in host byte order) with SO_REUSEADDR.
static int listen_tcp(in_addr_t host, int port, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(host) };
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, backlog) < 0) {
        perror("bind/listen");
        exit(1);
    }
    return fd;
}

// `entries` submission entries, four times as many completion entries, one issuer, task work run only when it waits.
static void server_ring_init(struct io_uring *ring, unsigned entries)
{
    struct io_uring_params p = { 0 };
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    int ret = io_uring_queue_init_params(entries, ring, &p);
    if (ret < 0) {
        fprintf(stderr, "io_uring_queue_init_params: %s\n", strerror(-ret));
        exit(1);
    }
    io_uring_register_ring_fd(ring);
}

// A free submission entry; when the queue is full, what is in it is submitted first.
static struct io_uring_sqe *next_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
        if (!sqe) {
            fprintf(stderr, "SQ full\n");
            exit(1);
        }
    }
    return sqe;
}

// Submits what is queued and waits for at least one completion (or a signal).
static void submit_and_wait_one(struct io_uring *ring)
{
    int ret = io_uring_submit_and_wait(ring, 1);
    if (ret < 0 && ret != -EINTR && ret != -ETIME && ret != -EBUSY) {
        fprintf(stderr, "io_uring_submit_and_wait: %s\n", strerror(-ret));
        exit(1);
    }
}

#endif
