#include "decode_worker/scheduler.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kvcache/block_hash.h"

namespace pdserve::decode {

absl::Status SchedulerConfig::Validate() const {
  auto check = [](const char* field, int v, int lo, int hi) -> absl::Status {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", v, " is outside [", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check("block_size", block_size, 1, 1024); !s.ok()) return s;
  if ((block_size & (block_size - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size: ", block_size, " must be a power of two"));
  }
  if (absl::Status s = check("max_num_batched_tokens", max_num_batched_tokens, 1, 1 << 20); !s.ok())
    return s;
  if (absl::Status s = check("max_num_seqs", max_num_seqs, 1, 1 << 16); !s.ok()) return s;
  if (absl::Status s = check("max_awaiting_kv", max_awaiting_kv, 1, 1 << 20); !s.ok()) return s;
  if (absl::Status s = check("max_waiting", max_waiting, 0, 1 << 20); !s.ok()) return s;
  if (max_client_stall <= absl::ZeroDuration())
    return absl::InvalidArgumentError("max_client_stall: must be > 0");
  return check("max_pending_tokens", max_pending_tokens, 1, 1 << 20);
}

Scheduler::Scheduler(const SchedulerConfig& config, kvcache::BlockManager* blocks)
    : config_(config), blocks_(blocks) {}

Scheduler::~Scheduler() = default;

void Scheduler::Add(std::unique_ptr<Sequence> seq) {
  seq->state = SequenceState::kWaiting;
  Sequence* raw = seq.get();
  owned_[raw] = std::move(seq);
  waiting_.insert(raw);
}

int Scheduler::num_running() const {
  int n = 0;
  for (const Sequence* s : running_) n += s->state == SequenceState::kRunning ? 1 : 0;
  return n;
}

int Scheduler::num_awaiting_kv() const { return static_cast<int>(running_.size()) - num_running(); }

PendingPrefill Scheduler::pending_prefill() const {
  PendingPrefill p;
  // `rest` tokens after `computed` ones attend to (computed + rest)^2 - computed^2 positions.
  auto add = [&p](int computed, int rest) {
    p.tokens += rest;
    p.token_squares += static_cast<double>(rest) * (rest + 2.0 * computed);
  };
  for (const Sequence* s : waiting_) {
    // An offload waiting for blocks is prefilled elsewhere: not this worker's backlog.
    if (!s->on_admitted_for_transfer) add(s->num_computed, s->num_tokens() - s->num_computed);
  }
  for (const Sequence* s : running_) {
    if (s->state == SequenceState::kRunning && s->uncomputed() > 1)
      add(s->num_computed, s->uncomputed());
  }
  return p;
}

int64_t Scheduler::context_tokens() const {
  int64_t n = 0;
  for (const Sequence* s : waiting_) n += s->num_tokens();
  for (const Sequence* s : running_) n += s->num_tokens();
  return n;
}

std::vector<Sequence*> Scheduler::waiting() const {
  return std::vector<Sequence*>(waiting_.begin(), waiting_.end());
}

void Scheduler::Preempt(Sequence* seq, StepPlan* plan) {
  // Drop its planned chunk, if any.
  for (auto it = plan->chunks.begin(); it != plan->chunks.end(); ++it) {
    if (it->seq == seq) {
      if (it->decode) {
        --plan->num_decode;
      } else {
        plan->num_prefill_tokens -= it->num_tokens;
      }
      plan->chunks.erase(it);
      break;
    }
  }
  ReturnToWaiting(seq);
  ++seq->preemptions;
  ++counters_.preemptions;
  plan->preempted.push_back(seq);
}

void Scheduler::ReturnToWaiting(Sequence* seq) {
  blocks_->Release(seq->block_table);
  seq->block_table.clear();
  seq->block_hashes.clear();
  seq->num_computed = 0;
  seq->state = SequenceState::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.insert(seq);
}

bool Scheduler::IsPaused(const Sequence* s) const {
  return s->sink != nullptr && s->sink->pending_tokens() > config_.max_pending_tokens;
}

bool Scheduler::EnsureBlocks(Sequence* seq, int needed, StepPlan* plan) {
  while (blocks_->available() < needed) {
    // A paused sequence (its client reads nothing), else the lowest-priority, newest running
    // sequence (AWAITING_KV ones hold transfer blocks).
    Sequence* victim = nullptr;
    for (Sequence* s : running_) {
      if (s->state != SequenceState::kRunning) continue;
      if (victim == nullptr) {
        victim = s;
        continue;
      }
      const bool paused = IsPaused(s);
      const bool victim_paused = IsPaused(victim);
      if (paused != victim_paused ? paused : WaitingOrder()(victim, s)) victim = s;
    }
    if (victim == nullptr) return false;
    Preempt(victim, plan);
    if (victim == seq) return false;
  }
  return true;
}

bool Scheduler::Admit(Sequence* seq, SequenceState state, StepPlan* plan) {
  if (state == SequenceState::kAwaitingKv ? awaiting_kv_full()
                                          : num_running() >= config_.max_num_seqs)
    return false;
  const int bs = config_.block_size;
  std::vector<uint64_t> hashes;
  int cached = 0;
  if (config_.enable_prefix_caching) {
    // At least one token must be computed (its logits sample the next token), so a prompt
    // that is all cached leaves its last block to recompute.
    const int cacheable = (seq->num_tokens() - 1) / bs;
    hashes = kvcache::FullBlockHashes(
        config_.model_fingerprint, absl::MakeConstSpan(seq->tokens).subspan(0, cacheable * bs), bs);
    cached = blocks_->MatchPrefix(hashes);
  }
  const int new_blocks = BlocksFor(seq->num_tokens() + 1) - cached;
  // Cached blocks nobody references are both "available" (evictable) and about to be
  // pinned by this sequence: they cannot also serve its new blocks.
  const int pinned_evictable =
      blocks_->EvictableAmong(absl::MakeConstSpan(hashes).subspan(0, cached));
  if (new_blocks > blocks_->available() - pinned_evictable) return false;
  std::vector<int32_t> table;
  blocks_->TakeCached(hashes, cached, &table);
  if (!blocks_->Allocate(new_blocks, &table)) {
    // Unreachable when the check above holds; undo rather than admit with a short table.
    PDS_LOG(ERROR) << seq->request_id << ": " << new_blocks
                   << " blocks unavailable after the admission check";
    blocks_->Release(table);
    return false;
  }
  if (!seq->prefix_stats_counted) {
    seq->prefix_stats_counted = true;
    counters_.prefix_queried_tokens += seq->num_tokens();
    counters_.prefix_hit_tokens += static_cast<uint64_t>(cached) * bs;
    seq->cached_prompt_tokens = cached * bs;
  }
  if (plan != nullptr) plan->blocks_allocated += new_blocks;
  seq->block_table = std::move(table);
  seq->block_hashes.assign(hashes.begin(), hashes.begin() + cached);
  seq->num_computed = cached * bs;
  seq->state = state;
  waiting_.erase(seq);
  running_.push_back(seq);
  return true;
}

bool Scheduler::TryAdmit(Sequence* seq, int token_budget, StepPlan* plan) {
  if (!Admit(seq, SequenceState::kRunning, plan)) return false;
  plan->admitted.push_back(seq);
  const int chunk = std::min(seq->uncomputed(), token_budget);
  if (chunk > 0) {
    plan->chunks.push_back(PlannedChunk{seq, seq->num_computed, chunk,
                                        seq->num_computed + chunk == seq->num_tokens(), false});
    plan->num_prefill_tokens += chunk;
  }
  return true;
}

StepPlan Scheduler::PlanStep() {
  StepPlan plan;
  int budget = config_.max_num_batched_tokens;
  std::stable_sort(running_.begin(), running_.end(), WaitingOrder());
  auto paused = [&](const Sequence* s) { return IsPaused(s); };
  // Pass 1: decodes, one token each. Pass 2: prefill chunks of running sequences. At most
  // max_num_seqs of them (more run only when transfers completed into a full batch).
  int width = config_.max_num_seqs;
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<Sequence*> order = running_;  // Preemption edits running_.
    for (Sequence* seq : order) {
      if (budget <= 0 || width <= 0) break;
      if (seq->state != SequenceState::kRunning || paused(seq)) continue;
      const bool decode = seq->uncomputed() == 1;
      if (decode != (pass == 0) || seq->uncomputed() == 0) continue;
      const int chunk = std::min(seq->uncomputed(), budget);
      const int needed =
          BlocksFor(seq->num_computed + chunk) - static_cast<int>(seq->block_table.size());
      if (needed > 0) {
        if (!EnsureBlocks(seq, needed, &plan) || !blocks_->Allocate(needed, &seq->block_table))
          continue;
        plan.blocks_allocated += needed;
      }
      plan.chunks.push_back(PlannedChunk{seq, seq->num_computed, chunk,
                                         seq->num_computed + chunk == seq->num_tokens(), decode});
      --width;
      if (decode) {
        ++plan.num_decode;
      } else {
        plan.num_prefill_tokens += chunk;
      }
      budget -= chunk;
    }
  }
  // Admissions, highest priority first, while blocks, sequence slots and budget last.
  while (budget > 0 && !waiting_.empty()) {
    Sequence* head = NextToAdmit();
    if (head == nullptr) break;
    if (head->on_admitted_for_transfer) {
      // An offload waiting for blocks takes them as an offload: its prompt is computed by a
      // prefill worker, not in chunks beside the running streams (the router sent it away
      // because those chunks would have harmed them). It needs the same blocks a local
      // admission would, so it waits no longer; past max_awaiting_kv it waits for a slot.
      bool admitted = Admit(head, SequenceState::kAwaitingKv, &plan);
      while (!admitted && !awaiting_kv_full() && PreemptForFairness(head, &plan))
        admitted = Admit(head, SequenceState::kAwaitingKv, &plan);
      if (!admitted) break;
      plan.admitted_for_transfer.push_back(head);
      continue;
    }
    bool admitted = TryAdmit(head, budget, &plan);
    while (!admitted && PreemptForFairness(head, &plan)) admitted = TryAdmit(head, budget, &plan);
    if (!admitted) break;
    if (!plan.chunks.empty() && plan.chunks.back().seq == head)
      budget -= plan.chunks.back().num_tokens;
  }
  return plan;
}

absl::flat_hash_map<absl::string_view, int> Scheduler::RunningByClient() const {
  absl::flat_hash_map<absl::string_view, int> running;
  for (const Sequence* s : running_) ++running[s->client];
  return running;
}

Sequence* Scheduler::NextToAdmit() const {
  const absl::flat_hash_map<absl::string_view, int> running = RunningByClient();
  Sequence* best = nullptr;
  int best_running = 0;
  absl::flat_hash_set<absl::string_view> seen;
  for (Sequence* s : waiting_) {  // Priority desc, arrival asc.
    if (best != nullptr && s->priority != best->priority) break;
    // Preempted while its client reads nothing: it would only be paused again (it ends after
    // max_client_stall, as a running one does).
    if (s->generated() > 0 && IsPaused(s)) continue;
    if (!seen.insert(s->client).second) continue;  // Not this client's earliest.
    auto it = running.find(s->client);
    const int n = it == running.end() ? 0 : it->second;
    if (best == nullptr || n < best_running) {
      best = s;
      best_running = n;
      if (n == 0) break;  // None can run fewer; later ones arrived later.
    }
  }
  return best;
}

bool Scheduler::PreemptForFairness(Sequence* seq, StepPlan* plan) {
  const absl::flat_hash_map<absl::string_view, int> running = RunningByClient();
  auto mine = running.find(seq->client);
  const int own = mine == running.end() ? 0 : mine->second;
  // The client running the most, if it runs at least two more than `seq`'s (one more would
  // only swap which of the two is ahead).
  absl::string_view busiest;
  int most = own + 1;
  for (const auto& [client, n] : running) {
    if (n > most || (n == most && client < busiest)) {
      busiest = client;
      most = n;
    }
  }
  if (most <= own + 1) return false;
  // Its newest running sequence of no higher priority (AWAITING_KV ones hold transfers).
  Sequence* victim = nullptr;
  for (Sequence* s : running_) {
    if (s->client != busiest || s->state != SequenceState::kRunning || s->priority > seq->priority)
      continue;
    if (victim == nullptr || WaitingOrder()(victim, s)) victim = s;
  }
  if (victim == nullptr) return false;
  ++counters_.fairness_preemptions;
  Preempt(victim, plan);
  return true;
}

void Scheduler::PublishFullBlocks(Sequence* seq) {
  if (!config_.enable_prefix_caching) return;
  const int bs = config_.block_size;
  size_t i = seq->block_hashes.size();
  while (static_cast<int>((i + 1) * bs) <= seq->num_computed && i < seq->block_table.size()) {
    const uint64_t parent = i == 0 ? 0 : seq->block_hashes[i - 1];
    const uint64_t h = kvcache::BlockHash(config_.model_fingerprint, parent,
                                          absl::MakeConstSpan(seq->tokens).subspan(i * bs, bs));
    seq->block_hashes.push_back(h);
    blocks_->Publish(seq->block_table[i], h);
    ++i;
  }
}

void Scheduler::ApplyStep(const StepPlan& plan, absl::Span<const int32_t> sampled) {
  size_t next = 0;
  bool mixed = false;
  for (const PlannedChunk& c : plan.chunks) {
    Sequence* seq = c.seq;
    seq->num_computed += c.num_tokens;
    if (c.decode) {
      ++counters_.decode_tokens;
    } else {
      mixed = true;
      counters_.prefill_tokens += c.num_tokens;
      ++counters_.prefill_chunks;
      ++seq->prefill_chunks;
    }
    PublishFullBlocks(seq);
    if (c.want_logits && next < sampled.size()) seq->tokens.push_back(sampled[next++]);
  }
  if (!plan.chunks.empty()) {
    ++counters_.steps;
    if (mixed) ++counters_.mixed_steps;
  }
}

std::unique_ptr<Sequence> Scheduler::Finish(Sequence* seq) {
  auto owned = owned_.find(seq);
  PDS_CHECK(owned != owned_.end()) << "finishing an unknown sequence";
  std::unique_ptr<Sequence> out = std::move(owned->second);
  owned_.erase(owned);
  if (seq->state == SequenceState::kWaiting) {
    waiting_.erase(seq);
  } else {
    auto it = std::find(running_.begin(), running_.end(), seq);
    if (it != running_.end()) running_.erase(it);
  }
  blocks_->Release(seq->block_table);
  seq->block_table.clear();
  seq->state = SequenceState::kFinished;
  return out;
}

bool Scheduler::AdmitForTransfer(Sequence* seq) {
  return Admit(seq, SequenceState::kAwaitingKv, nullptr);
}

Scheduler::TransferAdmission Scheduler::AdmitOrAwaitTransfer(
    Sequence* seq, std::function<void(Sequence*)> on_admitted) {
  if (awaiting_kv_full()) return TransferAdmission::kAwaitingKvFull;
  if (AdmitForTransfer(seq)) return TransferAdmission::kAdmitted;
  seq->on_admitted_for_transfer = std::move(on_admitted);
  return TransferAdmission::kWaitingForBlocks;
}

void Scheduler::TransferDone(Sequence* seq, int computed_tokens) {
  seq->num_computed = computed_tokens;
  seq->state = SequenceState::kRunning;
  PublishFullBlocks(seq);
}

void HandOverTransferAdmissions(const StepPlan& plan) {
  for (Sequence* seq : plan.admitted_for_transfer) {
    std::function<void(Sequence*)> handler = std::move(seq->on_admitted_for_transfer);
    seq->on_admitted_for_transfer = nullptr;
    if (handler) handler(seq);
  }
}

}  // namespace pdserve::decode
