#include "kvtransfer/descriptor_codec.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"

namespace pdserve::kvtransfer {
namespace {

constexpr uint32_t kMagic = 0x4B564431;  // "KVD1"

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string* out, const std::string& s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool empty() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

}  // namespace

std::string EncodeDescriptor(const KvPoolDescriptor& d) {
  std::string out;
  Put(&out, kMagic);
  PutString(&out, d.receiver_id);
  PutString(&out, d.worker_address);
  PutString(&out, d.packed_rkey);
  Put(&out, d.base_address);
  for (int32_t v :
       {d.layout.num_layers, d.layout.num_kv_heads, d.layout.head_dim, d.layout.block_size,
        static_cast<int32_t>(d.layout.dtype), d.layout.num_blocks}) {
    Put(&out, v);
  }
  Put(&out, d.model_fingerprint);
  Put(&out, d.epoch);
  return out;
}

absl::StatusOr<KvPoolDescriptor> DecodeDescriptor(absl::string_view bytes) {
  Reader r(bytes);
  KvPoolDescriptor d;
  uint32_t magic;
  int32_t f[6];
  bool ok = r.Get(&magic) && magic == kMagic && r.GetString(&d.receiver_id) &&
            r.GetString(&d.worker_address) && r.GetString(&d.packed_rkey) && r.Get(&d.base_address);
  for (int i = 0; ok && i < 6; ++i) ok = r.Get(&f[i]);
  ok = ok && r.Get(&d.model_fingerprint) && r.Get(&d.epoch) && r.empty();
  if (!ok || f[4] < 1 || f[4] > 3) return absl::InvalidArgumentError("kv descriptor: malformed");
  d.layout = KvLayout{f[0], f[1], f[2], f[3], static_cast<DType>(f[4]), f[5]};
  return d;
}

std::string ToHex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

absl::StatusOr<std::string> FromHex(absl::string_view hex) {
  if (hex.size() % 2 != 0) return absl::InvalidArgumentError("hex: odd length");
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)))
      return absl::InvalidArgumentError("hex: bad digit");
  }
  return absl::HexStringToBytes(hex);
}

}  // namespace pdserve::kvtransfer
