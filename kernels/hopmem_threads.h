/* hopmem helper threads: split a scan's rows between the calling thread and a
 * few persistent helpers.
 *
 * Every row's score is computed by the same code wherever it runs, so a split
 * never changes a result: scans stay bit-equal to the single-threaded kernel
 * and to the NumPy reference. The pool serves one scan at a time; a scan that
 * finds it busy (another thread's scan) runs on its own thread alone. Without
 * POSIX threads (or with hm_set_threads(1)) everything runs on the caller.
 */
#ifndef HOPMEM_THREADS_H
#define HOPMEM_THREADS_H

#include <stdint.h>

/* fn(ctx, lo, hi) handles rows [lo, hi); it may run on any thread and must
 * write only its own rows' outputs. */
typedef void (*hm_rows_fn)(void *ctx, int64_t lo, int64_t hi);

/* Run fn over rows [0, n), sharing chunks of rows (whole blocks of four) with
 * the helpers when `work` (multiply-adds in all) is worth the hand-off.
 * Returns when all rows are done. */
void hm_parallel_rows(hm_rows_fn fn, void *ctx, int64_t n, double work);

/* The same in two steps, for overlapping a scan with other work: start hands
 * the rows to the helpers and returns at once, 1 if it did (then the caller
 * must call hm_rows_finish before it uses the outputs or starts another scan:
 * finish runs the chunks no helper has taken and waits for the rest), 0 if
 * the scan was not started (too small, no helpers, or the pool is busy):
 * nothing ran, and the caller runs fn itself. */
int hm_rows_start(hm_rows_fn fn, void *ctx, int64_t n, double work);
void hm_rows_finish(void);

/* Keep the helpers awake (spinning) between scans until the matching
 * release: for a run of scans a few hundred microseconds apart, such as a
 * batch write's blocks, where waking a sleeping helper for each scan costs
 * about what its share of the scan saves. `work`: the multiply-adds of one
 * of those scans; below the held threshold no hold is taken (the scans would
 * not be shared). Returns whether a hold was taken (pass that to the
 * release). Holds nest. */
int hm_parallel_hold(double work);
void hm_parallel_release(int held);

/* Threads to use, the caller included (1: no helpers). Clamped to
 * [1, HM_MAX_THREADS]; returns the value now in force. Helpers start lazily
 * at the first scan big enough to share and sleep between scans. */
#define HM_MAX_THREADS 16
int hm_set_threads(int n);
int hm_get_threads(void);

/* Multiply-adds below which a scan stays on the calling thread. Waking a
 * sleeping helper costs about as much as a scan of 3,000 rows at d = 384
 * saves (measured on a 2-core VM: no gain at 1.2 million, 35-40% faster at
 * 3.8 million); a held helper joins within a microsecond. */
#define HM_PARALLEL_MIN_WORK 2.5e6
#define HM_PARALLEL_MIN_WORK_HELD 2.5e5

/* Multiply-adds a chunk of rows holds: a few microseconds of work, so the
 * claims' cost is small and the last chunk's wait is short. */
#define HM_CHUNK_WORK 65536.0

/* For tests: the two thresholds above and the multiply-adds per chunk (0s
 * split every scan into chunks of four rows). Not thread-safe: set it before
 * scans run. */
void hm_set_split(double min_work, double min_work_held, double chunk_work);

#endif
