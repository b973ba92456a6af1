/* Synthetic census rows in the UCI Adult layout, with a fixed teacher (include/dtrain/gen_ctr.h,
 * format census): one CSV line per call, for dt_gen_ctr's blocks.
 *
 * The value lists are the Adult files' own, and the marginals follow adult.data's: each
 * categorical value drawn with its frequency there, age from its histogram, fnlwgt log-normal
 * around 178,000, capital_gain 0 in 92% of rows and otherwise one of the values the file holds
 * most, capital_loss likewise (never both), hours 40 in about half the rows. The columns depend
 * on each other as in the real data: marital status on age, gender on marital status (married
 * rows are mostly husbands), relationship on both, education on age (few degrees before 21),
 * occupation on education, hours on age and workclass, capital gains on education. A missing
 * workclass ("?", 5.6%) also leaves the occupation missing, as does Never-worked; native_country
 * is "?" in 1.8% of rows.
 *
 * The teacher is logistic: main effects of every column but fnlwgt (marital status and
 * relationship, education_num, an age-bucket curve peaking at 45-54, occupation, workclass,
 * hours, capital gains above 5,000 and losses of 1,800 to 2,600, gender, race, country), then
 * interactions that an additive model cannot hold: education_num counts more in professional
 * and managerial work, and every (education, occupation) pair and every (age bucket, education,
 * occupation) triple has a fixed weight of its own, a hash of the pair or triple, which is what
 * the census tutorial's crossed columns can learn. The bias is set for 24% of rows ">50K" (24.1%
 * in adult.data) by bisection over a fixed sample. */
#include "dtrain/gen_ctr.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/hash.h"
#include "gen_int.h"

const char dt_gen_census_header[] =
    "age,workclass,fnlwgt,education,education_num,marital_status,occupation,relationship,race,"
    "gender,capital_gain,capital_loss,hours_per_week,native_country,income_bracket\n";

/* ---- The value lists, with their counts in adult.data ---- */

enum { N_WORKCLASS = 8, N_EDUCATION = 16, N_MARITAL = 7, N_OCCUPATION = 14, N_RELATIONSHIP = 6,
       N_RACE = 5, N_COUNTRY = 41 };

static const char *const workclass[N_WORKCLASS] = {
    "Private", "Self-emp-not-inc", "Local-gov", "State-gov", "Self-emp-inc", "Federal-gov",
    "Without-pay", "Never-worked"};
static const double workclass_n[N_WORKCLASS] = {22696, 2541, 2093, 1298, 1116, 960, 14, 7};
static const double workclass_w[N_WORKCLASS] = {0.0, -0.3, 0.0, -0.1, 0.9, 0.5, -1.5, -2.0};
enum { WC_PRIVATE, WC_SELF_NOT_INC, WC_LOCAL, WC_STATE, WC_SELF_INC, WC_FEDERAL, WC_WITHOUT_PAY,
       WC_NEVER_WORKED, WC_MISSING };

/* In education_num order: education_num is the index + 1. */
static const char *const education[N_EDUCATION] = {
    "Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
    "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school",
    "Doctorate"};
static const double education_n[N_EDUCATION] = {51, 168, 333, 646, 514, 933, 1175, 433, 10501,
                                                7291, 1382, 1067, 5355, 1723, 576, 413};

static const char *const marital[N_MARITAL] = {
    "Married-civ-spouse", "Never-married", "Divorced", "Separated", "Widowed",
    "Married-spouse-absent", "Married-AF-spouse"};
static const double marital_w[N_MARITAL] = {1.1, -1.0, -0.8, -0.8, -0.6, -0.6, 1.0};
enum { MS_MARRIED, MS_NEVER, MS_DIVORCED, MS_SEPARATED, MS_WIDOWED, MS_ABSENT, MS_AF };
/* Marital status by age: under 25, 25-34, 35-54, 55 and over (about adult.data's shares). */
static const double marital_n[4][N_MARITAL] = {
    {7.0, 90.0, 1.5, 1.0, 0.1, 0.6, 0.05},
    {43.0, 42.0, 9.0, 3.5, 0.5, 1.5, 0.1},
    {60.0, 13.0, 18.5, 4.0, 2.5, 1.5, 0.05},
    {60.0, 6.0, 13.5, 2.5, 17.0, 1.5, 0.02}};

static const char *const occupation[N_OCCUPATION] = {
    "Prof-specialty", "Craft-repair", "Exec-managerial", "Adm-clerical", "Sales",
    "Other-service", "Machine-op-inspct", "Transport-moving", "Handlers-cleaners",
    "Farming-fishing", "Tech-support", "Protective-serv", "Priv-house-serv", "Armed-Forces"};
