// The C liburing reference for benchmarks/run-plaintext.sh: the same protocol as benchmarks/PlaintextServer
// (every request ends at CRLF CRLF; each one, pipelined ones included, gets the fixed plaintext response; one send
// per batch of parsed requests), on one single-threaded ring: multishot accept, multishot recv with a provided
// buffer ring, SINGLE_ISSUER | DEFER_TASKRUN, registered ring fd. The ceiling the managed servers are compared with.
// A request whose first line starts "GET /json " gets {"message":"Hello, World!"} as application/json instead (for
// benchmarks/run-kestrel.sh; a constant body, no serializer), every other request the plaintext response.
//
//   ./plaintext_server [port]     (default 8080); prints "pid <n>"; SIGINT/SIGTERM stop it.
#define _GNU_SOURCE
#include <netinet/tcp.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "ring_common.h"

enum { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };

#define RING_ENTRIES 2048
#define BUF_GROUP 1
#define BUF_COUNT 512      // as IoUring's EventLoopOptions defaults: 512 x 8 KiB
#define BUF_SIZE 8192
#define IN_CAP 8192        // a partial request carried over to the next receive
#define OUT_CAP 65536      // responses waiting for the send in flight
#define MAX_FDS 65536

struct conn {
    int fd;
    int in_len;
    int out_len;          // bytes in out[], the first `sending` of them in flight
    int sending;
    int recv_armed;
    int closing;
    char in[IN_CAP];
    char out[OUT_CAP];
};

static struct io_uring ring;
static struct io_uring_buf_ring *buf_ring;
static char *buffers;
static struct conn *conns[MAX_FDS];
static char response[256];
static int response_len;
static char json_response[256];
static int json_response_len;
static time_t response_time;

static void build_response(time_t now)
{
    struct tm tm;
    char date[64];
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    response_len = snprintf(response, sizeof response,
        "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\nServer: B\r\nDate: %s\r\n\r\nHello, World!", date);
    json_response_len = snprintf(json_response, sizeof json_response,
        "HTTP/1.1 200 OK\r\nContent-Length: 27\r\nContent-Type: application/json\r\nServer: B\r\nDate: %s\r\n\r\n{\"message\":\"Hello, World!\"}", date);
    response_time = now;
}

static inline uint64_t tag(int op, int fd) { return ((uint64_t)op << 32) | (uint32_t)fd; }

static void arm_accept(int listen_fd)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    io_uring_prep_multishot_accept(sqe, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, tag(OP_ACCEPT, listen_fd));
}

static void arm_recv(struct conn *c)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BUF_GROUP;
    io_uring_sqe_set_data64(sqe, tag(OP_RECV, c->fd));
    c->recv_armed = 1;
}

static void send_pending(struct conn *c)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    io_uring_prep_send(sqe, c->fd, c->out, c->out_len, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, tag(OP_SEND, c->fd));
    c->sending = c->out_len;
}

static void maybe_close(struct conn *c)
{
    if (c->closing && !c->recv_armed && !c->sending) {
        conns[c->fd] = NULL;
        close(c->fd);
        free(c);
    }
}

// Queues one response per complete request in buf[0..len) (dropped if out[] is full), counts them, and returns
// where the incomplete tail starts.
static int parse_requests(struct conn *c, const char *buf, int len, int *requests)
{
    int start = 0;
    for (;;) {
        const char *end = memmem(buf + start, len - start, "\r\n\r\n", 4);
        if (!end) {
            return start;
        }
        int json = end - (buf + start) >= 10 && memcmp(buf + start, "GET /json ", 10) == 0;
        const char *r = json ? json_response : response;
        int r_len = json ? json_response_len : response_len;
        if (c->out_len + r_len <= OUT_CAP) {
            memcpy(c->out + c->out_len, r, r_len);
            c->out_len += r_len;
        }
        start = (int)(end - buf) + 4;
        (*requests)++;
    }
}

