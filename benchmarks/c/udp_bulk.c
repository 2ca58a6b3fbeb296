// The C ceiling of the one-way bulk UDP stream that `--udp-bulk` and `--udp-bulk-receive` measure
// (benchmarks/IoUring.Benchmarks/Net/UdpBulk*.cs): the same stream with plain system calls and no runtime, run by the
// same harness as the .NET children (pinned with taskset, its CPU time and peak RSS read from /proc), so the table
// shows what this machine's kernel allows a sender or receiver at all.
//
//   ./udp_bulk send sendto|gso PORT SIZE [FROM TO]
//                                          SIZE-byte datagrams from FROM to TO:PORT (both 127.0.0.1 by default) flat
//                                          out: one sendto(2) each, or sendmsg(2) with UDP_SEGMENT, as many datagrams
//                                          as fit in 65,000 B (at most 64), the segmenting the .NET senders do
//   ./udp_bulk recv recvmmsg|gro            prints "port N", then receives flat out: recvmmsg(2) of 64 x 2,048 B, or
//                                          recvmsg(2) of 64 KiB with UDP_GRO (coalesced bursts)
//
// Both answer each line on stdin with "count bytes N" (bytes sent or received so far) and end with their stdin, the
// protocol of the .NET children; the sender stops sending after a line "pause" and goes on after "go" (the harness
// keeps every sender's process, warmed up, between its windows). The counting is one relaxed store per system call
// and the pause one relaxed load: no lock on the hot path.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_SEGMENTS 64     // IoUringUdpSocket.MaxSegments (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels)
#define SEGMENTED_BYTES 65000
#define BATCH 64            // the .NET batch receivers' UdpDatagramBatch(64, 2048)
#define DATAGRAM_ROOM 2048

static long bytes; // written by the main thread only, read by the stdin thread
static int paused;  // set and cleared by the stdin thread under the lock, read by the main thread
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t resumed = PTHREAD_COND_INITIALIZER;

static void count(long n)
{
    __atomic_store_n(&bytes, bytes + n, __ATOMIC_RELAXED);
}

// Answers each stdin line with the count; the end of stdin ends the process (the harness closes it when done).
static void *answer_stdin(void *unused)
{
    (void)unused;
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "pause", 5) == 0 || strncmp(line, "go", 2) == 0) {
            pthread_mutex_lock(&lock);
            __atomic_store_n(&paused, line[0] == 'p', __ATOMIC_RELAXED);
            pthread_cond_broadcast(&resumed);
            pthread_mutex_unlock(&lock);
        }
        printf("count bytes %ld\n", __atomic_load_n(&bytes, __ATOMIC_RELAXED));
        fflush(stdout);
    }
    exit(0);
}

static void wait_while_paused(void)
{
    pthread_mutex_lock(&lock);
    while (__atomic_load_n(&paused, __ATOMIC_RELAXED)) {
        pthread_cond_wait(&resumed, &lock);
    }
    pthread_mutex_unlock(&lock);
}

static void fail(const char *what)
{
    perror(what);
    exit(1);
}

static int bound_socket(struct in_addr address)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in local = { .sin_family = AF_INET, .sin_addr = address };
    if (fd < 0 || bind(fd, (struct sockaddr *)&local, sizeof local) < 0) {
        fail("socket/bind");
    }
    return fd;
}

static void start_answering(void)
{
    pthread_t thread;
    if (pthread_create(&thread, NULL, answer_stdin, NULL) != 0) {
        fail("pthread_create");
    }
}

