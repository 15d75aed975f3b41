#include "mathx.h"

long add(long a, long b) { return a + b; }
long mul(long a, long b) { return a * b; }
