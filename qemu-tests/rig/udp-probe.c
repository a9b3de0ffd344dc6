/* A UDP echo pair for the rig guest's Ethernet test (busybox nc has no UDP).
 *   udp-probe server PORT COUNT          echo COUNT datagrams back to their senders, then exit 0
 *   udp-probe client ADDR PORT COUNT SIZE send COUNT datagrams of SIZE bytes (a pattern that
 *                                        differs per datagram), wait up to 5 s for each echo and
 *                                        check it byte for byte; exit 0 when all came back right
 * Prints one line per datagram. Linked statically in the rig chroot. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_SIZE 65000

static unsigned char buf[MAX_SIZE], want[MAX_SIZE];

static int server(int port, int count) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
    perror("udp-probe server: bind");
    return 1;
  }
  printf("udp-probe server: listening on %d\n", port);
  fflush(stdout);
  for (int i = 0; i < count; i++) {
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
    if (n < 0) {
      perror("udp-probe server: recvfrom");
      return 1;
    }
    printf("udp-probe server: %zd bytes from %s:%d\n", n, inet_ntoa(from.sin_addr), ntohs(from.sin_port));
    fflush(stdout);
    if (sendto(s, buf, n, 0, (struct sockaddr *)&from, fl) != n) {
      perror("udp-probe server: sendto");
      return 1;
    }
  }
  return 0;
}

static int client(const char *addr, int port, int count, int size) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  struct timeval tv = {.tv_sec = 5};
  if (s < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1 || size < 1 || size > MAX_SIZE) {
    fprintf(stderr, "udp-probe client: bad arguments\n");
    return 2;
  }
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (int i = 0; i < count; i++) {
    for (int k = 0; k < size; k++) want[k] = (unsigned char)(k * 7 + i * 13 + 1);
    if (sendto(s, want, size, 0, (struct sockaddr *)&a, sizeof a) != size) {
      perror("udp-probe client: sendto");
      return 1;
    }
    ssize_t n = recv(s, buf, sizeof buf, 0);
    if (n < 0) {
      printf("udp-probe client: datagram %d: no echo (%s)\n", i, strerror(errno));
      return 1;
    }
    if (n != size || memcmp(buf, want, size) != 0) {
      printf("udp-probe client: datagram %d: echo of %zd bytes differs\n", i, n);
      return 1;
    }
    printf("udp-probe client: datagram %d: %d bytes echoed intact\n", i, size);
    fflush(stdout);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "server") == 0) return server(atoi(argv[2]), atoi(argv[3]));
  if (argc == 6 && strcmp(argv[1], "client") == 0)
    return client(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  fprintf(stderr, "usage: udp-probe server PORT COUNT | client ADDR PORT COUNT SIZE\n");
  return 2;
}
