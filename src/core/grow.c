/* Arrays that grow together (grow.h). */
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool dt_grow_together(const dt_grow_item *items, int n, size_t cap)
{
    for (int i = 0; i < n; i++) {
        if (items[i].elem && cap > SIZE_MAX / items[i].elem)
            return false;
        /* The pointer is read and written as bytes: the array's own type is the caller's. */
        void *p;
        memcpy(&p, items[i].array, sizeof p);
        void *q = realloc(p, (cap ? cap : 1) * items[i].elem);
        if (!q)
            return false;
        memcpy(items[i].array, &q, sizeof q);
    }
    return true;
}
