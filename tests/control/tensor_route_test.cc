#include "control/tensor_route.h"

#include "control/tensor_pattern.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

RecvTensorRequest RequestOver(const char* protocol) {
  RecvTensorRequest request;
  request.set_protocol(protocol);
  return request;
}

Tensor HostTensor(DType dtype, int64_t elements) {
  return *MakePatternTensor(dtype, *TensorShape::Create({elements}), 1);
}

TEST(TensorRouteTest, ProtocolGrpcStreamsEverything) {
  EXPECT_EQ(ChooseRoute(RequestOver("grpc"), HostTensor(DType::kFloat, 1 << 20), false, nullptr,
                        true),
            TensorRoute::kStream);
}

// Through a data plane: what is large enough and memcpy-able is offered;
// the rest rides in the answer, as does anything for a consumer that
// speaks another protocol.
TEST(TensorRouteTest, ADataPlaneCarriesLargeNumericHostTensors) {
  absl::StatusOr<std::unique_ptr<DataPlane>> plane = DataPlane::Create("grpc+ucx", {});
  ASSERT_TRUE(plane.ok()) << plane.status();
  const RecvTensorRequest ucx = RequestOver("grpc+ucx");
  const Tensor large = HostTensor(DType::kFloat, 1 << 20);
  EXPECT_EQ(ChooseRoute(ucx, large, false, plane->get(), true), TensorRoute::kOffer);
  EXPECT_EQ(ChooseRoute(ucx, HostTensor(DType::kFloat, 16), false, plane->get(), true),
            TensorRoute::kStream)
      << "at most RDV_INLINE_BYTES rides in the answer";
  EXPECT_EQ(ChooseRoute(ucx, large, /*is_dead=*/true, plane->get(), true), TensorRoute::kStream);
  EXPECT_EQ(ChooseRoute(ucx, HostTensor(DType::kString, 1 << 12), false, plane->get(), true),
            TensorRoute::kStream);
  EXPECT_EQ(ChooseRoute(RequestOver("grpc"), large, false, plane->get(), true),
            TensorRoute::kStream);
}

}  // namespace
}  // namespace rdv::control