static const double occupation_n[N_OCCUPATION] = {4140, 4099, 4066, 3770, 3650, 3295, 2002,
                                                  1597, 1370, 994, 928, 649, 149, 9};
/* How much an occupation's share grows per year of education above 10. */
static const double occupation_edu[N_OCCUPATION] = {0.3, -0.2, 0.3, 0.0, 0.05, -0.25, -0.3,
                                                    -0.2, -0.3, -0.2, 0.1, 0.0, -0.3, 0.0};
static const double occupation_w[N_OCCUPATION] = {0.6, 0.0, 0.8, -0.2, 0.2, -1.6, -0.4, -0.1,
                                                  -1.0, -0.9, 0.3, 0.3, -2.2, 0.0};
#define OCC_MISSING N_OCCUPATION
#define OCC_MISSING_W (-0.8)

static const char *const relationship[N_RELATIONSHIP] = {
    "Husband", "Not-in-family", "Own-child", "Unmarried", "Wife", "Other-relative"};
static const double relationship_w[N_RELATIONSHIP] = {0.3, 0.0, -1.2, -0.7, 0.7, -1.3};
enum { REL_HUSBAND, REL_NOT_IN_FAMILY, REL_OWN_CHILD, REL_UNMARRIED, REL_WIFE, REL_OTHER };

static const char *const race[N_RACE] = {"White", "Black", "Asian-Pac-Islander",
                                         "Amer-Indian-Eskimo", "Other"};
static const double race_n[N_RACE] = {27816, 3124, 1039, 311, 271};
static const double race_w[N_RACE] = {0.1, -0.5, 0.1, -0.4, -0.4};

static const char *const country[N_COUNTRY] = {
    "United-States", "Mexico", "Philippines", "Germany", "Canada", "Puerto-Rico", "El-Salvador",
    "India", "Cuba", "England", "Jamaica", "South", "China", "Italy", "Dominican-Republic",
    "Vietnam", "Guatemala", "Japan", "Poland", "Columbia", "Taiwan", "Haiti", "Iran",
    "Portugal", "Nicaragua", "Peru", "France", "Greece", "Ecuador", "Ireland", "Hong",
    "Cambodia", "Trinadad&Tobago", "Laos", "Thailand", "Yugoslavia",
    "Outlying-US(Guam-USVI-etc)", "Honduras", "Hungary", "Scotland", "Holand-Netherlands"};
static const double country_n[N_COUNTRY] = {
    29170, 643, 198, 137, 121, 114, 106, 100, 95, 90, 81, 80, 75, 73, 70, 67, 64, 62, 60, 59,
    51, 44, 43, 37, 34, 31, 29, 29, 28, 24, 20, 19, 19, 18, 18, 16, 14, 13, 13, 12, 1};
#define COUNTRY_MISSING N_COUNTRY

/* Age: adult.data's histogram in bands, uniform within each. */
static const int age_lo[13] = {17, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 80};
static const int age_hi[13] = {19, 24, 29, 34, 39, 44, 49, 54, 59, 64, 69, 79, 90};
static const double age_n[13] = {5.5, 13.0, 13.0, 13.5, 12.5, 11.5, 9.5, 7.5, 5.5, 4.0, 2.5,
                                  2.0, 0.5};

/* The tutorial's age_buckets: [18, 25, 30, 35, 40, 45, 50, 55, 60, 65], 11 buckets. */
static int age_bucket(int age)
{
    static const int b[10] = {18, 25, 30, 35, 40, 45, 50, 55, 60, 65};
    int k = 0;
    while (k < 10 && age >= b[k])
        k++;
    return k;
}
static const double age_bucket_w[11] = {-3.0, -2.2, -1.0, -0.3, 0.1, 0.35, 0.5, 0.5, 0.35,
                                        0.0, -0.4};

/* The capital gains and losses adult.data holds most, with their counts. */
static const int gain_v[16] = {15024, 7688, 7298, 99999, 3103, 5178, 4386, 5013, 8614, 3325,
                               2174, 10520, 4650, 14084, 4064, 27828};
static const double gain_n[16] = {347, 284, 246, 159, 97, 97, 70, 69, 55, 53, 48, 43, 41, 41,
                                  42, 34};
static const int loss_v[12] = {1902, 1977, 1887, 1848, 1485, 2415, 1602, 1740, 1590, 1876,
                               1672, 2258};
static const double loss_n[12] = {202, 168, 159, 51, 51, 49, 47, 42, 40, 39, 34, 25};

/* ---- Drawing ---- */

static double unit(dt_rng *r) { return (double)(dt_rng_next(r) >> 11) * 0x1p-53; }

