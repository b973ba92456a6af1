#!/usr/bin/env bash
# Input pipeline benchmark: a 1 GB TFRecord file of CTR Examples (13 float, 26 int64 features and
# a label) read, CRC-checked and parsed on 1 and 2 threads against `cat FILE > /dev/null` in the
# same run; LibSVM parsing of the same rows; and the step time the image pipeline with prefetch
# adds to the tutorial CNN. usage: bench/input.sh BUILD [DIR]  (DIR keeps the generated files)
set -euo pipefail
build=$1
dir=${2:-/tmp/dtrain-input-bench}
bin="$build/bench/input_bench"
[ -x "$bin" ] || { echo "bench/input.sh: $bin is missing: make $bin" >&2; exit 1; }
mkdir -p "$dir"
[ -s "$dir/ctr.tfrecord" ] || "$bin" gen "$dir" 1024
cat "$dir/ctr.tfrecord" > /dev/null # into the page cache, for both readers alike
best=""
for i in 1 2 3 4 5; do
    t0=$(date +%s.%N)
    cat "$dir/ctr.tfrecord" > /dev/null
    t1=$(date +%s.%N)
    t=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
done
mb=$(($(stat -c %s "$dir/ctr.tfrecord") / 1000000))
printf 'cat %s > /dev/null: %d MB in %.3f s: %.0f MB/s (best of 5)\n' "$dir/ctr.tfrecord" "$mb" "$best" \
    "$(echo "$mb / $best" | bc -l)"
cat_mbs=$(echo "$mb / $best" | bc -l)
"$bin" read "$dir/ctr.tfrecord" 2 staged
for threads in 1 2; do
    line=$("$bin" read "$dir/ctr.tfrecord" $threads)
    echo "$line"
    mbs=$(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) MB\/s.*/\1/p')
    printf '  %d thread%s: %.0f%% of cat (goal >= 50%% on 2 threads)\n' "$threads" \
        "$([ "$threads" = 1 ] || echo s)" "$(echo "100 * $mbs / $cat_mbs" | bc -l)"
done
"$bin" libsvm "$dir/ctr.svm"
# CTR rows as DeepFM reads them (39 fields, ids checked against the table's rows): the input
# thread's work per row when a CTR model trains from LibSVM text.
[ -x "$build/dtrain" ] || { echo "bench/input.sh: $build/dtrain is missing: make" >&2; exit 1; }
if [ ! -s "$dir/gen_ctr.svm" ] || [ ! -s "$dir/gen_ctr.txt" ]; then
    "$build/dtrain" data gen-ctr --rows 200000 --seed 1 --out "$dir/gen_ctr.svm" \
        > "$dir/gen_ctr.txt"
fi
ctr_rows=$(sed -n 's/.*feature_size=\([0-9]*\).*/\1/p' "$dir/gen_ctr.txt")
"$bin" libsvm-fields "$dir/gen_ctr.svm" 39 "$ctr_rows"
"$bin" overhead 937
