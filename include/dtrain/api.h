/* What libdtrain exports. The shared library is built with -fvisibility=hidden: a function or
 * variable is visible to programs only when a public header (include/dtrain/) declares it with
 * DT_API, and everything else, however widely the library's own files share it, stays inside.
 * tests/exports.sh checks that the two agree (every DT_API name exported, nothing else).
 *
 * Code that compiles some of the library's files into another shared object (the MPI plugin,
 * mpi/dt_mpi_plugin.c, carries its own copies of src/coll/comm.c and src/core/status.c) defines
 * DT_API as empty on its command line (-DDT_API=), so that those copies stay hidden there. */
#ifndef DTRAIN_API_H
#define DTRAIN_API_H

#ifndef DT_API
#define DT_API __attribute__((visibility("default")))
#endif

#endif
