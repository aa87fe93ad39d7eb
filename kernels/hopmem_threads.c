/* hopmem helper threads: see hopmem_threads.h for the contract.
 *
 * One pool, one scan at a time (the `busy` flag; a scan that finds it taken
 * runs alone). A scan publishes its job in one atomic word and wakes the
 * helpers that sleep; every thread, the caller included, then claims chunks
 * of rows from one atomic counter until none are left, so a helper that
 * wakes late (or never, on a busy host) only means the caller does more
 * chunks. The caller then closes the job and waits until no helper is inside
 * it, so no helper touches the job's buffers after hm_rows_finish returns.
 * Helpers sleep on a condition variable between scans, or spin while a batch
 * write holds them (hm_parallel_hold), since waking takes tens of
 * microseconds on a VM.
 */
#include "hopmem_threads.h"

#if !defined(HM_NO_THREADS) && (defined(__unix__) || defined(__APPLE__)) && defined(__GNUC__)
#define HM_HAVE_THREADS 1
#endif

static int threads_wanted = 1;

/* When a scan is shared, and in what chunks (see hopmem_threads.h); the
 * tests lower them to split small scans into many chunks. */
static double min_work = HM_PARALLEL_MIN_WORK;
static double min_work_held = HM_PARALLEL_MIN_WORK_HELD;
static double chunk_work = HM_CHUNK_WORK;

void hm_set_split(double unheld, double held, double chunk) {
    min_work = unheld;
    min_work_held = held;
    chunk_work = chunk;
}

#if defined(__GNUC__)
#define RELAXED_LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define RELAXED_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)
#else  /* other compilers build the single-threaded twin below: plain accesses */
#define RELAXED_LOAD(p) (*(p))
#define RELAXED_STORE(p, v) (*(p) = (v))
#endif

int hm_get_threads(void) { return RELAXED_LOAD(&threads_wanted); }

int hm_set_threads(int n) {
    if (n < 1) n = 1;
    if (n > HM_MAX_THREADS) n = HM_MAX_THREADS;
    RELAXED_STORE(&threads_wanted, n);
    return n;
}

static int64_t chunk_rows(int64_t n, double work) {
    double per_row = n > 0 ? work / (double)n : 1.0;
    int64_t rows = per_row > 0.0 ? (int64_t)(chunk_work / per_row) : n;
    rows = (rows + 3) & ~(int64_t)3;  /* whole blocks of four rows */
    return rows < 4 ? 4 : rows;
}

#ifndef HM_HAVE_THREADS

int hm_rows_start(hm_rows_fn fn, void *ctx, int64_t n, double work) {
    (void)fn; (void)ctx; (void)n; (void)work;
    return 0;
}

void hm_rows_finish(void) {}

int hm_parallel_hold(double work) { (void)work; return 0; }
void hm_parallel_release(int held) { (void)held; }

#else

#include <pthread.h>
#include <sched.h>
#include <signal.h>

/* The job word: (generation << 1) | open. A scan publishes its job by storing
 * an odd word with a new generation and closes it by storing the even one. A
 * helper joins by counting itself `inside` and then checking that the word
 * has not changed; the caller closes and then waits for `inside` to drain.
 * Sequentially consistent atomics on both sides make the two orders exclusive:
 * either the helper sees the job closed (and touches nothing), or the caller
 * sees the helper inside (and waits for it). */
static uint64_t job_word;
static int inside;            /* helpers inside the current scan */
static int busy;              /* a scan holds the pool */
static int held;              /* hm_parallel_hold() calls in force: helpers spin, not sleep */
static int sleepers;          /* helpers asleep on `wake` */
static int started;           /* helpers created (they never exit); changed under `mu` */
static hm_rows_fn job_fn;     /* the current scan, stable while its word is odd */
static void *job_ctx;
static int64_t job_n, job_chunk;
static int64_t next_chunk;    /* next chunk to claim */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

#define LOAD(p) __atomic_load_n(p, __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_chunks(hm_rows_fn fn, void *ctx, int64_t n, int64_t chunk) {
    for (;;) {
        int64_t lo = __atomic_fetch_add(&next_chunk, 1, __ATOMIC_RELAXED) * chunk;
        if (lo >= n) return;
        fn(ctx, lo, lo + chunk < n ? lo + chunk : n);
    }
}

/* Whether `word` is an open job this helper has not served yet. */
static inline int is_new_job(uint64_t word, uint64_t seen) {
    return (word & 1) && word != seen;
}

/* Whether helper `index` is among the threads in use (hm_set_threads). */
static inline int in_use(int index) { return index + 1 < hm_get_threads(); }

/* Wait for a new job: spinning while a hold is in force (and this helper is
 * in use), asleep otherwise. */