// Queues one response per complete request (parsing in place unless a partial request was carried over), keeps
// the incomplete tail, and sends unless a send is in flight (its completion sends the rest).
static void on_data(struct conn *c, const char *data, int len)
{
    int requests = 0;
    if (c->in_len == 0) {
        int start = parse_requests(c, data, len, &requests);
        data += start;
        len -= start;
    }
    if (len > 0) {
        if (c->in_len + len > IN_CAP) { // a request larger than IN_CAP: not this benchmark's protocol
            c->closing = 1;
            shutdown(c->fd, SHUT_RDWR);
            return;
        }
        memcpy(c->in + c->in_len, data, len);
        c->in_len += len;
        if (c->in_len > len || requests == 0) { // carried-over bytes: parse the joined buffer
            int start = parse_requests(c, c->in, c->in_len, &requests);
            memmove(c->in, c->in + start, c->in_len - start);
            c->in_len -= start;
        }
    }
    if (requests == 0) {
        return;
    }
    if (!c->sending) {
        send_pending(c);
    }
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    handle_stop_signals();
    build_response(time(NULL));

    int listen_fd = listen_tcp(INADDR_ANY, port, 512);
    int one = 1;
    server_ring_init(&ring, RING_ENTRIES);
    // liburing 2.3 (Debian 12) has no io_uring_setup_buf_ring: register the ring memory by hand.
    if (posix_memalign((void **)&buf_ring, 4096, BUF_COUNT * sizeof(struct io_uring_buf))) {
        return 1;
    }
    io_uring_buf_ring_init(buf_ring);
    struct io_uring_buf_reg reg = { .ring_addr = (unsigned long)buf_ring, .ring_entries = BUF_COUNT, .bgid = BUF_GROUP };
    int ret = io_uring_register_buf_ring(&ring, &reg, 0);
    if (ret < 0) {
        fprintf(stderr, "io_uring_register_buf_ring: %s\n", strerror(-ret));
        return 1;
    }
    if (posix_memalign((void **)&buffers, 4096, (size_t)BUF_COUNT * BUF_SIZE)) {
        return 1;
    }
    for (int i = 0; i < BUF_COUNT; i++) {
        io_uring_buf_ring_add(buf_ring, buffers + (size_t)i * BUF_SIZE, BUF_SIZE, i, io_uring_buf_ring_mask(BUF_COUNT), i);
    }
    io_uring_buf_ring_advance(buf_ring, BUF_COUNT);

    printf("pid %d\nc liburing listening on 0.0.0.0:%d\n", getpid(), port);
    fflush(stdout);
    arm_accept(listen_fd);

    while (!stop) {
        submit_and_wait_one(&ring);
        time_t now = time(NULL); // vDSO: no syscall
        if (now != response_time) {
            build_response(now);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0, recycled = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            int op = (int)(cqe->user_data >> 32);
            int fd = (int)(uint32_t)cqe->user_data;
            int res = cqe->res;
            int more = (cqe->flags & IORING_CQE_F_MORE) != 0;
            if (op == OP_ACCEPT) {
                if (res >= 0) {
                    if (res >= MAX_FDS) {
                        close(res);
                    } else {
                        setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                        struct conn *c = malloc(sizeof *c);
                        c->fd = res;
                        c->in_len = c->out_len = c->sending = c->recv_armed = c->closing = 0;
                        conns[res] = c;
                        arm_recv(c);
                    }
                }
                if (!more) {
                    arm_accept(listen_fd);
                }
                continue;
            }
            struct conn *c = conns[fd];
            if (!c) {
                continue;
            }
            if (op == OP_RECV) {
                if (!more) {
                    c->recv_armed = 0;
                }
                if (res > 0) {
                    int bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
                    if (!c->closing) {
                        on_data(c, buffers + (size_t)bid * BUF_SIZE, res);
                    }
                    io_uring_buf_ring_add(buf_ring, buffers + (size_t)bid * BUF_SIZE, BUF_SIZE, bid, io_uring_buf_ring_mask(BUF_COUNT), recycled++);
                    if (!more && !c->closing) {
                        arm_recv(c);
                    }
                } else if (res == -ENOBUFS && !c->closing) {
                    arm_recv(c);
                } else {
                    c->closing = 1; // FIN (0) or an error: close once the send in flight is done
                }
                maybe_close(c);
            } else if (op == OP_SEND) {
                c->sending = 0;
                if (res < 0) {
                    c->closing = 1;
                    c->out_len = 0;
                    if (c->recv_armed) {
                        shutdown(c->fd, SHUT_RDWR); // ends the multishot recv
                    }
                } else {
                    memmove(c->out, c->out + res, c->out_len - res);
                    c->out_len -= res;
                    if (c->out_len > 0) {
                        send_pending(c);
                    }
                }
                maybe_close(c);
            }
        }
        if (recycled) {
            io_uring_buf_ring_advance(buf_ring, recycled);
        }
        io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
    return 0;
}
