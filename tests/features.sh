#!/usr/bin/env bash
# Tests of feature specs from the command line: `dtrain data transform` on a census-style CSV,
# every id checked independently (Fingerprint64 from FarmHash itself through farmhash_judge,
# FingerprintCat64, bucket edges, vocabulary order and OOV buckets recomputed in python); a spec
# written with --write-spec read back without a pass over the data; Criteo TSV (and the same rows
# as CSV and TFRecord) through label/I1..I13/C1..C26; one-line errors naming the file, the line
# and the column; --skip-bad-records. usage: tests/features.sh BUILD_DIR COUNTS_FILE
set -u
build=$(cd "$1" && pwd)
counts=$2
dtrain="$build/dtrain"
judge="$build/tests/farmhash_judge"
tmp=$(mktemp -d /tmp/dtrain-features-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

# --- the independent checker: python over the data and dtrain's JSON lines ---
cat > "$tmp/check.py" <<'PY'
import bisect, csv, json, math, random, subprocess, sys

M64 = (1 << 64) - 1
KEY = 0xDECAFCAFFE
WORKCLASS = ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
             "State-gov", "Without-pay"]
EDUCATION = ["Bachelors", "HS-grad", "11th", "Masters", "9th", "Some-college", "Doctorate"]
OCCUPATION = ["Tech-support", "Craft, repair", "Other-service", "Sales", "Exec-managerial",
              "Prof-specialty", "Handlers-cleaners", "Adm-clerical", "Farming-fishing",
              "Transport-moving", "Protective-serv"]
GENRES = ["action", "comedy", "drama", "horror"]
BOUNDARIES = [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]
EDU_VOCAB = ["Bachelors", "HS-grad", "Masters"]


def gen_census(path):
    """50 rows; a quoted occupation with a comma, padded cells, an income with a space."""
    rnd = random.Random(7)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["age", "workclass", "education", "occupation", "hours_per_week", "genres",
                    "w", "item_id", "last_item_id", "income"])
        for i in range(50):
            wc = "Without-pay" if i == 13 else rnd.choice(WORKCLASS[:6])
            gs = [g for g in GENRES if rnd.random() < 0.4]
            ws = [str(rnd.choice([0.5, 1, 2, 3.25])) for _ in gs]
            last = rnd.choice(["", str(rnd.randrange(100000)), "100000", "7"])
            income = rnd.choice(["<=50K", ">50K", " >50K", "<=50K "])
            w.writerow([str(rnd.randrange(17, 91)), wc if i % 5 else " " + wc,
                        rnd.choice(EDUCATION), rnd.choice(OCCUPATION),
                        str(rnd.randrange(1, 100)), "|".join(gs), "|".join(ws),
                        str(rnd.randrange(100000)), last, income])


def fingerprints(judge, strings):
    uniq = sorted(set(strings))
    text = "".join(s.encode().hex() + "\n" for s in uniq)
    out = subprocess.run([judge], input=text.encode(), stdout=subprocess.PIPE,
                         check=True).stdout.decode().split()
    assert len(out) == len(uniq), "the judge answered %d of %d" % (len(out), len(uniq))
    return {s: int(v) for s, v in zip(uniq, out)}


def shift_mix(v):
    return v ^ (v >> 47)


def cat64(a, b):
    k = 0xc6a4a7935bd1e995
    r = a ^ k
    r ^= (shift_mix((b * k) & M64) * k) & M64
    r = (r * k) & M64
    r = (shift_mix(r) * k) & M64
    return shift_mix(r)