static uint64_t wait_for_job(uint64_t seen, int index) {
    for (;;) {
        uint64_t word = LOAD(&job_word);
        if (is_new_job(word, seen)) return word;
        if (LOAD(&held) > 0 && in_use(index)) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&mu);
        __atomic_add_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
        while (!is_new_job(LOAD(&job_word), seen) && !(LOAD(&held) > 0 && in_use(index)))
            pthread_cond_wait(&wake, &mu);
        __atomic_sub_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&mu);
    }
}

static void *helper_main(void *arg) {
    int index = (int)(intptr_t)arg;  /* helper i is thread i + 1 */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);  /* signals go to the interpreter's threads */
    uint64_t seen = LOAD(&job_word);
    for (;;) {
        uint64_t word = wait_for_job(seen, index);
        seen = word;
        if (!in_use(index)) continue;  /* lowered by hm_set_threads */
        __atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST);
        if (LOAD(&job_word) == word)  /* still open: the caller waits for us */
            run_chunks(job_fn, job_ctx, job_n, job_chunk);
        __atomic_sub_fetch(&inside, 1, __ATOMIC_SEQ_CST);  /* publishes the rows written */
    }
    return NULL;
}

/* Wake sleeping helpers (they re-check the job word and the holds). */
static void wake_helpers(void) {
    if (LOAD(&sleepers) == 0) return;
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
}

/* A child of fork() has only the forking thread: forget the parent's helpers
 * (the child starts its own at its first shared scan). */
static void after_fork_child(void) {
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&wake, NULL);
    started = 0;
    inside = 0;
    busy = 0;
    held = 0;
    sleepers = 0;
    job_word &= ~(uint64_t)1;
}

/* Start helpers up to `want`; returns how many are running. */
static int start_helpers(int want) {
    static int atfork_registered = 0;
    pthread_mutex_lock(&mu);
    if (!atfork_registered && pthread_atfork(NULL, NULL, after_fork_child) == 0)
        atfork_registered = 1;
    int n = __atomic_load_n(&started, __ATOMIC_RELAXED);
    while (atfork_registered && n < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, helper_main, (void *)(intptr_t)n);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;  /* run with the helpers there are */
        __atomic_store_n(&started, ++n, __ATOMIC_RELAXED);  /* read outside `mu` too */
    }
    pthread_mutex_unlock(&mu);
    return n;
}

static int helpers_ready(void) {
    int helpers = hm_get_threads() - 1;
    if (helpers < 1) return 0;
    int have = __atomic_load_n(&started, __ATOMIC_RELAXED);
    return have >= helpers ? have : start_helpers(helpers);
}

int hm_parallel_hold(double work) {
    if (work < min_work_held || !helpers_ready()) return 0;
    __atomic_add_fetch(&held, 1, __ATOMIC_SEQ_CST);
    wake_helpers();
    return 1;
}

void hm_parallel_release(int hold) {
    if (hold) __atomic_sub_fetch(&held, 1, __ATOMIC_SEQ_CST);
}

static uint64_t open_word;  /* the scan in flight's job word (the `busy` holder's) */

int hm_rows_start(hm_rows_fn fn, void *ctx, int64_t n, double work) {
    if (n <= 0) return 0;
    int64_t chunk = chunk_rows(n, work);
    if (work < (LOAD(&held) > 0 ? min_work_held : min_work) || n <= chunk || !helpers_ready()
            || __atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE))
        return 0;  /* small, single-threaded, or another scan holds the pool */
    job_fn = fn;
    job_ctx = ctx;
    job_n = n;
    job_chunk = chunk;
    __atomic_store_n(&next_chunk, 0, __ATOMIC_RELAXED);
    open_word = (LOAD(&job_word) | 1) + 2;  /* next generation, open */
    STORE(&job_word, open_word);
    wake_helpers();
    return 1;
}

void hm_rows_finish(void) {
    run_chunks(job_fn, job_ctx, job_n, job_chunk);  /* whatever the helpers left */
    STORE(&job_word, open_word & ~(uint64_t)1);     /* closed: no helper joins from now on */
    /* A helper inside finishes the chunk it holds (a few microseconds). */
    for (unsigned spins = 0; LOAD(&inside) > 0; spins++) {
        if (spins < 4096) cpu_relax();
        else sched_yield();  /* the helper was preempted: let it run */
    }
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
}

#endif

void hm_parallel_rows(hm_rows_fn fn, void *ctx, int64_t n, double work) {
    if (hm_rows_start(fn, ctx, n, work)) hm_rows_finish();  /* the caller takes chunks too */
    else if (n > 0) fn(ctx, 0, n);
}
