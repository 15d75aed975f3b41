#ifndef MATHX_H
#define MATHX_H
long add(long a, long b);
long mul(long a, long b);
#endif
