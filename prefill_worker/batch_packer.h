// Which queued prefill jobs share the next forward: the queue is taken in order while the
// prompts' tokens stay within the batch budget and their blocks within what the worker's pool
// has free; the first job is always taken (a prompt larger than the budget runs alone). The
// prefill batcher and the cluster simulator (bench/sim) pack with this one rule.
// Thread-safety: a plain value; one per batch being packed.
#ifndef PDSERVE_PREFILL_WORKER_BATCH_PACKER_H_
#define PDSERVE_PREFILL_WORKER_BATCH_PACKER_H_

namespace pdserve::prefill {

class BatchPacker {
 public:
  BatchPacker(int max_batch_tokens, int block_size, int available_blocks)
      : max_batch_tokens_(max_batch_tokens),
        block_size_(block_size),
        available_blocks_(available_blocks) {}

  // Takes the next job (a prompt of `prompt_tokens`) into the batch, or returns false (the
  // batch is complete) when it would not fit beside the jobs taken so far.
  bool TryAdd(int prompt_tokens) {
    const int blocks = (prompt_tokens + block_size_ - 1) / block_size_;
    if (jobs_ > 0 &&
        (tokens_ + prompt_tokens > max_batch_tokens_ || blocks_ + blocks > available_blocks_)) {
      return false;
    }
    tokens_ += prompt_tokens;
    blocks_ += blocks;
    ++jobs_;
    return true;
  }
  int jobs() const { return jobs_; }
  int tokens() const { return tokens_; }

 private:
  const int max_batch_tokens_;
  const int block_size_;
  const int available_blocks_;
  int jobs_ = 0;
  int tokens_ = 0;
  int blocks_ = 0;
};

}  // namespace pdserve::prefill

#endif  // PDSERVE_PREFILL_WORKER_BATCH_PACKER_H_
