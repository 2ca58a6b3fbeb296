// A light HTTP/1.1 load generator for benchmarks/run-plaintext.sh (GENERATOR=loadgen): one thread, one io_uring,
// C keep-alive connections each sending DEPTH requests per write (pipelined when DEPTH > 1) and waiting for DEPTH
// responses before the next write, like wrk's pipeline script. It does not parse responses: a probe request first
// learns the response's length (headers up to CRLF CRLF plus Content-Length, or up to the last chunk of a chunked
// body), and afterwards responses are counted by bytes — the plaintext and json responses have a fixed length (Kestrel's
// too: its Date header has a constant length, and its chunked json body is the same every time). That makes it several times cheaper per request than wrk,
// so a server on one CPU can be saturated from the other. Output imitates wrk's lines the harness parses.
//
//   ./loadgen HOST PORT CONNECTIONS DEPTH SECONDS [PATH]
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { OP_SEND = 1, OP_RECV = 2 };
#define RECV_SIZE 65536
#define BUCKETS 1000000     // latency histogram: 10 us buckets up to 10 s

struct conn {
    int fd;
    int sent;               // bytes of the current batch's request sent
    long got;               // response bytes of the current batch received
    uint64_t batch_start;   // ns
    char buf[RECV_SIZE];
};

static struct io_uring ring;
static char *request;
static int request_len;
static long batch_response_len;
static uint32_t histogram[BUCKETS];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static struct io_uring_sqe *get_sqe(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

static void submit_send(struct conn *c, int index)
{
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_send(sqe, c->fd, request + c->sent, request_len - c->sent, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, ((uint64_t)OP_SEND << 32) | (uint32_t)index);
}

static void submit_recv(struct conn *c, int index)
{
    struct io_uring_sqe *sqe = get_sqe();
    io_uring_prep_recv(sqe, c->fd, c->buf, RECV_SIZE, 0);
    io_uring_sqe_set_data64(sqe, ((uint64_t)OP_RECV << 32) | (uint32_t)index);
}

static int connect_to(struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)addr, sizeof *addr) < 0) {
        perror("connect");
        exit(1);
    }
    return fd;
}

// One request, read until the whole response is in: its length is what every later response is counted by.
static long probe(struct sockaddr_in *addr, const char *one_request)
{
    int fd = connect_to(addr);
    if (write(fd, one_request, strlen(one_request)) < 0) {
        perror("probe write");
        exit(1);
    }
    char buf[4096];
    long len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n <= 0) {
            fprintf(stderr, "probe: connection closed after %ld bytes\n", len);
            exit(1);
        }
        len += n;
        buf[len] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        char *te = strcasestr(buf, "\r\nTransfer-Encoding: chunked");
        char *last_chunk = end && te && te < end ? strstr(end + 2, "\r\n0\r\n\r\n") : NULL;
        if (end && ((cl && cl < end) || last_chunk)) {
            long total = last_chunk ? (last_chunk - buf) + 7 : (end - buf) + 4 + strtol(cl + 17, NULL, 10);
            if (len >= total) {
                close(fd);
                if (len != total) {
                    fprintf(stderr, "probe: %ld bytes for a %ld-byte response\n", len, total);
                    exit(1);
                }
                if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
                    fprintf(stderr, "probe: not a 200 response\n");
                    exit(1);
                }
                return total;
            }
        }
    }
}

static double percentile(uint64_t count, double p)
{
    uint64_t target = (uint64_t)(count * p), seen = 0;
    for (int i = 0; i < BUCKETS; i++) {
        seen += histogram[i];
        if (seen > target) {
            return (i + 0.5) * 0.01; // ms
        }
    }
    return BUCKETS * 0.01;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s HOST PORT CONNECTIONS DEPTH SECONDS [PATH]\n", argv[0]);
        return 2;
    }
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int connections = atoi(argv[3]), depth = atoi(argv[4]);
    double seconds = atof(argv[5]);
    const char *path = argc > 6 ? argv[6] : "/plaintext";

    char one[512];
    int one_len = snprintf(one, sizeof one,
        "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7\r\nConnection: keep-alive\r\n\r\n",
        path, argv[1], argv[2]);
    request_len = one_len * depth;
    request = malloc(request_len);
    for (int i = 0; i < depth; i++) {
        memcpy(request + i * one_len, one, one_len);
    }
    long response_len = probe(&addr, one);
    batch_response_len = response_len * depth;

    struct io_uring_params p = { 0 };
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN;
    int ret = io_uring_queue_init_params(4096, &ring, &p);
    if (ret < 0) {
        fprintf(stderr, "io_uring_queue_init_params: %s\n", strerror(-ret));
        return 1;
    }
    struct conn *conns = calloc(connections, sizeof *conns);
    for (int i = 0; i < connections; i++) {
        conns[i].fd = connect_to(&addr);
    }

    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), now = start;
    uint64_t requests = 0, batches = 0, bytes = 0;
    long errors = 0;
    for (int i = 0; i < connections; i++) {
        conns[i].batch_start = start;
        submit_send(&conns[i], i);
        submit_recv(&conns[i], i);
    }
    while (now < end) {
        ret = io_uring_submit_and_wait(&ring, 1);
        if (ret < 0 && ret != -EINTR && ret != -ETIME) {
            fprintf(stderr, "io_uring_submit_and_wait: %s\n", strerror(-ret));
            return 1;
        }
        now = now_ns();
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            int op = (int)(cqe->user_data >> 32), index = (int)(uint32_t)cqe->user_data;
            struct conn *c = &conns[index];
            if (cqe->res <= 0) {
                errors++;
                fprintf(stderr, "connection %d: %s %s\n", index, op == OP_SEND ? "send" : "recv",
                    cqe->res == 0 ? "closed by the server" : strerror(-cqe->res));
                continue; // this connection is done
            }
            if (op == OP_SEND) {
                c->sent += cqe->res;
                if (c->sent < request_len) {
                    submit_send(c, index);
                }
                continue;
            }
            c->got += cqe->res;
            bytes += cqe->res;
            while (c->got >= batch_response_len) { // a whole batch answered (never more: one batch is in flight)
                c->got -= batch_response_len;
                if (now < end) {
                    uint64_t us10 = (now - c->batch_start) / 10000;
                    histogram[us10 < BUCKETS ? us10 : BUCKETS - 1]++;
                    batches++;
                    requests += depth;
                }
                c->batch_start = now;
                c->sent = 0;
                submit_send(c, index);
            }
            submit_recv(c, index);
        }
        io_uring_cq_advance(&ring, seen);
    }
    double elapsed = (now - start) / 1e9;
    printf("loadgen: %d connections, depth %d, %ld-byte responses counted by length\n", connections, depth, response_len);
    printf("  Latency Distribution\n");
    printf("     50%%    %.2fms\n", percentile(batches, 0.50));
    printf("     75%%    %.2fms\n", percentile(batches, 0.75));
    printf("     90%%    %.2fms\n", percentile(batches, 0.90));
    printf("     99%%    %.2fms\n", percentile(batches, 0.99));
    printf("  %llu requests in %.2fs, %.2fMB read\n", (unsigned long long)requests, elapsed, bytes / 1048576.0);
    if (errors) {
        printf("  Socket errors: connect 0, read %ld, write 0, timeout 0\n", errors);
    }
    printf("Requests/sec: %.2f\n", requests / elapsed);
    return 0;
}
