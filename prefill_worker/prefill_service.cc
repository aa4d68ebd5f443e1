#include "prefill_worker/prefill_service.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "wire/report_bridge.h"
#include "wire/request_bridge.h"

namespace pdserve::prefill {
namespace {

// Finishes when the job is done; cancels the job if the caller goes away first.
class PrefillReactor final : public grpc::ServerUnaryReactor {
 public:
  PrefillReactor(PrefillBatcher* batcher, uint64_t token) : batcher_(batcher), token_(token) {}
  void OnCancel() override { batcher_->RequestCancel(token_); }
  void OnDone() override { delete this; }

 private:
  PrefillBatcher* batcher_;
  uint64_t token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillJob>> JobFromRequest(const v1::PrefillRequest& request,
                                                           int vocab_size, absl::Time deadline) {
  RETURN_IF_ERROR(wire::ValidateRequestId(request.request_id()));
  auto job = std::make_unique<PrefillJob>();
  job->request_id = request.request_id();
  job->arrival = absl::Now();
  job->deadline = deadline;
  job->due = deadline;
  if (request.has_ttft_due_in_ms()) {
    const double due_in_ms = request.ttft_due_in_ms();
    constexpr double kDayMs = 86400e3;
    if (!(std::abs(due_in_ms) <= kDayMs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ttft_due_in_ms: ", due_in_ms, " is not a number within a day either way"));
    }
    job->due = job->arrival + absl::Milliseconds(due_in_ms);
  }
  for (int i = 0; i < request.token_ids_size(); ++i) {
    const uint32_t id = request.token_ids(i);
    if (id >= static_cast<uint32_t>(vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_ids[", i, "]: token id ", id, " is outside [0, ", vocab_size, ")"));
    }
    job->prompt.push_back(static_cast<int32_t>(id));
  }
  if (job->prompt.empty()) return absl::InvalidArgumentError("token_ids: must not be empty");
  ASSIGN_OR_RETURN(job->sampling, wire::SamplingFromProto(request.sampling(), vocab_size));
  ASSIGN_OR_RETURN(job->target, wire::TargetFromProto(request.target()));
  job->first_position = static_cast<int>(request.target().first_position());
  const uint32_t expected_tokens = static_cast<uint32_t>(job->prompt.size()) -
                                   std::min<uint32_t>(request.target().first_position(),
                                                      static_cast<uint32_t>(job->prompt.size()));
  if (request.target().num_tokens() != expected_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("target.num_tokens: ", request.target().num_tokens(),
                     ", expected the prompt length minus first_position (", expected_tokens, ")"));
  }
  return job;
}

PrefillService::PrefillService(PrefillBatcher* batcher, int vocab_size, uint64_t epoch)
    : batcher_(batcher), vocab_size_(vocab_size), epoch_(epoch) {}

void PrefillService::SetWorkerId(const std::string& id) {
  absl::MutexLock lock(&mu_);
  worker_id_ = id;
}

std::string PrefillService::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                  const v1::PrefillRequest* request,
                                                  v1::PrefillResponse* response) {
  auto* reactor = new PrefillReactor(batcher_, request->target().transfer_token());
  auto fail = [&](const absl::Status& s) {
    reactor->Finish(wire::ToGrpc(s));
    return reactor;
  };
  auto built = JobFromRequest(*request, vocab_size_, absl::FromChrono(context->deadline()));
  if (!built.ok()) return fail(built.status());
  std::unique_ptr<PrefillJob> job = *std::move(built);
  const std::string id = worker_id();
  const uint64_t epoch = epoch_;
  job->done = [reactor, response, id, epoch](const PrefillJobResult& r) {
    if (!r.status.ok()) {
      reactor->Finish(wire::ToGrpc(r.status));
      return;
    }
    response->set_first_token_id(static_cast<uint32_t>(r.first_token));
    response->set_worker_id(id);
    response->set_epoch(epoch);
    wire::MeasurementToProto(r.measured, response);
    reactor->Finish(grpc::Status::OK);
  };
  if (absl::Status s = batcher_->Submit(std::move(job)); !s.ok()) return fail(s);
  return reactor;
}

grpc::ServerUnaryReactor* PrefillService::CancelPrefill(grpc::CallbackServerContext* context,
                                                        const v1::CancelPrefillRequest* request,
                                                        v1::CancelPrefillResponse* response) {
  auto* reactor = context->DefaultReactor();
  const uint64_t epoch = epoch_;
  // Answered when the job can write no more: at once when it is queued, unknown or done;
  // from the batch thread at the next layer boundary when it is computing.
  batcher_->Cancel(request->transfer_token(), [reactor, response, epoch](const std::string& state) {
    response->set_writes_stopped(true);
    response->set_epoch(epoch);
    response->set_state(state);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

}  // namespace pdserve::prefill
