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

/* Prints "dtrain: error: <message>" on stderr and returns status. */
int cli_fail(int status, const char *message);

#endif