def near(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


class Checker:
    def __init__(self):
        self.errors = []
        self.checked = 0

    def eq(self, what, got, want):
        self.checked += 1
        if got != want and len(self.errors) < 8:
            self.errors.append("%s: got %r, expected %r" % (what, got, want))

    def ok(self, what, cond):
        self.checked += 1
        if not cond and len(self.errors) < 8:
            self.errors.append(what)

    def finish(self, summary):
        if self.errors:
            print("; ".join(self.errors))
            sys.exit(1)
        print("%s, %d values checked" % (summary, self.checked))


def census_rows(path):
    with open(path, newline="") as f:
        return [{k: v.strip() for k, v in r.items()} for r in csv.DictReader(f)]


def workclass_vocab(rows):
    counts = {}
    for r in rows:
        counts[r["workclass"]] = counts.get(r["workclass"], 0) + 1
    kept = [t for t, c in counts.items() if c >= 2]
    return sorted(kept, key=lambda t: (-counts[t], t.encode()))


def check_census(csv_path, out_path, judge):
    rows = census_rows(csv_path)
    outs = [json.loads(l) for l in open(out_path)]
    c = Checker()
    c.eq("rows", len(outs), len(rows))
    genres = [g for r in rows for g in r["genres"].split("|") if g]
    fp = fingerprints(judge, [r["occupation"] for r in rows] + [r["education"] for r in rows] +
                      genres)
    ages = [float(r["age"]) for r in rows]
    mean = sum(ages) / len(ages)
    std = math.sqrt(sum((a - mean) ** 2 for a in ages) / len(ages))
    vocab = workclass_vocab(rows)
    crosses = set()
    for i, (r, o) in enumerate(zip(rows, outs)):
        w = "row %d " % (i + 1)
        c.eq(w + "label", o["label"], ["<=50K", ">50K"].index(r["income"]))
        age = float(r["age"])
        c.ok(w + "age %r vs %r" % (o["age"], (age - mean) / std),
             near(o["age"][0], (age - mean) / std))
        c.ok(w + "hours", near(o["hours"][0], math.log1p(float(r["hours_per_week"]))))
        bucket = bisect.bisect_right(BOUNDARIES, age)
        c.eq(w + "age_buckets", o["age_buckets"]["ids"], [bucket])
        edu, occ = r["education"], r["occupation"]
        edu_id = EDU_VOCAB.index(edu) if edu in EDU_VOCAB else 3 + fp[edu] % 2
        c.eq(w + "education", o["education"]["ids"], [edu_id])
        c.eq(w + "occupation", o["occupation"]["ids"], [fp[occ] % 1000])
        wc = r["workclass"]
        c.eq(w + "workclass", o["workclass"]["ids"],
             [vocab.index(wc) if wc in vocab else len(vocab)])
        x = cat64(cat64(KEY, fp[edu]), fp[occ]) % 1000
        crosses.add(x)
        c.eq(w + "edu_x_occ", o["edu_x_occ"]["ids"], [x])
        c.eq(w + "age_x_edu", o["age_x_edu"]["ids"], [cat64(cat64(KEY, bucket), fp[edu]) % 1000])
        c.eq(w + "item", o["item"]["ids"], [int(r["item_id"])])
        last = r["last_item_id"]
        c.eq(w + "last_item", o["last_item"]["ids"],
             [] if last == "" else [int(last) if int(last) < 100000 else 0])
        gs = [g for g in r["genres"].split("|") if g]
        ws = [float(x) for x in r["w"].split("|") if x]
        c.eq(w + "genres", o["genres"]["ids"], [fp[g] % 1000 for g in gs])
        c.eq(w + "genres_w ids", o["genres_w"]["ids"], [fp[g] % 1000 for g in gs])
        c.eq(w + "genres_w weights", o["genres_w"]["weights"], ws)
    # The checks are not vacuous: the crosses spread, the OOV bucket and quoted cells occur.
    c.ok("only %d distinct crosses" % len(crosses), len(crosses) >= 20)
    c.ok("no OOV workclass", any(r["workclass"] not in vocab for r in rows))
    c.ok("no quoted occupation", any("," in r["occupation"] for r in rows))
    c.finish("%d rows; workclass vocabulary %s" % (len(rows), vocab))


def check_written(csv_path, spec_path):
    rows = census_rows(csv_path)
    spec = json.load(open(spec_path))
    cols = {col["name"]: col for col in spec["columns"]}
    ages = [float(r["age"]) for r in rows]
    mean = sum(ages) / len(ages)
    std = math.sqrt(sum((a - mean) ** 2 for a in ages) / len(ages))
    c = Checker()
    n = cols["age"].get("normalizer")
    c.ok("age normalizer %r" % (n,), isinstance(n, dict) and n.get("adapted") is True and
         near(n["mean"], mean, 1e-12) and near(n["std"], std, 1e-12))
    c.eq("workclass vocabulary", cols["workclass"].get("vocabulary"), workclass_vocab(rows))
    c.finish("mean %.6g std %.6g" % (mean, std))


def check_criteo(tsv_path, out_path, judge, size):
    rows = [l.rstrip("\n").split("\t") for l in open(tsv_path)]
    outs = [json.loads(l) for l in open(out_path)]
    c = Checker()
    c.eq("rows", len(outs), len(rows))
    fp = fingerprints(judge, [v for r in rows for v in r[14:] if v])
    missing = 0
    for i, (r, o) in enumerate(zip(rows, outs)):
        w = "row %d " % (i + 1)
        c.eq(w + "fields", len(r), 40)
        c.eq(w + "label", o["label"], float(r[0]))
        for k in range(1, 14):
            x = float(r[k]) if r[k] else 0.0
            missing += r[k] == ""
            c.ok(w + "I%d %r vs %r" % (k, o["I%d" % k], r[k]),
                 near(o["I%d" % k][0], math.log1p(max(x, 0.0)), 1e-6))
        for k in range(1, 27):
            v = r[13 + k]
            missing += v == ""
            c.eq(w + "C%d" % k, o["C%d" % k]["ids"], [fp[v] % size] if v else [])
    c.ok("no missing values in the data", missing > 0)
    c.finish("%d rows, %d missing values" % (len(rows), missing))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gen":
        gen_census(sys.argv[2])
    elif cmd == "census":
        check_census(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "written":
        check_written(sys.argv[2], sys.argv[3])
    elif cmd == "criteo":
        check_criteo(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
PY
check() { python3 "$tmp/check.py" "$@"; }

# --- the census spec ---
cat > "$tmp/census.json" <<'JSON'
{"label": {"key": "income", "vocabulary": ["<=50K", ">50K"]},
 "columns": [
   {"name": "age", "type": "numeric", "normalizer": "standardize"},
   {"name": "hours", "type": "numeric", "key": "hours_per_week", "normalizer": "log1p"},
   {"name": "age_buckets", "type": "bucketized", "source": "age",
    "boundaries": [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]},
   {"name": "education", "type": "vocabulary_list", "vocabulary": ["Bachelors", "HS-grad", "Masters"],
    "num_oov_buckets": 2},
   {"name": "occupation", "type": "hash_bucket", "hash_bucket_size": 1000},
   {"name": "workclass", "type": "vocabulary", "adapt": {"min_count": 2}, "num_oov_buckets": 1},
   {"name": "edu_x_occ", "type": "crossed", "keys": ["education", "occupation"], "hash_bucket_size": 1000},
   {"name": "age_x_edu", "type": "crossed", "keys": ["age_buckets", "education"], "hash_bucket_size": 1000},
   {"name": "item", "type": "identity", "key": "item_id", "num_buckets": 100000},
   {"name": "last_item", "type": "identity", "key": "last_item_id", "num_buckets": 100000,
    "default_value": 0},
   {"name": "genres", "type": "hash_bucket", "hash_bucket_size": 1000, "separator": "|"},
   {"name": "genres_w", "type": "weighted", "categorical": "genres", "weight_key": "w"}]}
JSON
check gen "$tmp/census.csv"
rows=$(($(wc -l < "$tmp/census.csv") - 1))

run "$dtrain" data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/census.csv" -n 0 \
    --write-spec "$tmp/written.json"
cp "$tmp/out" "$tmp/census.out"
lines=$(wc -l < "$tmp/census.out")
if [ "$status" -eq 0 ] && [ "$lines" -eq "$rows" ] && [ "$rows" -eq 50 ] && [ ! -s "$tmp/err" ] &&
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/census.out"; then
    ok features_census_transform_json_lines "$lines rows"
else
    fail features_census_transform_json_lines "exit $status, $lines lines of $rows: $(head -c 300 "$tmp/err")"
fi

if [ ! -x "$judge" ]; then
    fail features_census_ids_match_farmhash "no judge at $judge"
elif why=$(check census "$tmp/census.csv" "$tmp/census.out" "$judge" 2>&1); then
    ok features_census_ids_match_farmhash "$why"
else
    fail features_census_ids_match_farmhash "$why"
fi

run "$dtrain" data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/census.csv" -n 3
if [ "$status" -eq 0 ] && [ "$(wc -l < "$tmp/out")" -eq 3 ] && head -3 "$tmp/census.out" | cmp -s - "$tmp/out"; then
    ok features_transform_n_limits_rows
else fail features_transform_n_limits_rows "exit $status, $(wc -l < "$tmp/out") lines"; fi

# --- the written spec: everything adapted is in it, and it transforms alike without a pass ---
if [ -s "$tmp/written.json" ] && why=$(check written "$tmp/census.csv" "$tmp/written.json" 2>&1) &&
    ! grep -q '"standardize"' "$tmp/written.json"; then
    ok features_written_spec_holds_adapted_values "$why"
else
    fail features_written_spec_holds_adapted_values "${why:-no file}: $(head -c 300 "$tmp/written.json")"
fi
run "$dtrain" data transform --feature-spec "$tmp/written.json" --data "csv:$tmp/census.csv" -n 0
if [ "$status" -eq 0 ] && cmp -s "$tmp/out" "$tmp/census.out"; then
    ok features_written_spec_transforms_identically
else
    fail features_written_spec_transforms_identically "exit $status: $(diff "$tmp/out" "$tmp/census.out" | head -4) $(head -c 200 "$tmp/err")"
fi
# Five rows alone: a pass over them would standardize age by other statistics.
head -6 "$tmp/census.csv" > "$tmp/five.csv"
run "$dtrain" data transform --feature-spec "$tmp/written.json" --data "csv:$tmp/five.csv" -n 0
if [ "$status" -eq 0 ] && head -5 "$tmp/census.out" | cmp -s - "$tmp/out"; then
    ok features_written_spec_is_not_adapted_again
else fail features_written_spec_is_not_adapted_again "exit $status: $(diff <(head -5 "$tmp/census.out") "$tmp/out" | head -4)"; fi
# The same five rows through the original spec are adapted on themselves: a different age.
run "$dtrain" data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/five.csv" -n 0
if [ "$status" -eq 0 ] && ! head -5 "$tmp/census.out" | cmp -s - "$tmp/out"; then
    ok features_original_spec_adapts_on_its_data
else fail features_original_spec_adapts_on_its_data "exit $status"; fi

# A vocabulary file named relative to a spec in a relative directory, written and read back
# from the same place.
mkdir -p "$tmp/sub"
printf 'HS-grad\nBachelors\nMasters\n' > "$tmp/sub/edu.txt"
cat > "$tmp/sub/vf.json" <<'JSON'
{"columns": [{"name": "age", "type": "numeric", "normalizer": "standardize"},
             {"name": "edu", "type": "vocabulary_file", "key": "education", "vocabulary_file": "edu.txt",
              "num_oov_buckets": 1}]}
JSON
( cd "$tmp" && "$dtrain" data transform --feature-spec sub/vf.json --data csv:census.csv -n 0 \
    --write-spec sub/vf_written.json > vf1.out 2> vf1.err &&
  "$dtrain" data transform --feature-spec sub/vf_written.json --data csv:census.csv -n 0 \
    > vf2.out 2> vf2.err )
status=$?
if [ "$status" -eq 0 ] && [ -s "$tmp/vf1.out" ] && cmp -s "$tmp/vf1.out" "$tmp/vf2.out" &&
    grep -q '"edu":{"ids":\[1\]}' "$tmp/vf1.out"; then
    ok features_written_vocabulary_file_is_found_again
else
    fail features_written_vocabulary_file_is_found_again "exit $status: $(cat "$tmp/vf1.err" "$tmp/vf2.err" | head -c 300)"
fi

# --- Criteo TSV, and the same rows as CSV and as tf.Example records ---
"$dtrain" data gen-ctr --rows 200 --seed 3 --format criteo --out "$tmp/c.tsv" > /dev/null
"$dtrain" data gen-ctr --rows 200 --seed 3 --format csv --out "$tmp/c.csv" > /dev/null
"$dtrain" data gen-ctr --rows 200 --seed 3 --format tfrecord-columns --out "$tmp/c.tfrecord" > /dev/null
python3 - "$tmp/criteo.json" <<'PY'
import json, sys
cols = [{"name": "I%d" % k, "type": "numeric", "default_value": 0, "normalizer": "log1p"}
        for k in range(1, 14)]
cols += [{"name": "C%d" % k, "type": "hash_bucket", "hash_bucket_size": 10000} for k in range(1, 27)]
json.dump({"label": "label", "columns": cols}, open(sys.argv[1], "w"))
PY
run "$dtrain" data transform --feature-spec "$tmp/criteo.json" --data "criteo:$tmp/c.tsv" -n 0
cp "$tmp/out" "$tmp/criteo.out"
if [ "$status" -eq 0 ] && [ "$(wc -l < "$tmp/criteo.out")" -eq 200 ] &&
    why=$(check criteo "$tmp/c.tsv" "$tmp/criteo.out" "$judge" 10000 2>&1); then
    ok features_criteo_tsv_transform "$why"
else
    fail features_criteo_tsv_transform "exit $status: ${why:-} $(head -c 300 "$tmp/err")"
fi
for form in csv tfrecord; do
    run "$dtrain" data transform --feature-spec "$tmp/criteo.json" --data "$form:$tmp/c.$form" -n 0
    if [ "$status" -eq 0 ] && cmp -s "$tmp/out" "$tmp/criteo.out"; then
        ok "features_criteo_rows_as_${form}_alike"
    else
        fail "features_criteo_rows_as_${form}_alike" "exit $status: $(diff "$tmp/out" "$tmp/criteo.out" | head -3 | cut -c1-200) $(head -c 200 "$tmp/err")"
    fi
done

# --- errors: exit 1, one line naming the file, the line and the column ---
# census.csv line N is row N - 1.
awk -F, -v OFS=, 'NR == 4 { $1 = "abc" } { print }' "$tmp/census.csv" > "$tmp/bad_num.csv"
expect_error features_error_not_a_number_in_adapt 1 \
    "bad_num.csv: line 4: column 'age' (key 'age'): 'abc' is not a number" \
    data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/bad_num.csv"
expect_error features_error_not_a_number_in_transform 1 \
    "bad_num.csv: line 4: column 'age' (key 'age'): 'abc' is not a number" \
    data transform --feature-spec "$tmp/written.json" --data "csv:$tmp/bad_num.csv" -n 0
awk -F, -v OFS=, 'NR == 7 { $NF = ">60K" } { print }' "$tmp/census.csv" > "$tmp/bad_label.csv"
expect_error features_error_label_outside_vocabulary 1 \
    "bad_label.csv: line 7: label 'income': '>60K' is not in its vocabulary" \
    data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/bad_label.csv" -n 0
python3 - "$tmp/census.json" "$tmp/cg.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["columns"].append({"name": "gain", "type": "numeric", "key": "capital_gain", "default_value": 0})
json.dump(s, open(sys.argv[2], "w"))
PY
expect_error features_error_key_missing_from_header 1 \
    "the spec reads key 'capital_gain', which the header does not name" \
    data transform --feature-spec "$tmp/cg.json" --data "csv:$tmp/census.csv"
if grep -q "census.csv" "$tmp/err" && grep -q "cg.json" "$tmp/err"; then
    ok features_error_key_missing_names_data_and_spec
else fail features_error_key_missing_names_data_and_spec "$(cat "$tmp/err")"; fi
awk -F'\t' -v OFS='\t' 'NR == 5 { $4 = "x7" } { print }' "$tmp/c.tsv" > "$tmp/bad.tsv"
expect_error features_error_criteo_not_a_number 1 \
    "bad.tsv: line 5: column 'I3' (key 'I3'): 'x7' is not a number" \
    data transform --feature-spec "$tmp/criteo.json" --data "criteo:$tmp/bad.tsv" -n 0
sed 's/"hash_bucket_size": 1000, "separator"/"hash_bucket_sz": 1000, "separator"/' "$tmp/census.json" > "$tmp/typo.json"
expect_error features_error_spec_unknown_field 1 \
    "typo.json: columns[10] 'genres': unknown field \"hash_bucket_sz\"" \
    data transform --feature-spec "$tmp/typo.json" --data "csv:$tmp/census.csv"
printf '{"columns": [\n  {"name": "a", "type": "numeric"}\n  {"name": "b"}]}\n' > "$tmp/broken.json"
expect_error features_error_spec_invalid_json 1 "broken.json: line 3, column 3: not valid JSON" \
    data transform --feature-spec "$tmp/broken.json" --data "csv:$tmp/census.csv"

# --- --skip-bad-records: both bad rows skipped and counted ---
awk -F, -v OFS=, 'NR == 4 { $1 = "abc" } NR == 7 { $NF = ">60K" } { print }' "$tmp/census.csv" > "$tmp/bad2.csv"
run "$dtrain" data transform --feature-spec "$tmp/written.json" --data "csv:$tmp/bad2.csv" -n 0 --skip-bad-records
if [ "$status" -eq 0 ] && grep -q "skipped 2 bad rows" "$tmp/err" &&
    sed '3d;6d' "$tmp/census.out" | cmp -s - "$tmp/out"; then
    ok features_skip_bad_records "$(wc -l < "$tmp/out") rows: $(cat "$tmp/err")"
else
    fail features_skip_bad_records "exit $status, $(wc -l < "$tmp/out") rows: $(head -c 300 "$tmp/err")"
fi
run "$dtrain" data transform --feature-spec "$tmp/census.json" --data "csv:$tmp/bad2.csv" -n 0 --skip-bad-records
if [ "$status" -eq 0 ] && grep -q "skipped 2 bad rows" "$tmp/err" && [ "$(wc -l < "$tmp/out")" -eq 48 ]; then
    ok features_skip_bad_records_with_adapt "$(cat "$tmp/err")"
else
    fail features_skip_bad_records_with_adapt "exit $status, $(wc -l < "$tmp/out") rows: $(head -c 300 "$tmp/err")"
fi

echo "features: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
