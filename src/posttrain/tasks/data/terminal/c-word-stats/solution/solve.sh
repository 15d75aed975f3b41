#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > wordstat.c <<'EOF'
#include <stdio.h>

int main(void) {
    unsigned long long lines = 0, words = 0, chars = 0, longest = 0, cur = 0;
    int c;
    while ((c = getchar()) != EOF) {
        chars++;
        if (c == '\n') lines++;
        if (c == ' ' || c == '\t' || c == '\n') {
            if (cur > longest) longest = cur;
            cur = 0;
        } else {
            if (cur == 0) words++;
            cur++;
        }
    }
    if (cur > longest) longest = cur;
    printf("lines=%llu words=%llu chars=%llu longest=%llu\n", lines, words, chars, longest);
    return 0;
}
EOF
