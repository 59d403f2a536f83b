"""Generate the Chebyshev tables builtins.py uses for erfc on x > 1 (needs mpmath; run offline).

On each interval [lo, hi] we interpolate G(x) = exp(x*x) * erfc(x) at Chebyshev nodes in 40-digit
arithmetic, so erfc(x) = exp(-x*x) * G(x) with G evaluated by Clenshaw in double precision.
Prints the table as Python source.
"""

import mpmath as mp

mp.mp.dps = 40
INTERVALS = [
    (1.0, 1.5),
    (1.5, 2.25),
    (2.25, 3.25),
    (3.25, 4.75),
    (4.75, 7.0),
    (7.0, 11.0),
    (11.0, 17.0),
    (17.0, 28.0),
]


def cheb(f, lo, hi, n):
    xs = [mp.cos(mp.pi * (j + mp.mpf(1) / 2) / n) for j in range(n)]
    fx = [f((hi - lo) / 2 * x + (hi + lo) / 2) for x in xs]
    return [
        2 * mp.fsum(fx[j] * mp.cos(mp.pi * k * (j + mp.mpf(1) / 2) / n) for j in range(n)) / n
        for k in range(n)
    ]


def G(x):
    return mp.exp(x * x) * mp.erfc(x)


def main(tol=2e-17, width=100):
    print("ERFC_TABLE = (")
    for lo, hi in INTERVALS:
        c = cheb(G, mp.mpf(lo), mp.mpf(hi), 40)
        scale = abs(c[0])
        deg = max(k for k in range(len(c)) if abs(c[k]) > tol * scale)
        print(f"    ({lo!r}, {hi!r}, (")
        line = "       "
        for v in c[: deg + 1]:
            item = f" {float(v)!r},"
            if len(line) + len(item) > width:
                print(line)
                line = "       "
            line += item
        print(line)
        print("    )),")
    print(")")


if __name__ == "__main__":
    main()
