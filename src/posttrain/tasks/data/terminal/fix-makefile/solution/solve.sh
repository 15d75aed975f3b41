#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > Makefile <<'EOF'
CC = cc
CFLAGS = -Wall -O2 -Iinclude

OBJS = build/main.o build/mathx.o

build/calc: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $(OBJS)

build/%.o: src/%.c include/mathx.h
	mkdir -p build
	$(CC) $(CFLAGS) -c $< -o $@

test: build/calc
	./build/calc 3 4

clean:
	rm -rf build

.PHONY: test clean
EOF
