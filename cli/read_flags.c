/* The flags that say how test or scoring data is read (see read_flags.h). */
#include "read_flags.h"

#include "config_flags.h"

void cli_read_flags_add(flag_table *t, dt_input_options *io, const char *field_help)
{
#define ROW(...) flags_add_field(t, *io, __VA_ARGS__)
    ROW("features", FLAG_STRING, features, "tfrecord: the Example features to read, "
        "KEY:LENGTH[:SCALE[:DEFAULT]],...");
    ROW("label-key", FLAG_STRING, label_key, "tfrecord: the feature holding the label");
    ROW("compression", FLAG_CUSTOM, compression, "tfrecord: none, gzip, zlib or auto",
        .custom = &flag_compression);
    ROW("num-features", FLAG_INT, num_features, "libsvm: dense features per example");
    ROW("index-base", FLAG_INT, index_base, "libsvm: the first feature index");
    ROW("field-size", FLAG_INT, field_size, field_help);
    ROW("ids-key", FLAG_STRING, ids_key, "tfrecord, CTR models: the int64 feature ids");
    ROW("values-key", FLAG_STRING, values_key, "tfrecord, CTR models: the float feature values");
    ROW("hash-buckets", FLAG_INT64, hash_buckets, "CTR models: ids hashed with their field into "
        "this many rows (as dtrain train's --hash-buckets)");
    ROW("csv-header", FLAG_BOOL, csv_header, "csv: the first line names the columns");
    ROW("label-column", FLAG_STRING, label_column, "csv: the label's column, by name or 0-based "
        "index");
#undef ROW
}
