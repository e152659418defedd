/*
 * loopback_bind.so: an LD_PRELOAD shim that keeps a process's servers off the network.
 *
 * With RLPLAT_LOOPBACK_ONLY=1 in the environment, bind() to a wildcard
 * address binds to loopback instead, on the same port:
 *
 *   0.0.0.0               -> 127.0.0.1
 *   ::  (IPV6_V6ONLY on)  -> ::1
 *   ::  (dual-stack)      -> ::ffff:127.0.0.1
 *
 * Why: dm-reverb's server and TensorFlow's gRPC servers take a port but no
 * bind address, and gRPC binds a port-only address on every interface. Their
 * clients in a local run dial 127.0.0.1, so a dual-stack socket becomes
 * IPv4 loopback (what gRPC itself does for "127.0.0.1" on such a socket);
 * ::1 would refuse them. Any other address, and every call without the
 * variable, goes to the real bind() untouched.
 *
 * Limits: only bind() through the dynamic linker is seen (not a raw
 * syscall, nor a statically linked program); the variable is read once,
 * when the library loads.
 *
 * Built by scripts/setup.sh:  gcc -O2 -shared -fPIC -o loopback_bind.so loopback_bind.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static bind_fn real_bind;
static int loopback_only;

/* Resolved at load time, before any thread of the program can call bind(). */
__attribute__((constructor)) static void loopback_bind_init(void) {
  const char *flag = getenv("RLPLAT_LOOPBACK_ONLY");
  loopback_only = flag != NULL && strcmp(flag, "1") == 0;
  real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
}

static int bind_ipv4(int fd, const struct sockaddr *addr, socklen_t len) {
  struct sockaddr_in in4;
  memcpy(&in4, addr, sizeof in4);
  if (in4.sin_addr.s_addr != htonl(INADDR_ANY)) return real_bind(fd, addr, len);
  in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
}

static int bind_ipv6(int fd, const struct sockaddr *addr, socklen_t len) {
  struct sockaddr_in6 in6;
  memcpy(&in6, addr, sizeof in6);
  if (!IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) return real_bind(fd, addr, len);
  int v6only = 1;
  socklen_t optlen = sizeof v6only;
  if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &optlen) != 0) v6only = 1;
  if (v6only) {
    in6.sin6_addr = in6addr_loopback;
  } else {
    static const unsigned char mapped_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                                      0, 0, 0xff, 0xff, 127, 0, 0, 1};
    memcpy(&in6.sin6_addr, mapped_loopback, sizeof mapped_loopback);
  }
  return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  if (real_bind == NULL) loopback_bind_init(); /* called before our constructor ran */
  if (real_bind == NULL) {
    errno = ENOSYS;
    return -1;
  }
  if (!loopback_only || addr == NULL) return real_bind(fd, addr, len);
  if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
    return bind_ipv4(fd, addr, len);
  if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6))
    return bind_ipv6(fd, addr, len);
  return real_bind(fd, addr, len);
}
