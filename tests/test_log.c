/* The library's log: the threshold filters by level, names parse, a message goes to the stream
 * its caller names or else to the sink, whole lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/log.h"
#include "test.h"

TEST(log_levels_parse_and_filter)
{
    CHECK(dt_log_level_parse("debug") == DT_LOG_DEBUG);
    CHECK(dt_log_level_parse("info") == DT_LOG_INFO);
    CHECK(dt_log_level_parse("warn") == DT_LOG_WARN);
    CHECK(dt_log_level_parse("warning") == DT_LOG_WARN);
    CHECK(dt_log_level_parse("off") == DT_LOG_OFF);
    CHECK(dt_log_level_parse("loud") == -1);
    dt_log_level before = dt_log_level_now();
    char *text = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&text, &n);
    CHECK(out != NULL);
    dt_log_set_level(DT_LOG_WARN);
    dt_log_to(out, DT_LOG_INFO, "hidden %d", 1);
    dt_log_to(out, DT_LOG_WARN, "shown %d", 2);
    dt_log_set_level(DT_LOG_DEBUG);
    dt_log_to(out, DT_LOG_DEBUG, "detail");
    dt_log_set_level(DT_LOG_OFF);
    dt_log_to(out, DT_LOG_WARN, "silenced");
    fclose(out);
    CHECK_MSG(text && strcmp(text, "shown 2\ndetail\n") == 0, "log: '%s'", text ? text : "");
    free(text);
    dt_log_set_level(before);
}

TEST(log_without_a_stream_goes_to_the_sink)
{
    dt_log_level before = dt_log_level_now();
    char *text = NULL;
    size_t n = 0;
    FILE *sink = open_memstream(&text, &n);
    CHECK(sink != NULL);
    dt_log_set_sink(sink);
    dt_log_set_level(DT_LOG_INFO);
    dt_log_to(NULL, DT_LOG_INFO, "to the sink");
    dt_log_set_sink(NULL);
    fclose(sink);
    CHECK_MSG(text && strcmp(text, "to the sink\n") == 0, "sink: '%s'", text ? text : "");
    free(text);
    dt_log_set_level(before);
}
