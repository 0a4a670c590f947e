// Status / StatusOr and the propagation macros.
#include "moe/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace moe {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_TRUE(ok_status().ok());
  EXPECT_TRUE(Status::ok_status().ok());
}

TEST(StatusTest, ErrorsCarryCodeAndMessage) {
  const Status s = not_found("tensor 'model.norm.weight' in model.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "tensor 'model.norm.weight' in model.safetensors");
  EXPECT_EQ(s.to_string(), "NotFound: tensor 'model.norm.weight' in model.safetensors");

  EXPECT_EQ(invalid_argument("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(data_loss("x").code(), StatusCode::kDataLoss);
  EXPECT_EQ(failed_precondition("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(out_of_range("x").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(unimplemented("x").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(internal_error("x").code(), StatusCode::kInternal);
  EXPECT_EQ(invalid_argument("bad flag").to_string(), "InvalidArgument: bad flag");
  EXPECT_EQ(data_loss("short").to_string(), "DataLoss: short");
  EXPECT_EQ(Status(StatusCode::kUnavailable, "peer").to_string(), "Unavailable: peer");
  EXPECT_EQ(Status(StatusCode::kDeadlineExceeded, "t").to_string(), "DeadlineExceeded: t");
}

TEST(StatusTest, CodeNames) {
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "OK");
  EXPECT_STREQ(status_code_name(StatusCode::kFailedPrecondition), "FailedPrecondition");
  EXPECT_STREQ(status_code_name(StatusCode::kOutOfRange), "OutOfRange");
  EXPECT_STREQ(status_code_name(StatusCode::kUnimplemented), "Unimplemented");
  EXPECT_STREQ(status_code_name(StatusCode::kInternal), "Internal");
}

TEST(StatusTest, WithContextPrefixes) {
  const Status s = data_loss("truncated header");
  const Status c = s.with_context("reading model-00001.safetensors");
  EXPECT_EQ(c.code(), StatusCode::kDataLoss);
  EXPECT_EQ(c.message(), "reading model-00001.safetensors: truncated header");
  EXPECT_EQ(c.with_context("loading /m").to_string(), "DataLoss: loading /m: reading model-00001.safetensors: truncated header");
  EXPECT_EQ(s.message(), "truncated header");  // the original is unchanged
  // OK stays OK with no message.
  const Status ok = ok_status().with_context("anything");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST(StatusOrTest, ValueAndError) {
  StatusOr<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(v.value(), 42);
  EXPECT_EQ(*v, 42);
  StatusOr<int> e = out_of_range("index 9 of 3");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(e.status().message(), "index 9 of 3");

  StatusOr<std::string> s = std::string("hello");
  EXPECT_EQ(s->size(), 5u);
  std::string moved = std::move(s).value();
  EXPECT_EQ(moved, "hello");
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> owned = std::move(p).value();
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*owned, 7);
}

// ---- macros ------------------------------------------------------------------------

StatusOr<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("not positive: " + std::to_string(x));
  return x;
}

StatusOr<std::unique_ptr<int>> make_box(int x) {
  if (x == 13) return not_found("no box 13");
  return std::make_unique<int>(x);
}

// Two MOE_ASSIGN_OR_RETURN in one function; the second only runs if the first succeeds.
StatusOr<int> sum_two(int a, int b, int* steps) {
  MOE_ASSIGN_OR_RETURN(int x, parse_positive(a));
  ++*steps;
  MOE_ASSIGN_OR_RETURN(const int y, parse_positive(b));
  ++*steps;
  return x + y;
}

Status check_all(int a, int b, int* steps) {
  MOE_RETURN_IF_ERROR(parse_positive(a).status());
  ++*steps;
  MOE_RETURN_IF_ERROR(parse_positive(b).status().with_context("second"));
  ++*steps;
  return ok_status();
}

StatusOr<int> unbox(int x) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<int> box, make_box(x));
  return *box + 1;
}

Status assign_existing(int a, int* out) {
  int v = -1;
  MOE_ASSIGN_OR_RETURN(v, parse_positive(a));
  *out = v;
  return ok_status();
}

TEST(StatusMacrosTest, AssignOrReturn) {
  int steps = 0;
  StatusOr<int> r = sum_two(2, 3, &steps);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 5);
  EXPECT_EQ(steps, 2);

  steps = 0;
  r = sum_two(-1, 3, &steps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "not positive: -1");
  EXPECT_EQ(steps, 0);

  steps = 0;
  r = sum_two(1, 0, &steps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "not positive: 0");
  EXPECT_EQ(steps, 1);

  StatusOr<int> u = unbox(4);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u.value(), 5);
  u = unbox(13);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().to_string(), "NotFound: no box 13");

  int out = 0;
  EXPECT_TRUE(assign_existing(9, &out).ok());
  EXPECT_EQ(out, 9);
  out = 0;
  EXPECT_EQ(assign_existing(-9, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 0);
}

TEST(StatusMacrosTest, ReturnIfError) {
  int steps = 0;
  EXPECT_TRUE(check_all(1, 2, &steps).ok());
  EXPECT_EQ(steps, 2);

  steps = 0;
  Status s = check_all(0, 2, &steps);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "not positive: 0");
  EXPECT_EQ(steps, 0);

  steps = 0;
  s = check_all(1, -4, &steps);
  EXPECT_EQ(s.to_string(), "InvalidArgument: second: not positive: -4");
  EXPECT_EQ(steps, 1);
}

}  // namespace
}  // namespace moe
