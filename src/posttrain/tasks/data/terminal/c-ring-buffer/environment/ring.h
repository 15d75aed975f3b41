#ifndef RING_H
#define RING_H
#include <stddef.h>

/* A fixed-capacity FIFO of ints. */
typedef struct ring ring;

ring *ring_new(size_t capacity);        /* NULL when capacity is 0 or memory runs out */
void ring_free(ring *r);                /* NULL is allowed */
size_t ring_len(const ring *r);
size_t ring_capacity(const ring *r);
int ring_push(ring *r, int value);      /* 0 on success, -1 when full */
int ring_pop(ring *r, int *out);        /* 0 on success (oldest value in *out), -1 when empty */
int ring_push_overwrite(ring *r, int value); /* like push, but when full drops the oldest value; returns 1 if it dropped one, else 0 */
int ring_peek(const ring *r, size_t i, int *out); /* i-th oldest value (0 = oldest); -1 when i >= len */

#endif
