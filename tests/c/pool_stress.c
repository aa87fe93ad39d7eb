/* Stress test of the kernel's helper-thread pool (kernels/hopmem_threads.c),
 * built with ThreadSanitizer by tests/test_threads.py.
 *
 * Three caller threads each run thousands of shared scans at once (only one
 * can hold the pool; the others run alone), some of them started, overlapped
 * with other work and finished (hm_rows_start / hm_rows_finish), some under a
 * hold, while the thread count changes. Every output row must hold what its
 * chunk wrote; exit status 1 otherwise, and TSan reports any data race.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hopmem_threads.h"

typedef struct { int64_t *out; int64_t tag; } job;

/* One row per index: out[i] = 3i + tag, whichever thread takes the chunk. */
static void fill(void *ctx, int64_t lo, int64_t hi) {
    job *j = ctx;
    for (int64_t i = lo; i < hi; i++) j->out[i] = i * 3 + j->tag;
}
static int failures = 0;
static void *caller(void *arg) {
    int64_t id = (int64_t)(intptr_t)arg;
    int64_t n = 1000 + id * 37;
    int64_t *out = malloc(sizeof(int64_t) * n);
    for (int r = 0; r < 3000; r++) {
        int hold = (r % 7 == 0) ? hm_parallel_hold(1e7) : 0;
        for (int k = 0; k < 3; k++) {
            memset(out, 0xff, sizeof(int64_t) * n);
            job j = {out, id * 100000 + r * 10 + k};
            if (k == 1 && hm_rows_start(fill, &j, n, 1e7)) {
                /* overlap the scan with other work, then finish it */
                volatile int64_t x = 0; for (int q = 0; q < 1000; q++) x += q;
                hm_rows_finish();
            } else {
                hm_parallel_rows(fill, &j, n, 1e7);
            }
            for (int64_t i = 0; i < n; i++)
                if (out[i] != i * 3 + j.tag) { __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); break; }
        }
        hm_parallel_release(hold);
        if (r % 500 == 0) hm_set_threads(2 + (r / 500) % 3);
    }
    free(out);
    return NULL;
}
int main(void) {
    hm_set_threads(3);
    hm_set_split(0, 0, 200);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, caller, (void *)(intptr_t)i);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("failures %d\n", failures);
    return failures != 0;
}
