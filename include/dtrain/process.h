/* Process-wide settings: what the library never changes on its own, because it belongs to the
 * whole process (other code in it may use OpenBLAS, or handle SIGBUS), and a program asks for
 * once at start, before it starts threads that train. The dtrain command calls
 *
 *     dt_gemm_setup();                      OpenBLAS single-threaded, its server threads stopped
 *     dt_gemm_use(getenv("DTRAIN_GEMM"));   when DTRAIN_GEMM is set: the matrix-multiply kernel
 *     dt_mapview_guard_install();           the SIGBUS guard, so files are mapped, not copied
 *
 * and a program that trains or scores through libdtrain does best to do the same. None of them
 * is needed for correct results: without dt_gemm_setup, OpenBLAS's threads compete with the
 * library's pool for cores; without the guard, readers copy file bytes instead of mapping them.
 *
 * The library's log is process-wide too: its threshold and sink (dt_log_set_level,
 * dt_log_set_sink, env DTRAIN_LOG) are in log.h, beside the log they set. */
#ifndef DTRAIN_PROCESS_H
#define DTRAIN_PROCESS_H

#include <stdbool.h>

#include "dtrain/api.h"
#include "dtrain/status.h"

/* Makes OpenBLAS single-threaded and stops its server threads, for the whole process.
 * Idempotent. The library never calls it: the program decides. dtrain splits each matrix
 * product over its own thread pool and calls OpenBLAS on one thread per share, so OpenBLAS's
 * own threads (one per core) would only poll against the pool's. */
DT_API void dt_gemm_setup(void);

/* The matrix-multiply kernel every layer's products run on: "avx512" (dtrain's own, on CPUs with
 * AVX-512F) or "blas" (OpenBLAS). By default the first of these this CPU runs, chosen at first
 * use. dtrain's own gives a product the same bits however it is split over threads; OpenBLAS's
 * last bits depend on the sizes of the shares. */
DT_API const char *dt_gemm_kernel_name(void);

/* Makes name ("avx512", "blas", or "auto" for the default) the kernel of every later product in
 * the process: DT_ERR_UNSUPPORTED when this CPU cannot run it, DT_ERR_INVALID for another name.
 * Not to be called while another thread trains or scores. "blas" reproduces the parameters of
 * runs made before dtrain had its own kernel. */
DT_API dt_status dt_gemm_use(const char *name);

/* Whether this CPU runs the kernel called name. */
DT_API bool dt_gemm_kernel_runs_here(const char *name);

/* Installs the SIGBUS guard for the whole process (once; later calls do nothing): a handler that,
 * when a file mapped by one of the library's readers was truncated under it, maps zeros over the
 * page that faulted and marks the reader's view, which then reports the file as damaged; every
 * other SIGBUS goes on to the handler installed before. With it, readers map files rather than
 * copy them; without it (the library never installs it on its own) they read the bytes into
 * memory. DT_ERR_IO when sigaction fails. */
DT_API dt_status dt_mapview_guard_install(void);

#endif
