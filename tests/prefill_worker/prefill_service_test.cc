// pdserve-prefill's gRPC surface as a real process: every malformed Prefill is refused before
// any compute with a status naming the field and the limit; an unknown transfer's
// CancelPrefill is answered as stopped (the worker never writes for a token it does not
// know); --help and bad flags behave.
#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "engine/model_loader.h"
#include "gtest/gtest.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "server/child_process.h"
#include "tests/testing/test_models.h"
#include "tools/client/generation_client.h"
#include "wire/request_bridge.h"

namespace pdserve::prefill {
namespace {

class PrefillServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto child = ChildProcess::Start(
        ChildOptions{.binary = "pdserve-prefill",
                     .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--threads=1",
                              "--kv_cache_bytes=4194304", "--ucx_transports=shm"}});
    ASSERT_TRUE(child.ok()) << child.status();
    worker_ = child->release();
    ASSERT_TRUE(worker_->WaitHealthy(absl::Seconds(30)).ok()) << worker_->Log();
  }
  static void TearDownTestSuite() {
    delete worker_;
    worker_ = nullptr;
  }

  // A well-formed request for `prompt_len` tokens into a pool shaped like the worker's.
  static v1::PrefillRequest Valid(int prompt_len) {
    auto loaded = engine::LoadModel(pdserve::testing::TestModelDir("tiny"),
                                    engine::EngineOptions{.num_threads = 1});
    EXPECT_TRUE(loaded.ok());
    v1::PrefillRequest r;
    r.set_request_id("bad-input");
    for (int i = 0; i < prompt_len; ++i) r.add_token_ids(static_cast<uint32_t>(i % 50 + 1));
    r.mutable_sampling()->set_temperature(0);
    kvtransfer::TransferTarget t;
    t.pool.receiver_id = "decode-test";
    t.pool.worker_address = "not-a-ucx-address";
    t.pool.packed_rkey = "rkey";
    t.pool.base_address = 4096;
    t.pool.layout = loaded->model->MakeKvLayout(1000, 16, DType::kF32);
    t.pool.epoch = 1;
    t.token = 42;
    for (int b = 0; b < (prompt_len + 15) / 16; ++b) t.block_ids.push_back(b);
    wire::TargetToProto(t, loaded->model->fingerprint(), r.mutable_target());
    r.mutable_target()->set_first_position(0);
    r.mutable_target()->set_num_tokens(static_cast<uint32_t>(prompt_len));
    return r;
  }

  static grpc::Status Call(const v1::PrefillRequest& r) {
    auto stub = v1::Prefill::NewStub(client::MakeChannel(worker_->grpc_address(), GrpcSecurity()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::PrefillResponse response;
    return stub->Prefill(&ctx, r, &response);
  }

  static ChildProcess* worker_;
};
ChildProcess* PrefillServiceTest::worker_ = nullptr;

TEST_F(PrefillServiceTest, MalformedRequestsNameTheFieldAndTheLimit) {
  struct Case {
    std::string what;
    std::function<void(v1::PrefillRequest*)> edit;
    grpc::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"no tokens", [](v1::PrefillRequest* r) { r->clear_token_ids(); },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids"},
      {"token out of vocab", [](v1::PrefillRequest* r) { r->set_token_ids(3, 1u << 30); },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids[3]"},
      {"negative temperature",
       [](v1::PrefillRequest* r) { r->mutable_sampling()->set_temperature(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature"},
      {"no target blocks", [](v1::PrefillRequest* r) { r->mutable_target()->clear_block_ids(); },
       grpc::StatusCode::INVALID_ARGUMENT, "target.block_ids"},
      {"no receiver address",
       [](v1::PrefillRequest* r) { r->mutable_target()->clear_ucx_worker_address(); },
       grpc::StatusCode::INVALID_ARGUMENT, "target.ucx_worker_address"},
      {"too few blocks",
       [](v1::PrefillRequest* r) { r->mutable_target()->mutable_block_ids()->RemoveLast(); },
       grpc::StatusCode::INVALID_ARGUMENT, "target.block_ids"},
      {"block outside the pool",
       [](v1::PrefillRequest* r) { r->mutable_target()->set_block_ids(0, 1000); },
       grpc::StatusCode::INVALID_ARGUMENT, "target.block_ids[0]"},
      {"unaligned first position",
       [](v1::PrefillRequest* r) {
         r->mutable_target()->set_first_position(5);
         r->mutable_target()->set_num_tokens(r->token_ids_size() - 5);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "target.first_position"},
      {"token count mismatch",
       [](v1::PrefillRequest* r) { r->mutable_target()->set_num_tokens(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "target.num_tokens"},
      {"TTFT due not a number", [](v1::PrefillRequest* r) { r->set_ttft_due_in_ms(std::nan("")); },
       grpc::StatusCode::INVALID_ARGUMENT, "ttft_due_in_ms"},
      {"TTFT due in two days", [](v1::PrefillRequest* r) { r->set_ttft_due_in_ms(172800e3); },
       grpc::StatusCode::INVALID_ARGUMENT, "within a day"},
      {"other model", [](v1::PrefillRequest* r) { r->mutable_target()->set_model_fingerprint(1); },
       grpc::StatusCode::FAILED_PRECONDITION, "fingerprint"},
      {"other head_dim",
       [](v1::PrefillRequest* r) { r->mutable_target()->mutable_layout()->set_head_dim(8); },
       grpc::StatusCode::FAILED_PRECONDITION, "head_dim"},
  };
  for (const Case& c : cases) {
    v1::PrefillRequest r = Valid(40);
    c.edit(&r);
    const grpc::Status s = Call(r);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), c.field))
        << c.what << ": " << s.error_message();
  }
  // The worker's own pool (4 MiB) cannot hold this prompt.
  const grpc::Status too_long = Call(Valid(4000));
  EXPECT_EQ(too_long.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << too_long.error_message();
  EXPECT_TRUE(absl::StrContains(too_long.error_message(), "prompt")) << too_long.error_message();
  EXPECT_TRUE(worker_->running());
}

// One Prefill RPC with random bytes as the receiver's UCX address used to abort the worker
// (a UCX assertion while unpacking it). Now each is refused, naming the field, and the worker
// serves on.
TEST_F(PrefillServiceTest, RandomBytesAsTheReceiverAddressAreRefusedAndTheWorkerLives) {
  std::mt19937 rng(3);
  auto random_bytes = [&](size_t n) {
    std::string out(n, '\0');
    for (char& c : out) c = static_cast<char>(rng());
    return out;
  };
  for (size_t n : {1, 8, 64, 300, 2000}) {
    v1::PrefillRequest r = Valid(40);
    r.mutable_target()->set_ucx_worker_address(random_bytes(n));
    r.mutable_target()->set_packed_rkey(random_bytes(n % 50 + 1));
    const grpc::Status s = Call(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << n << " bytes: " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "worker_address")) << s.error_message();
    ASSERT_TRUE(worker_->running()) << worker_->Log();
  }
  EXPECT_TRUE(worker_->WaitHealthy(absl::Seconds(5)).ok());
}

TEST_F(PrefillServiceTest, CancellingAnUnknownTransferIsAnsweredAsStopped) {
  auto stub = v1::Prefill::NewStub(client::MakeChannel(worker_->grpc_address(), GrpcSecurity()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::CancelPrefillRequest request;
  request.set_transfer_token(12345);
  v1::CancelPrefillResponse response;
  ASSERT_TRUE(stub->CancelPrefill(&ctx, request, &response).ok());
  EXPECT_TRUE(response.writes_stopped());
  EXPECT_EQ(response.state(), "unknown");
  EXPECT_NE(response.epoch(), 0u);
}

TEST(PrefillBinaryTest, HelpAndBadFlags) {
  auto help = ChildProcess::Start(
      ChildOptions{.binary = "pdserve-prefill", .args = {"--help"}, .expect_serving_info = false});
  ASSERT_TRUE(help.ok());
  auto status = (*help)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  // The binary's own flags and the ones it shares from common/ (worker and TLS flags).
  for (const char* flag :
       {"--transfer_mode", "--router", "--model", "--advertise_host", "--tls_cert"}) {
    EXPECT_TRUE(absl::StrContains((*help)->Log(), flag)) << flag << "\n" << (*help)->Log();
  }

  auto bad = ChildProcess::Start(ChildOptions{
      .binary = "pdserve-prefill",
      .args = {"--model=" + pdserve::testing::TestModelDir("tiny"), "--transfer_mode=sideways"},
      .expect_serving_info = false});
  ASSERT_TRUE(bad.ok());
  status = (*bad)->WaitExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << (*bad)->Log();
  EXPECT_TRUE(absl::StrContains((*bad)->Log(), "--transfer_mode")) << (*bad)->Log();
}

}  // namespace
}  // namespace pdserve::prefill