static double normal(dt_rng *r)
{
    double u1 = 1.0 - unit(r), u2 = unit(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* An index drawn with probability proportional to w. */
static int pick(dt_rng *r, const double *w, int n)
{
    double total = 0.0;
    for (int i = 0; i < n; i++)
        total += w[i];
    double u = unit(r) * total;
    for (int i = 0; i < n - 1; i++)
        if ((u -= w[i]) < 0.0)
            return i;
    return n - 1;
}

typedef struct {
    int age, workclass, education, marital, occupation, relationship, race, male, country;
    int fnlwgt, gain, loss, hours;
} person;

static void draw_person(dt_rng *r, person *p)
{
    int band = pick(r, age_n, 13);
    p->age = age_lo[band] + (int)(unit(r) * (age_hi[band] - age_lo[band] + 1));
    p->marital = pick(r, marital_n[p->age < 25 ? 0 : p->age < 35 ? 1 : p->age < 55 ? 2 : 3],
                      N_MARITAL);
    bool married = p->marital == MS_MARRIED || p->marital == MS_AF;
    p->male = unit(r) < (married ? 0.89 : 0.5);
    double u = unit(r);
    if (married)
        p->relationship = u < 0.97 ? (p->male ? REL_HUSBAND : REL_WIFE)
                          : u < 0.985 ? REL_OWN_CHILD : REL_OTHER;
    else {
        /* The unmarried: living with parents mostly while young, alone or as a single parent
         * after. */
        bool never = p->marital == MS_NEVER;
        double child = never ? (p->age < 25 ? 0.65 : p->age < 30 ? 0.3 : p->age < 40 ? 0.12 : 0.04)
                             : (p->age < 30 ? 0.08 : p->age < 40 ? 0.04 : 0.01);
        double other = child + (never ? 0.08 : 0.05);
        double single_parent = other + (never ? (p->age < 25 ? 0.05 : 0.15) : 0.4);
        p->relationship = u < child ? REL_OWN_CHILD : u < other ? REL_OTHER
                          : u < single_parent ? REL_UNMARRIED : REL_NOT_IN_FAMILY;
    }
    /* No degree before 19 and few before 21; little finished school before 18. */
    double edu_n[N_EDUCATION];
    memcpy(edu_n, education_n, sizeof edu_n);
    if (p->age < 21)
        for (int e = 10; e < N_EDUCATION; e++)
            edu_n[e] *= p->age < 19 ? 0.0 : 0.15;
    if (p->age < 18)
        edu_n[8] *= 0.2, edu_n[9] = 0.0;
    p->education = pick(r, edu_n, N_EDUCATION);
    p->workclass = unit(r) < 1836.0 / 32561.0 ? WC_MISSING : pick(r, workclass_n, N_WORKCLASS);
    if (p->workclass == WC_MISSING || p->workclass == WC_NEVER_WORKED) {
        p->occupation = OCC_MISSING;
    } else {
        double occ_n[N_OCCUPATION];
        for (int o = 0; o < N_OCCUPATION; o++)
            occ_n[o] = occupation_n[o] * exp(occupation_edu[o] * (p->education + 1 - 10));
        p->occupation = pick(r, occ_n, N_OCCUPATION);
    }
    p->race = pick(r, race_n, N_RACE);
    p->country = unit(r) < 583.0 / 32561.0 ? COUNTRY_MISSING : pick(r, country_n, N_COUNTRY);
    double w = exp(log(178000.0) + 0.5 * normal(r));
    p->fnlwgt = w < 12285.0 ? 12285 : w > 1484705.0 ? 1484705 : (int)w;
    /* 8.3% have capital gains, more of them with more schooling and years; 4.7% losses. */
    double gain_p = 0.083 * exp(0.15 * (p->education + 1 - 10)) * (p->age < 25 ? 0.3 : 1.0);
    p->gain = p->loss = 0;
    if (unit(r) < gain_p)
        p->gain = unit(r) < 0.55 ? gain_v[pick(r, gain_n, 16)]
                                 : (int)(exp(log(3000.0) + 0.9 * normal(r))) + 1;
    else if (unit(r) < 0.047 / (1.0 - 0.083))
        p->loss = unit(r) < 0.6 ? loss_v[pick(r, loss_n, 12)]
                                : (int)(1850.0 + 350.0 * normal(r));
    /* Within the file's range: gains 114 .. 99,999, losses 155 .. 4,356. */
    p->gain = p->gain == 0 ? 0 : p->gain < 114 ? 114 : p->gain > 99999 ? 99999 : p->gain;
    p->loss = p->loss == 0 ? 0 : p->loss < 155 ? 155 : p->loss > 4356 ? 4356 : p->loss;
    u = unit(r);
    if (p->age < 22 && u < 0.6)
        p->hours = 25 + (int)lround(10.0 * normal(r));
    else if (u < 0.50)
        p->hours = 40;
    else if (u < 0.59)
        p->hours = 50;
    else if (u < 0.64)
        p->hours = 45;
    else if (u < 0.68)
        p->hours = 60;
    else if (u < 0.715)
        p->hours = 35;
    else
        p->hours = 40 + (int)lround(13.0 * normal(r)) +
                   (p->workclass == WC_SELF_NOT_INC || p->workclass == WC_SELF_INC ? 6 : 0);
    if (p->hours < 1)
        p->hours = 1;
    if (p->hours > 99)
        p->hours = 99;
}

/* ---- The teacher ---- */

static double hashed_normal(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t key[3] = {a, b, c};
    uint64_t h = dt_hash_words(0x63656e737573ULL, key, 3);
    double s = 0.0;
    for (int i = 0; i < 4; i++, h >>= 16)
        s += (double)(h & 0xffff) / 65536.0 - 0.5;
    return s * 1.7320508075688772; /* 4 uniforms of variance 1/12 each */
}

/* The logit without the bias. */
static double teacher_logit(const person *p)
{
    int edu_num = p->education + 1, occ = p->occupation, ab = age_bucket(p->age);
    double z = 0.3 * (edu_num - 10) + (edu_num >= 15 ? 0.9 : 0.0);
    z += age_bucket_w[ab];
    z += marital_w[p->marital] + relationship_w[p->relationship];
    z += p->male ? 0.2 : 0.0;
    z += occ == OCC_MISSING ? OCC_MISSING_W : occupation_w[occ];
    z += p->workclass == WC_MISSING ? -0.5 : workclass_w[p->workclass];
    z += 0.03 * ((p->hours < 70 ? p->hours : 70) - 40);
    z += p->gain >= 7000 ? 3.0 : p->gain >= 5000 ? 1.5 : p->gain > 0 ? -0.3 : 0.0;
    z += p->loss >= 1800 && p->loss <= 2600 ? 1.2 : p->loss > 0 ? -0.2 : 0.0;
    z += race_w[p->race];
    if (p->country != 0 && p->country != COUNTRY_MISSING)
        z += p->country == 1 || p->country == 6 || p->country == 16 ? -0.6 : -0.2;
    /* Interactions: schooling pays more in professional and managerial work; each
     * (education, occupation) and (age bucket, education, occupation) its own weight. */
    if (occ == 0 || occ == 2)
        z += 0.15 * (edu_num - 10);
    z += 0.8 * hashed_normal(1, (uint64_t)p->education, (uint64_t)occ);
    z += 0.4 * hashed_normal(2 + (uint64_t)ab, (uint64_t)p->education, (uint64_t)occ);
    return z;
}

double dt_gen_census_bias(void)
{
    enum { SAMPLE = 20000 };
    double *z = malloc(SAMPLE * sizeof *z);
    if (!z)
        return NAN;
    dt_rng r;
    dt_rng_seed(&r, 0x63656e737573ULL);
    for (int n = 0; n < SAMPLE; n++) {
        person p;
        draw_person(&r, &p);
        z[n] = teacher_logit(&p);
    }
    double bias = dt_gen_bias_for_rate(z, SAMPLE, 0.24);
    free(z);
    return bias;
}

/* ---- The line ---- */

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

/* A census number: every one is >= 0. */
static char *put_int(char *p, int v) { return dt_put_decimal(p, (uint64_t)v); }

size_t dt_gen_census_row(double bias, dt_rng *r, char *out, float *logit, float *label)
{
    person p;
    draw_person(r, &p);
    double z = bias + teacher_logit(&p);
    *logit = (float)z;
    *label = unit(r) < 1.0 / (1.0 + exp(-z)) ? 1.0f : 0.0f;
    char *o = out;
    o = put_int(o, p.age), *o++ = ',';
    o = put_str(o, p.workclass == WC_MISSING ? "?" : workclass[p.workclass]), *o++ = ',';
    o = put_int(o, p.fnlwgt), *o++ = ',';
    o = put_str(o, education[p.education]), *o++ = ',';
    o = put_int(o, p.education + 1), *o++ = ',';
    o = put_str(o, marital[p.marital]), *o++ = ',';
    o = put_str(o, p.occupation == OCC_MISSING ? "?" : occupation[p.occupation]), *o++ = ',';
    o = put_str(o, relationship[p.relationship]), *o++ = ',';
    o = put_str(o, race[p.race]), *o++ = ',';
    o = put_str(o, p.male ? "Male" : "Female"), *o++ = ',';
    o = put_int(o, p.gain), *o++ = ',';
    o = put_int(o, p.loss), *o++ = ',';
    o = put_int(o, p.hours), *o++ = ',';
    o = put_str(o, p.country == COUNTRY_MISSING ? "?" : country[p.country]), *o++ = ',';
    o = put_str(o, *label ? ">50K" : "<=50K"), *o++ = '\n';
    return (size_t)(o - out);
}
