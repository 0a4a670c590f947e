// Fitting alpha and beta of one primitive on one tier from timed message sizes
// (`moe plan calibrate`). Pure function.
#pragma once

#include <vector>

#include "moe/planner/cost_model.h"
#include "moe/planner/hardware_profile.h"
#include "moe/status.h"

namespace moe::planner {

struct TimedSize {
  double bytes = 0;    // S as cost_model.h defines it for the primitive
  double seconds = 0;  // measured time of one operation
};

// The step and byte coefficients of `p` over n ranks (cost_model.h): t = A alpha + B S beta.
void primitive_coefficients(Primitive p, int n, double* steps, double* byte_fraction);

// Least squares on relative error (each sample weighted 1 / seconds^2, so small and large
// messages count alike) of t = A alpha + B S beta, with alpha >= 0 and beta > 0 (refit
// with alpha = 0 when the free fit makes it negative). InvalidArgument for fewer than two
// distinct sizes, a non-positive time, or n < 2 (a collective needs two ranks).
StatusOr<AlphaBeta> fit_alpha_beta(Primitive p, int n, const std::vector<TimedSize>& samples);

}  // namespace moe::planner
