/*
 * A preload library for failover_sqlite's every-fsync sweep: numbers every fsync/fdatasync of the
 * process it is loaded into, process-wide (whichever thread makes it), and SIGKILLs the process
 * on entering the N-th, before the call reaches the kernel.
 *
 *   IDEMKIT_KILL_AT_SYNC=N   the sync to die at (1-based); unset or 0: never
 *   IDEMKIT_SYNC_LOG=PATH    one line per sync entered, before it runs: `N TID THREAD-NAME CALL`
 *
 * Built by the test with the machine's C compiler (`cc -shared -fPIC`) and loaded with
 * LD_PRELOAD into a child. It replaces `strace -e inject=…:when=N`, which counts each thread's
 * syncs apart: where two threads sync, strace's N-th is not the process's N-th. Each log line is
 * one write(2) with O_APPEND, so a kill leaves whole lines.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_long entered;
static long kill_at;
static int log_fd = -1;
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    const char *at = getenv("IDEMKIT_KILL_AT_SYNC");
    kill_at = at ? atol(at) : 0;
    const char *log = getenv("IDEMKIT_SYNC_LOG");
    if (log && *log) {
        log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

static void enter(const char *call) {
    pthread_once(&once, init);
    long n = atomic_fetch_add(&entered, 1) + 1;
    if (kill_at > 0 && n > kill_at) {
        /* Another thread took the kill's number and SIGKILL is on its way: this sync is neither
         * logged nor run (logged, the log would end past the kill's number). */
        for (;;) {
            pause();
        }
    }
    if (log_fd >= 0) {
        char name[32] = "?";
        pthread_getname_np(pthread_self(), name, sizeof name);
        char line[128];
        int len = snprintf(line, sizeof line, "%ld %ld %s %s\n", n, (long)syscall(SYS_gettid),
                           name, call);
        if (len > 0) {
            (void)!write(log_fd, line, (size_t)len);
        }
    }
    if (kill_at > 0 && n == kill_at) {
        kill(getpid(), SIGKILL);
        for (;;) {
            pause(); /* SIGKILL is on its way: the sync never runs. */
        }
    }
}

int fsync(int fd) {
    enter("fsync");
    return real_fsync(fd);
}

int fdatasync(int fd) {
    enter("fdatasync");
    return real_fdatasync(fd);
}
