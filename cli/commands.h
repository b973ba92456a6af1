/* The dtrain subcommands. Each returns the process exit status: 0 success, 1 a failure while
 * running (a file, the data, training), 2 a usage error (flags). */
#ifndef DTRAIN_CLI_COMMANDS_H
#define DTRAIN_CLI_COMMANDS_H

#include <stdbool.h>

#include "dtrain/evaluator.h"

int cmd_train(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_evaluate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_server(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_cluster(int argc, char **argv);

/* Exit statuses an operator acts on (Kubeflow's restartPolicy ExitCode restarts a pod on a
 * retryable one; 138 is among the codes its documentation leaves to programs): */
#define CLI_EXIT_FAILED 1    /* permanent: a bad config, bad data, a model that does not fit */
#define CLI_EXIT_USAGE 2     /* a flag or argument the command does not take */
#define CLI_EXIT_RETRY 138   /* transient: a peer lost or silent, the cluster not formed in time,
                                a peer not ready */

/* Prints "dtrain: error: <message>" on stderr and returns status. */
int cli_fail(int status, const char *message);
/* The same for a library failure st: CLI_EXIT_RETRY for the transient kinds (DT_ERR_PEER,
 * DT_ERR_TIMEOUT, DT_ERR_UNAVAILABLE), saying so on the line, else CLI_EXIT_FAILED. */
int cli_fail_status(dt_status st, const char *message);

#endif
