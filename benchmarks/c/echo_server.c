// The near-free server for the accept storm's floor (AcceptStormBenchmarks.CServer): per connection it reads until
// message_size bytes have come (or EOF), sends them back, then closes the socket, as the managed storm servers do. One
// single-threaded ring: multishot accept, one plain recv into the connection's own buffer at a time (no provided
// buffers: the message is small and fixed), the send and the close queued on the ring too, SINGLE_ISSUER |
// DEFER_TASKRUN, registered ring fd. Each connection has exactly one request in flight, so its completion's user_data
// is the connection itself (0 is the accept, 1 the stdin watch).
//
//   ./echo_server [port] [message_size]   (defaults 0 = an ephemeral port, and 128 bytes); binds 127.0.0.1, prints
//   "port <n>" as its first line. SIGINT/SIGTERM stop it; so does the end of stdin when stdin is a pipe (the parent
//   that started it has gone), so a benchmark process that dies leaves no server behind.
#define _GNU_SOURCE
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring_common.h"

#define RING_ENTRIES 1024
#define TAG_ACCEPT 0
#define TAG_STDIN 1

enum state { RECEIVING, SENDING, CLOSING };

struct conn {
    int fd;
    enum state state;
    int done;             // bytes received (RECEIVING) or sent (SENDING) so far
    int len;              // bytes to send back
    char buf[];           // message_size bytes
};

static struct io_uring ring;
static int message_size = 128;
static char stdin_byte;

static void queue_accept(int listen_fd)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    io_uring_prep_multishot_accept(sqe, listen_fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, TAG_ACCEPT);
}

static void queue_stdin_watch(void)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    io_uring_prep_read(sqe, STDIN_FILENO, &stdin_byte, 1, -1);
    io_uring_sqe_set_data64(sqe, TAG_STDIN);
}

// The one next step of a connection: receive the rest of the message, send the rest of the echo, or close.
static void queue_step(struct conn *c)
{
    struct io_uring_sqe *sqe = next_sqe(&ring);
    switch (c->state) {
    case RECEIVING:
        io_uring_prep_recv(sqe, c->fd, c->buf + c->done, message_size - c->done, 0);
        break;
    case SENDING:
        io_uring_prep_send(sqe, c->fd, c->buf + c->done, c->len - c->done, MSG_NOSIGNAL);
        break;
    case CLOSING:
        io_uring_prep_close(sqe, c->fd);
        break;
    }
    io_uring_sqe_set_data(sqe, c);
}

static void on_connection(int fd)
{
    struct conn *c = malloc(sizeof *c + message_size);
    if (!c) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->state = RECEIVING;
    c->done = 0;
    c->len = 0;
    queue_step(c);
}

static void on_step_done(struct conn *c, int res)
{
    switch (c->state) {
    case RECEIVING:
        if (res > 0) {
            c->done += res;
            if (c->done < message_size) {
                break; // more of the message to come
            }
        } else if (res < 0) {
            c->state = CLOSING;
            break;
        }
        // the whole message, or EOF: echo what came (nothing to echo: just close)
        c->len = c->done;
        c->done = 0;
        c->state = c->len > 0 ? SENDING : CLOSING;
        break;
    case SENDING:
        if (res < 0) {
            c->state = CLOSING;
        } else if ((c->done += res) == c->len) {
            c->state = CLOSING;
        }
        break;
    case CLOSING:
        free(c);
        return;
    }
    queue_step(c);
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2) {
        message_size = atoi(argv[2]);
    }
    if (port < 0 || port > 65535 || message_size <= 0) {
        fprintf(stderr, "usage: %s [port] [message_size]\n", argv[0]);
        return 2;
    }
    handle_stop_signals();
    int listen_fd = listen_tcp(INADDR_LOOPBACK, port, 512);
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof addr;
    if (getsockname(listen_fd, (struct sockaddr *)&addr, &addr_len) < 0) {
        perror("getsockname");
        return 1;
    }
    server_ring_init(&ring, RING_ENTRIES);

    struct stat st;
    if (fstat(STDIN_FILENO, &st) == 0 && S_ISFIFO(st.st_mode)) {
        queue_stdin_watch();
    }
    queue_accept(listen_fd);
    printf("port %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    while (!stop) {
        submit_and_wait_one(&ring);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            uint64_t tag = cqe->user_data;
            if (tag == TAG_ACCEPT) {
                if (cqe->res >= 0) {
                    on_connection(cqe->res);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE)) {
                    queue_accept(listen_fd); // the kernel ended the multishot accept (an error such as EMFILE)
                }
            } else if (tag == TAG_STDIN) {
                if (cqe->res <= 0) {
                    stop = 1; // EOF: the parent has gone
                } else {
                    queue_stdin_watch();
                }
            } else {
                on_step_done((struct conn *)(uintptr_t)tag, cqe->res);
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
    return 0;
}
