/* The collisions of --hash-buckets on a field-positional LibSVM file: every distinct (field, id)
 * hashed as the LibSVM reader hashes it (dt_hash_bucket of the id's digits, seeded by the field),
 * and the share of distinct ids whose bucket holds another one too.
 * usage: hash_collisions FILE BUCKETS
 * prints: distinct=N buckets=B colliding=C collision_rate=C/N */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/hash.h"

typedef struct {
    uint64_t field, id;
    int64_t bucket;
} entry;

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->field != y->field)
        return x->field < y->field ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hash_collisions FILE BUCKETS\n");
        return 2;
    }
    int64_t buckets = strtoll(argv[2], NULL, 10);
    FILE *f = fopen(argv[1], "r");
    if (!f || buckets < 1) {
        fprintf(stderr, "hash_collisions: cannot read %s or bad bucket count\n", argv[1]);
        return 1;
    }
    size_t n = 0, cap = 1 << 20;
    entry *e = malloc(cap * sizeof *e);
    char *line = NULL;
    size_t line_cap = 0;
    while (e && getline(&line, &line_cap, f) > 0) {
        char *save = NULL, *tok = strtok_r(line, " \t\n", &save); /* the label */
        for (int field = 0; (tok = strtok_r(NULL, " \t\n", &save)); field++) {
            char *colon = strchr(tok, ':');
            if (!colon)
                continue;
            if (n == cap && !(e = realloc(e, (cap *= 2) * sizeof *e)))
                break;
            e[n].field = (uint64_t)field;
            e[n].id = strtoull(tok, NULL, 10);
            e[n].bucket = dt_hash_bucket(field, tok, (size_t)(colon - tok), buckets);
            n++;
        }
    }
    free(line);
    fclose(f);
    uint32_t *occupied = calloc((size_t)buckets, sizeof *occupied);
    if (!e || !occupied) {
        fprintf(stderr, "hash_collisions: out of memory\n");
        return 1;
    }
    qsort(e, n, sizeof *e, cmp_entry);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || cmp_entry(&e[i], &e[i - 1]) != 0) {
            e[distinct++] = e[i];
            occupied[e[i].bucket]++;
        }
    size_t colliding = 0;
    for (size_t i = 0; i < distinct; i++)
        colliding += occupied[e[i].bucket] > 1;
    printf("distinct=%zu buckets=%lld colliding=%zu collision_rate=%.4f\n", distinct,
           (long long)buckets, colliding, distinct ? (double)colliding / (double)distinct : 0.0);
    free(e), free(occupied);
    return 0;
}
