// Idle keep-alive connections for benchmarks/run-kestrel.sh: opens N connections to HOST:PORT, does one GET on each
// (reading the whole response, which must be a 200 with a Content-Length or a chunked body; 128 connections in
// progress at a time), keeps them all open and idle, prints "ready N", and waits until it is killed (the kernel then
// closes them). The harness reads the server's RSS and open descriptors while they are held.
// With "websocket" each GET is a WebSocket upgrade that must be answered 101; the connections then stay open as idle
// WebSockets, and on SIGTERM the client sends each a close frame and waits (at most 8 s) for the server to close it,
// so the server sees orderly closes rather than aborted WebSockets.
//
//   ./idle_conns HOST PORT N [PATH [websocket]]   (PATH defaults to /plaintext; needs ulimit -n above N)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int websocket;

// Length of the complete 200 response (with websocket: 101 response head) at the start of buf, 0 while incomplete,
// -1 if it is not one.
static long complete_response(const char *buf, long len)
{
    const char *end = strstr(buf, "\r\n\r\n");
    if (!end) {
        return 0;
    }
    if (websocket) {
        return strncmp(buf, "HTTP/1.1 101", 12) == 0 && len == (end - buf) + 4 ? len : -1;
    }
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
        return -1;
    }
    const char *cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl && cl < end) {
        long total = (end - buf) + 4 + strtol(cl + 17, NULL, 10);
        return len < total ? 0 : len == total ? total : -1;
    }
    return strstr(end + 2, "\r\n0\r\n\r\n") ? len : 0; // chunked: complete at the last chunk
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s HOST PORT N [PATH [websocket]]\n", argv[0]);
        return 2;
    }
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int n = atoi(argv[3]);
    const char *path = argc > 4 ? argv[4] : "/plaintext";
    websocket = argc > 5 && strcmp(argv[5], "websocket") == 0;
    char request[512];
    int request_len = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: %s:%s\r\n%s\r\n", path, argv[1], argv[2],
        websocket ? "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" : "Connection: keep-alive\r\n");
    int *fds = malloc(n * sizeof *fds); // every connection, for the WebSocket close
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (websocket) {
        sigprocmask(SIG_BLOCK, &term, NULL); // taken with sigwait below
    }

    // BATCH connections at a time (well under Kestrel's backlog of 512), each: non-blocking connect, the request once
    // writable, then read until the whole response is in. Sequentially this took seconds on a loaded machine.
    enum { BATCH = 128 };
    struct pollfd pfds[BATCH];
    char bufs[BATCH][4096];
    long lens[BATCH];
    int sent[BATCH];
    int one = 1;
    double start = now_s();
    for (int base = 0; base < n; base += BATCH) {
        int count = n - base < BATCH ? n - base : BATCH, pending = count;
        for (int i = 0; i < count; i++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) {
                fprintf(stderr, "socket %d: %s (raise ulimit -n)\n", base + i, strerror(errno));
                return 1;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
                fprintf(stderr, "connect %d: %s\n", base + i, strerror(errno));
                return 1;
            }
            pfds[i] = (struct pollfd){ .fd = fd, .events = POLLOUT };
            fds[base + i] = fd;
            lens[i] = sent[i] = 0;
        }
        double deadline = now_s() + 10; // a server that stops answering fails the run instead of hanging it
        while (pending > 0) {
            if (now_s() > deadline || poll(pfds, count, 1000) < 0) {
                fprintf(stderr, "connections %d..%d: no response within 10 s\n", base, base + count - 1);
                return 1;
            }
            for (int i = 0; i < count; i++) {
                struct pollfd *p = &pfds[i];
                if (!p->revents || p->events == 0) {
                    continue;
                }
                if (!sent[i]) {
                    int err = 0;
                    socklen_t err_len = sizeof err;
                    getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
                    if (err || write(p->fd, request, request_len) != request_len) {
                        fprintf(stderr, "connection %d: %s\n", base + i, strerror(err ? err : errno));
                        return 1;
                    }
                    sent[i] = 1;
                    p->events = POLLIN;
                    continue;
                }
                ssize_t got = read(p->fd, bufs[i] + lens[i], sizeof bufs[i] - 1 - lens[i]);
                if (got <= 0) {
                    fprintf(stderr, "connection %d: %s\n", base + i, got == 0 ? "closed by the server" : strerror(errno));
                    return 1;
                }
                lens[i] += got;
                bufs[i][lens[i]] = 0;
                long total = complete_response(bufs[i], lens[i]);
                if (total < 0 || (total == 0 && lens[i] == (long)sizeof bufs[i] - 1)) {
                    fprintf(stderr, "connection %d: not a complete 200 response\n", base + i);
                    return 1;
                }
                if (total > 0) {
                    p->events = 0; // done: stays open, idle
                    pending--;
                }
            }
        }
    }
    printf("ready %d connections in %.2fs\n", n, now_s() - start);
    fflush(stdout);
    if (!websocket) {
        for (;;) {
            pause();
        }
    }
    int sig;
    sigwait(&term, &sig);
    // A masked close frame, status 1000 (mask key 0, so the payload reads as is); then read until the server closes.
    static const unsigned char close_frame[] = { 0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8 };
    struct pollfd *all = calloc(n, sizeof *all);
    int open = 0;
    for (int i = 0; i < n; i++) {
        if (write(fds[i], close_frame, sizeof close_frame) == (ssize_t)sizeof close_frame) {
            all[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
            open++;
        } else {
            all[i].fd = -1;
        }
    }
    double deadline = now_s() + 8;
    char scratch[4096];
    while (open > 0 && now_s() < deadline && poll(all, n, 1000) >= 0) {
        for (int i = 0; i < n; i++) {
            if (all[i].fd >= 0 && all[i].revents && read(all[i].fd, scratch, sizeof scratch) <= 0) {
                all[i].fd = -1; // poll skips it from now on
                open--;
            }
        }
    }
    printf("closed %d of %d WebSockets in an orderly way\n", n - open, n);
    return 0;
}
