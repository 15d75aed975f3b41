#include <assert.h>
#include <stdio.h>
#include "ring.h"

int main(void) {
    assert(ring_new(0) == NULL);
    ring *r = ring_new(3);
    int v = -1;
    assert(r && ring_capacity(r) == 3 && ring_len(r) == 0);
    assert(ring_pop(r, &v) == -1 && ring_peek(r, 0, &v) == -1);
    assert(ring_push(r, 1) == 0 && ring_push(r, 2) == 0 && ring_push(r, 3) == 0);
    assert(ring_push(r, 4) == -1 && ring_len(r) == 3);
    assert(ring_pop(r, &v) == 0 && v == 1);
    assert(ring_push(r, 4) == 0);                       /* wraps around */
    assert(ring_peek(r, 0, &v) == 0 && v == 2);
    assert(ring_peek(r, 2, &v) == 0 && v == 4);
    assert(ring_peek(r, 3, &v) == -1);
    assert(ring_push_overwrite(r, 5) == 1);             /* drops 2 */
    assert(ring_pop(r, &v) == 0 && v == 3);
    assert(ring_push_overwrite(r, 6) == 0);
    int want[] = {4, 5, 6};
    for (int i = 0; i < 3; i++) assert(ring_pop(r, &v) == 0 && v == want[i]);
    assert(ring_len(r) == 0 && ring_pop(r, &v) == -1);
    for (int round = 0; round < 1000; round++) {         /* many wrap-arounds */
        assert(ring_push(r, round) == 0 && ring_pop(r, &v) == 0 && v == round);
    }
    ring_free(r);
    ring_free(NULL);
    ring *big = ring_new(100000);
    for (int i = 0; i < 250000; i++) ring_push_overwrite(big, i);
    assert(ring_len(big) == 100000 && ring_peek(big, 0, &v) == 0 && v == 150000);
    ring_free(big);
    puts("ring ok");
    return 0;
}
