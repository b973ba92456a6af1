/* The flags that say how test or scoring data is read (see read_flags.h). */
#include "read_flags.h"

#define ROW(name_, kind_, def_, help_, dst_) \
    flags_add(t, (flag_def){name_, kind_, def_, help_, dst_, false})

void cli_read_flags_add(flag_table *t, cli_read_flags *v, const char *field_help)
{
    ROW("features", FLAG_STRING, NULL, "tfrecord: the Example features to read, "
        "KEY:LENGTH[:SCALE[:DEFAULT]],...", &v->features);
    ROW("label-key", FLAG_STRING, "label", "tfrecord: the feature holding the label",
        &v->label_key);
    ROW("compression", FLAG_STRING, "auto", "tfrecord: none, gzip, zlib or auto",
        &v->compression);
    ROW("num-features", FLAG_INT, "0", "libsvm: dense features per example", &v->num_features);
    ROW("index-base", FLAG_INT, "1", "libsvm: the first feature index", &v->index_base);
    ROW("field-size", FLAG_INT, "0", field_help, &v->field_size);
    ROW("ids-key", FLAG_STRING, "ids", "tfrecord, CTR models: the int64 feature ids",
        &v->ids_key);
    ROW("values-key", FLAG_STRING, "values", "tfrecord, CTR models: the float feature values",
        &v->values_key);
    ROW("hash-buckets", FLAG_INT64, "0", "CTR models: ids hashed with their field into this "
        "many rows (as dtrain train's --hash-buckets)", &v->hash_buckets);
    ROW("csv-header", FLAG_BOOL, "false", "csv: the first line names the columns",
        &v->csv_header);
    ROW("label-column", FLAG_STRING, NULL, "csv: the label's column, by name or 0-based index",
        &v->label_column);
}

dt_status cli_read_flags_apply(const cli_read_flags *v, dt_input_options *io)
{
    if (dt_compression_parse(v->compression, &io->compression) != DT_OK)
        return dt_error_prefix(DT_ERR_INVALID, "--compression");
    io->features = v->features, io->label_key = v->label_key;
    io->num_features = v->num_features, io->index_base = v->index_base;
    io->csv_header = v->csv_header, io->label_column = v->label_column;
    io->field_size = v->field_size, io->hash_buckets = v->hash_buckets;
    io->ids_key = v->ids_key, io->values_key = v->values_key;
    return dt_input_options_check(io);
}
