/* Batch writes with the next block scored ahead by a helper thread, built with
 * ThreadSanitizer by tests/test_threads.py.
 *
 * Writes 1,500 clustered vectors (d = 64) in batches of 100 twice from the same
 * empty state: once on one thread, once on three with every scan shared in
 * 4-row chunks (some configurations merge rows inside blocks, which discards
 * the block scored ahead). The two states must be byte-identical (exit 1
 * otherwise). The one race TSan may report is the designed one: a helper
 * reading an address row (dots_batch_rows) while a write moves it
 * (scale_to_float); such a row is scored again before its score is used. The
 * test checks that every report is of that kind, in the address array, whose
 * size this program prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hopmem_kernel.h"
#include "hopmem_threads.h"

#define DIM 64
#define CAP 8000
#define BATCH 100
#define BATCHES 15

typedef struct {
    hm_state s;
} memory;

static void memory_init(memory *mem) {
    memset(mem, 0, sizeof *mem);
    hm_state *s = &mem->s;
    s->dim = DIM;
    s->capacity = CAP;
    s->ids = calloc(CAP, sizeof(int64_t));
    s->addresses = calloc((size_t)CAP * DIM, sizeof(float));
    s->counters = calloc((size_t)CAP * DIM, sizeof(double));
    s->weights = calloc(CAP, sizeof(double));
    s->eta = 0.3;
    s->rng = 12345;
}

static long merged;  /* merges over all writes: variant 1 must have some */

static int write_all(memory *mem, const hm_config *c, const float *X) {
    int64_t touched[BATCH * 8], created[BATCH * 2], merges[3 * (3 * BATCH + CAP)];
    int32_t nt[BATCH], nc[BATCH];
    for (int b = 0; b < BATCHES; b++) {
        int64_t excess = c->max_locations > 0 && mem->s.size > c->max_locations
                             ? mem->s.size - c->max_locations : 0;
        hm_write_log log = {touched, nt, 8, created, nc, merges, 3 * BATCH + excess, 0};
        int rc = hm_write(&mem->s, c, X + (size_t)b * BATCH * DIM, BATCH, &log);
        if (rc != HM_OK) return rc;
        merged += (long)log.n_merges;
    }
    return HM_OK;
}

static int same(const memory *a, const memory *b) {
    const hm_state *x = &a->s, *y = &b->s;
    size_t n = (size_t)x->size;
    return x->size == y->size && x->writes == y->writes && x->next_id == y->next_id
        && x->rng == y->rng && x->eta == y->eta
        && !memcmp(x->ids, y->ids, n * sizeof(int64_t))
        && !memcmp(x->addresses, y->addresses, n * DIM * sizeof(float))
        && !memcmp(x->counters, y->counters, n * DIM * sizeof(double))
        && !memcmp(x->weights, y->weights, n * sizeof(double));
}

int main(void) {
    printf("addresses_bytes %ld\n", (long)((size_t)CAP * DIM * sizeof(float)));
    float *centers = malloc(sizeof(float) * 30 * DIM);
    float *X = malloc(sizeof(float) * BATCHES * BATCH * DIM);
    srand(1);
    for (int i = 0; i < 30 * DIM; i++) centers[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < BATCHES * BATCH; i++) {
        int c = rand() % 30;
        for (int j = 0; j < DIM; j++)
            X[i * DIM + j] = centers[c * DIM + j] + 0.3f * ((float)rand() / RAND_MAX - 0.5f);
    }
    int failures = 0;
    for (int variant = 0; variant < 2; variant++) {
        hm_config c;
        memset(&c, 0, sizeof c);
        c.competitive = 1;
        c.k = 8;
        c.beta = 10;
        c.t_max = 5;
        c.epsilon = 1e-6;
        c.eta_decay = 0.999;
        c.eta_min = 0.01;
        c.tau_split = 0.6;
        c.tau_merge = variant ? 0.8 : 0.95;  /* variant 1 merges inside blocks */
        c.tau_overload = variant ? 4 : 16;
        c.gamma = 1;
        c.tau_damp = 50;
        memory alone, shared;
        memory_init(&alone);
        memory_init(&shared);
        hm_set_threads(1);
        hm_set_split(HM_PARALLEL_MIN_WORK, HM_PARALLEL_MIN_WORK_HELD, HM_CHUNK_WORK);
        int rc1 = write_all(&alone, &c, X);
        hm_set_threads(3);
        hm_set_split(0, 0, 0);
        int rc2 = write_all(&shared, &c, X);
        int ok = rc1 == HM_OK && rc2 == HM_OK && same(&alone, &shared);
        printf("variant %d: %ld locations, %ld merges (both runs), %s\n", variant,
               (long)shared.s.size, merged, ok ? "bit-equal" : "DIFFERENT");
        merged = 0;
        failures += !ok;
    }
    printf("failures %d\n", failures);
    return failures != 0;
}