static void send_flat_out(int gso, int port, int size, struct in_addr from, struct in_addr address)
{
    int fd = bound_socket(from);
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = address };
    int segments = SEGMENTED_BYTES / size < MAX_SEGMENTS ? SEGMENTED_BYTES / size : MAX_SEGMENTS;
    char *payload = malloc((size_t)size * segments);
    for (long i = 0; i < (long)size * segments; i++) {
        payload[i] = (char)rand();
    }
    // The same control message on every send: the segment size, as IoUring's SENDMSG carries it.
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } control;
    struct iovec iov = { .iov_base = payload, .iov_len = (size_t)size * segments };
    struct msghdr msg = {
        .msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &iov, .msg_iovlen = 1,
        .msg_control = control.buf, .msg_controllen = sizeof control.buf,
    };
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_UDP;
    cmsg->cmsg_type = UDP_SEGMENT;
    cmsg->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    *(uint16_t *)CMSG_DATA(cmsg) = (uint16_t)size;
    start_answering();
    for (;;) {
        if (__atomic_load_n(&paused, __ATOMIC_RELAXED)) {
            wait_while_paused();
        }
        ssize_t sent = gso ? sendmsg(fd, &msg, 0) : sendto(fd, payload, size, 0, (struct sockaddr *)&to, sizeof to);
        if (sent > 0) {
            count(sent);
        } else if (errno != EAGAIN && errno != ENOBUFS && errno != ECONNREFUSED) {
            fail(gso ? "sendmsg" : "sendto");
        }
    }
}

static void receive_flat_out(int gro)
{
    int fd = bound_socket((struct in_addr){ .s_addr = htonl(INADDR_LOOPBACK) });
    int on = 1;
    if (gro && setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) < 0) {
        fail("setsockopt UDP_GRO");
    }
    struct sockaddr_in local;
    socklen_t length = sizeof local;
    getsockname(fd, (struct sockaddr *)&local, &length);
    printf("port %d\n", ntohs(local.sin_port));
    fflush(stdout);
    start_answering();
    static char buffers[BATCH][DATAGRAM_ROOM];
    static char coalesced[65536];
    struct mmsghdr msgs[BATCH];
    struct iovec iovs[BATCH];
    struct sockaddr_in from[BATCH];
    char control[CMSG_SPACE(sizeof(int))]; // the segment size of a coalesced burst, which the .NET receivers read
    for (int i = 0; i < BATCH; i++) {
        iovs[i] = (struct iovec){ .iov_base = buffers[i], .iov_len = DATAGRAM_ROOM };
        msgs[i].msg_hdr = (struct msghdr){ .msg_name = &from[i], .msg_namelen = sizeof from[i], .msg_iov = &iovs[i],
                                           .msg_iovlen = 1 };
    }
    struct iovec big = { .iov_base = coalesced, .iov_len = sizeof coalesced };
    struct msghdr one = { .msg_name = &from[0], .msg_iov = &big, .msg_iovlen = 1, .msg_control = control };
    for (;;) {
        if (gro) {
            one.msg_namelen = sizeof from[0];
            one.msg_controllen = sizeof control;
            ssize_t n = recvmsg(fd, &one, 0);
            if (n < 0) {
                fail("recvmsg");
            }
            count(n);
            continue;
        }
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) {
            fail("recvmmsg");
        }
        long sum = 0;
        for (int i = 0; i < n; i++) {
            sum += msgs[i].msg_len;
            msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        }
        count(sum);
    }
}

int main(int argc, char **argv)
{
    int sending = (argc == 5 || argc == 7) && strcmp(argv[1], "send") == 0;
    int receiving = argc == 3 && strcmp(argv[1], "recv") == 0;
    struct in_addr from = { .s_addr = htonl(INADDR_LOOPBACK) }, to = from;
    if (sending && argc == 7 && (inet_pton(AF_INET, argv[5], &from) != 1 || inet_pton(AF_INET, argv[6], &to) != 1)) {
        sending = 0;
    }
    if (sending && (strcmp(argv[2], "gso") == 0 || strcmp(argv[2], "sendto") == 0) && atoi(argv[4]) > 0) {
        send_flat_out(strcmp(argv[2], "gso") == 0, atoi(argv[3]), atoi(argv[4]), from, to);
    } else if (receiving && (strcmp(argv[2], "gro") == 0 || strcmp(argv[2], "recvmmsg") == 0)) {
        receive_flat_out(strcmp(argv[2], "gro") == 0);
    }
    fprintf(stderr, "usage: udp_bulk send sendto|gso PORT SIZE [FROM TO] | udp_bulk recv recvmmsg|gro\n");
    return 2;
}
