#!/usr/bin/env bash
# Tests of the census-style generator (`dtrain data gen-ctr --format census`) and of the census
# wide & deep spec (examples/census_wide_deep.json) on its rows: the same bytes whatever the
# threads, the UCI Adult header and value lists, the "?" and ">50K" rates, `dtrain data transform`
# over the rows, the crosses' gain, and wide & deep training to within 0.03 of the teacher's test
# AUC. usage: tests/census.sh BUILD_DIR COUNTS_FILE
set -u
build=$1
counts=$2
dtrain="$build/dtrain"
spec="$(cd "$(dirname "$0")/.." && pwd)/examples/census_wide_deep.json"
tmp=$(mktemp -d /tmp/dtrain-census-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

. "$(dirname "$0")/lib.sh"

# --- the generator: rows by seed, the same bytes on 1 and 2 threads ---
# 40,000 rows are 5 blocks: one round on 2 threads, two rounds on 1.
run "$dtrain" data gen-ctr --format census --rows 40000 --seed 5 --threads 2 --out "$tmp/t2.csv"
gen_status=$status gen_out=$(cat "$tmp/out")
run "$dtrain" data gen-ctr --format census --rows 40000 --seed 5 --threads 1 --out "$tmp/t1.csv"
t1_status=$status
run "$dtrain" data gen-ctr --format census --rows 40000 --seed 6 --threads 2 --out "$tmp/s6.csv"
lines=$(wc -l < "$tmp/t2.csv")
if [ "$gen_status" -eq 0 ] && [ "$t1_status" -eq 0 ] && [ "$status" -eq 0 ] && \
    [ "$lines" = 40001 ] && cmp -s "$tmp/t1.csv" "$tmp/t2.csv" && ! cmp -s "$tmp/t2.csv" "$tmp/s6.csv"; then
    ok census_gen_is_reproducible_whatever_the_threads "$gen_out"
else
    fail census_gen_is_reproducible_whatever_the_threads "exit $gen_status/$t1_status/$status, $lines lines, cmp $(cmp "$tmp/t1.csv" "$tmp/t2.csv" 2>&1 | head -1): $gen_out $(cat "$tmp/err")"
fi
if echo "$gen_out" | grep -qE '^rows=40000 teacher_auc=0\.[0-9]{4} positives=0\.[0-9]{4} rows_per_s=[0-9]+$'; then
    ok census_gen_reports_teacher_auc
else fail census_gen_reports_teacher_auc "got: $gen_out"; fi

header=age,workclass,fnlwgt,education,education_num,marital_status,occupation,relationship,race
header=$header,gender,capital_gain,capital_loss,hours_per_week,native_country,income_bracket
if [ "$(head -1 "$tmp/t2.csv")" = "$header" ]; then ok census_gen_header_is_adults
else fail census_gen_header_is_adults "got: $(head -1 "$tmp/t2.csv")"; fi

# Every row: 15 cells from adult.data's value lists, education_num matching education, ages
# 17-90, and the rates of "?" (adult.data: workclass 5.6%, occupation 5.7%, native_country 1.8%,
# nowhere else) and of ">50K" (24%).
python3 - "$tmp/t2.csv" > "$tmp/rates" 2>&1 <<'PY'
import csv, sys
EDU = ["Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
       "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school",
       "Doctorate"]
SETS = {
    "workclass": {"Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked", "?"},
    "marital_status": {"Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"},
    "occupation": {"Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces", "?"},
    "relationship": {"Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"},
    "race": {"White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"},
    "gender": {"Female", "Male"},
    "income_bracket": {"<=50K", ">50K"},
}
rows = list(csv.reader(open(sys.argv[1])))
head, rows = rows[0], rows[1:]
col = {k: i for i, k in enumerate(head)}
bad = []
for n, r in enumerate(rows, 2):
    if len(r) != 15:
        bad.append("line %d: %d cells" % (n, len(r)))
        continue
    for k, s in SETS.items():
        if r[col[k]] not in s:
            bad.append("line %d: %s %r" % (n, k, r[col[k]]))
    if r[col["education"]] not in EDU or int(r[col["education_num"]]) != EDU.index(r[col["education"]]) + 1:
        bad.append("line %d: education %s, education_num %s" % (n, r[col["education"]], r[col["education_num"]]))
    if not 17 <= int(r[col["age"]]) <= 90 or not 1 <= int(r[col["hours_per_week"]]) <= 99:
        bad.append("line %d: age %s hours %s" % (n, r[col["age"]], r[col["hours_per_week"]]))
    if "?" in (r[col[k]] for k in head if k not in ("workclass", "occupation", "native_country")):
        bad.append("line %d: '?' outside workclass, occupation and native_country" % n)
countries = {r[col["native_country"]] for r in rows}
rate = {k: sum(r[col[k]] == "?" for r in rows) / len(rows)
        for k in ("workclass", "occupation", "native_country")}
pos = sum(r[col["income_bracket"]] == ">50K" for r in rows) / len(rows)
zero_gain = sum(r[col["capital_gain"]] == "0" for r in rows) / len(rows)
print("workclass=%.4f occupation=%.4f native_country=%.4f positives=%.4f countries=%d "
      "zero_gain=%.3f" % (rate["workclass"], rate["occupation"], rate["native_country"], pos,
                          len(countries), zero_gain))
if bad:
    print("; ".join(bad[:5]))
ok = (not bad and 0.045 <= rate["workclass"] <= 0.07 and 0.045 <= rate["occupation"] <= 0.07
      and 0.012 <= rate["native_country"] <= 0.025 and 0.22 <= pos <= 0.26
      and 35 <= len(countries) <= 42 and 0.88 <= zero_gain <= 0.95)
sys.exit(0 if ok else 1)
PY
if [ $? -eq 0 ]; then ok census_gen_values_and_rates "$(cat "$tmp/rates")"
else fail census_gen_values_and_rates "$(head -c 600 "$tmp/rates")"; fi

expect_error census_gen_names_the_format 2 "census" data gen-ctr --format censsu --rows 10 --out "$tmp/x.csv"

# --- the spec over the rows: dtrain data transform ---
run "$dtrain" data transform --feature-spec "$spec" --data "csv:$tmp/t2.csv" -n 200
python3 - "$tmp/t2.csv" "$tmp/out" > "$tmp/tr" 2>&1 <<'PY'
import csv, json, sys
WORKCLASS = ["Self-emp-not-inc", "Private", "State-gov", "Federal-gov", "Local-gov", "?",
             "Self-emp-inc", "Without-pay", "Never-worked"]
BOUNDS = [18, 25, 30, 35, 40, 45, 50, 55, 60, 65]
rows = list(csv.DictReader(open(sys.argv[1])))
out = [json.loads(l) for l in open(sys.argv[2])]
bad, missing = [], 0
if len(out) != 200:
    bad.append("%d rows printed" % len(out))
for r, o in zip(rows, out):
    want_label = 1 if r["income_bracket"] == ">50K" else 0
    wc = WORKCLASS.index(r["workclass"])
    missing += r["workclass"] == "?"
    ab = sum(int(r["age"]) >= b for b in BOUNDS)
    if (o["label"] != want_label or o["age"] != [int(r["age"])]
            or o["capital_gain"] != [int(r["capital_gain"])]
            or o["workclass"] != {"ids": [wc]} or o["age_buckets"] != {"ids": [ab]}
            or len(o["occupation"]["ids"]) != 1
            or not 0 <= o["age_buckets_x_education_x_occupation"]["ids"][0] < 1000):
        bad.append("row %r gave %r" % (r, o))
print("rows=%d workclass_missing=%d" % (len(out), missing))
if bad:
    print(bad[0][:400])
sys.exit(0 if not bad and missing > 0 else 1)
PY
py_status=$?
if [ "$status" -eq 0 ] && [ "$py_status" -eq 0 ]; then ok census_transform_reads_the_rows "$(cat "$tmp/tr")"
else fail census_transform_reads_the_rows "exit $status: $(head -c 300 "$tmp/err") $(head -c 500 "$tmp/tr")"; fi

# --- training: adult.data's and adult.test's sizes, the tutorial's batch of 40 ---
"$dtrain" data gen-ctr --format census --rows 32561 --seed 1 --out "$tmp/train.csv" > /dev/null
run "$dtrain" data gen-ctr --format census --rows 16281 --seed 2 --out "$tmp/test.csv"
teacher=$(sed -n 's/.*teacher_auc=\([0-9.]*\).*/\1/p' "$tmp/out")
train_spec() { # NAME SPEC: trains 10 epochs; sets auc
    run "$dtrain" train --feature-spec "$2" --data "csv:$tmp/train.csv" --test-data "csv:$tmp/test.csv" \
        --epochs 10 --batch-size 40 --threads 2 --progress none --metrics-out "$tmp/$1.json"
    auc=$(json_field "$tmp/$1.json" test_auc 2>/dev/null)
}
train_spec wd "$spec"
wd_auc=$auc
if [ "$status" -eq 0 ] && [ -n "$wd_auc" ] && [ -n "$teacher" ] && \
    awk -v a="$wd_auc" -v t="$teacher" 'BEGIN { d = t - a; if (d < 0) d = -d; exit !(d <= 0.03) }'; then
    ok census_wide_deep_near_the_teacher "test_auc=$wd_auc teacher_auc=$teacher test_accuracy=$(json_field "$tmp/wd.json" test_accuracy) ${ms}ms"
else
    fail census_wide_deep_near_the_teacher "exit $status, test_auc ${wd_auc:-?} teacher ${teacher:-?}: $(head -c 300 "$tmp/err")"
fi
# The teacher's interactions are what the tutorial's crosses learn: the same model without them
# does worse.
python3 - "$spec" "$tmp/nocross.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["columns"] = [c for c in s["columns"] if c["type"] != "crossed"]
s["model"]["linear_feature_columns"] = [c for c in s["model"]["linear_feature_columns"] if "_x_" not in c]
json.dump(s, open(sys.argv[2], "w"))
PY
train_spec nocross "$tmp/nocross.json"
if [ "$status" -eq 0 ] && [ -n "$auc" ] && [ -n "$wd_auc" ] && \
    awk -v a="$wd_auc" -v n="$auc" 'BEGIN { exit !(a >= n + 0.005) }'; then
    ok census_crosses_help "with crosses $wd_auc, without $auc"
else
    fail census_crosses_help "exit $status, with crosses ${wd_auc:-?}, without ${auc:-?}: $(head -c 300 "$tmp/err")"
fi

echo "census: $passed passed, $failed failed"
echo "$passed $failed" > "$counts"
