#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > ring.c <<'EOF'
#include <stdlib.h>
#include "ring.h"

struct ring {
    int *data;
    size_t cap, head, len;  /* head: index of the oldest value */
};

ring *ring_new(size_t capacity) {
    if (capacity == 0) return NULL;
    ring *r = malloc(sizeof *r);
    if (!r) return NULL;
    r->data = malloc(capacity * sizeof *r->data);
    if (!r->data) { free(r); return NULL; }
    r->cap = capacity;
    r->head = r->len = 0;
    return r;
}

void ring_free(ring *r) {
    if (r) { free(r->data); free(r); }
}

size_t ring_len(const ring *r) { return r->len; }
size_t ring_capacity(const ring *r) { return r->cap; }

int ring_push(ring *r, int value) {
    if (r->len == r->cap) return -1;
    r->data[(r->head + r->len) % r->cap] = value;
    r->len++;
    return 0;
}

int ring_pop(ring *r, int *out) {
    if (r->len == 0) return -1;
    *out = r->data[r->head];
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return 0;
}

int ring_push_overwrite(ring *r, int value) {
    int dropped = 0, tmp;
    if (r->len == r->cap) { ring_pop(r, &tmp); dropped = 1; }
    ring_push(r, value);
    return dropped;
}

int ring_peek(const ring *r, size_t i, int *out) {
    if (i >= r->len) return -1;
    *out = r->data[(r->head + i) % r->cap];
    return 0;
}
EOF
