// An exponential moving average step, the one smoothing used for every running figure (step
// times, staleness, latencies, round shares): `a` is the new sample's weight, and the first
// sample (old == 0) is taken as it is, so an average starts at its first value, not near 0.
#pragma once

namespace diloco {

inline double Ema(double old, double x, double a) { return old == 0 ? x : (1 - a) * old + a * x; }

}  // namespace diloco
