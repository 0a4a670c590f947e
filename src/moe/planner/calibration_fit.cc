#include "moe/planner/calibration_fit.h"

#include <cmath>
#include <set>

namespace moe::planner {

void primitive_coefficients(Primitive p, int n, double* steps, double* byte_fraction) {
  const double frac = n > 0 ? static_cast<double>(n - 1) / n : 0.0;
  switch (p) {
    case Primitive::kAllReduce:
      *steps = 2.0 * (n - 1);
      *byte_fraction = 2.0 * frac;
      return;
    case Primitive::kReduceScatter:
    case Primitive::kAllGather:
    case Primitive::kAllToAll:
      *steps = n - 1;
      *byte_fraction = frac;
      return;
    case Primitive::kP2p:
      *steps = 1;
      *byte_fraction = 1;
      return;
  }
}

StatusOr<AlphaBeta> fit_alpha_beta(Primitive p, int n, const std::vector<TimedSize>& samples) {
  const std::string what = std::string(primitive_name(p)) + " fit";
  if (n < 2) return invalid_argument(what + ": needs a group of >= 2 ranks (got " + std::to_string(n) + ")");
  std::set<double> sizes;
  for (const auto& s : samples) {
    if (!(s.seconds > 0) || !std::isfinite(s.seconds)) return invalid_argument(what + ": a time is not positive");
    if (!(s.bytes >= 0)) return invalid_argument(what + ": a size is negative");
    sizes.insert(s.bytes);
  }
  if (sizes.size() < 2) return invalid_argument(what + ": needs at least two distinct message sizes");
  double A = 0, B = 0;
  primitive_coefficients(p, n, &A, &B);
  // Weighted normal equations for x = (alpha, beta): rows (A, B S) / t, target 1.
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (const auto& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    const double u = A, v = B * s.bytes;
    s11 += w * u * u;
    s12 += w * u * v;
    s22 += w * v * v;
    r1 += w * u * s.seconds;
    r2 += w * v * s.seconds;
  }
  AlphaBeta ab;
  const double det = s11 * s22 - s12 * s12;
  if (det > 0) {
    ab.alpha = (r1 * s22 - r2 * s12) / det;
    ab.beta = (s11 * r2 - s12 * r1) / det;
  }
  if (det <= 0 || ab.alpha < 0) {
    ab.alpha = 0;
    ab.beta = s22 > 0 ? r2 / s22 : 0;
  }
  if (!(ab.beta > 0)) {
    // Time does not grow with size (all latency): alpha from the mean, beta tiny but valid.
    double sum = 0;
    for (const auto& s : samples) sum += s.seconds;
    ab.alpha = sum / static_cast<double>(samples.size()) / A;
    ab.beta = 1e-15;
  }
  return ab;
}

}  // namespace moe::planner
