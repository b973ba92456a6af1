/* Arrays that grow together (internal to the library): a batch's ids beside their weights, keys
 * beside their rows. Each keeps its contents; one realloc failing leaves every array valid (the
 * ones before it possibly moved and larger) and the count of room unchanged. */
#ifndef DTRAIN_CORE_GROW_H
#define DTRAIN_CORE_GROW_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    void *array;  /* the address of the array's pointer (T **) */
    size_t elem;  /* sizeof (T) */
} dt_grow_item;

/* Every item's array reallocated to cap elements; false when memory ran out. */
bool dt_grow_together(const dt_grow_item *items, int n, size_t cap);

#endif
