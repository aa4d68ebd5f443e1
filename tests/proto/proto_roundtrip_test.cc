// Every message of pdserve.v1, filled with non-default values in every field, survives
// serialize + parse unchanged; and every field in the .proto sources carries a comment.
#include <fstream>
#include <sstream>
#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pdserve/v1/common.pb.h"
#include "pdserve/v1/decode.pb.h"
#include "pdserve/v1/generation.pb.h"
#include "pdserve/v1/prefill.pb.h"
#include "pdserve/v1/registry.pb.h"

namespace pdserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

const char* kFiles[] = {"pdserve/v1/common.proto", "pdserve/v1/generation.proto",
                        "pdserve/v1/decode.proto", "pdserve/v1/prefill.proto",
                        "pdserve/v1/registry.proto"};

// Sets every field (repeated ones to two elements) to a value derived from `seed`. For a
// oneof, the last member wins, so each oneof member gets its own pass in RoundTripAll.
void Fill(Message* msg, int seed, int depth, const FieldDescriptor* only_oneof_member) {
  const Descriptor* d = msg->GetDescriptor();
  const Reflection* r = msg->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->real_containing_oneof() != nullptr && only_oneof_member != nullptr &&
        f->real_containing_oneof() == only_oneof_member->real_containing_oneof() &&
        f != only_oneof_member) {
      continue;
    }
    const int reps = f->is_repeated() ? 2 : 1;
    for (int k = 0; k < reps; ++k) {
      const int v = seed + i * 7 + k + 1;
      switch (f->cpp_type()) {
#define PDS_SET(CPPTYPE, Setter, Adder, value) \
  case FieldDescriptor::CPPTYPE:               \
    if (f->is_repeated()) {                    \
      r->Adder(msg, f, value);                 \
    } else {                                   \
      r->Setter(msg, f, value);                \
    }                                          \
    break;
        PDS_SET(CPPTYPE_INT32, SetInt32, AddInt32, -v)
        PDS_SET(CPPTYPE_INT64, SetInt64, AddInt64, -static_cast<int64_t>(v) * 1000000007LL)
        PDS_SET(CPPTYPE_UINT32, SetUInt32, AddUInt32, static_cast<uint32_t>(v))
        PDS_SET(CPPTYPE_UINT64, SetUInt64, AddUInt64, static_cast<uint64_t>(v) << 40)
        PDS_SET(CPPTYPE_DOUBLE, SetDouble, AddDouble, v + 0.25)
        PDS_SET(CPPTYPE_FLOAT, SetFloat, AddFloat, v + 0.5f)
        PDS_SET(CPPTYPE_BOOL, SetBool, AddBool, true)
        PDS_SET(CPPTYPE_STRING, SetString, AddString,
                f->type() == FieldDescriptor::TYPE_BYTES
                    ? std::string("b\0\xff", 3) + std::to_string(v)
                    : "s\xc3\xa9\xe2\x9c\x93" + std::to_string(v))
#undef PDS_SET
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* e = f->enum_type();
          const auto* value = e->value(e->value_count() - 1);
          if (f->is_repeated()) {
            r->AddEnum(msg, f, value);
          } else {
            r->SetEnum(msg, f, value);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE: {
          if (depth > 4) break;
          Message* sub = f->is_repeated() ? r->AddMessage(msg, f) : r->MutableMessage(msg, f);
          Fill(sub, v, depth + 1, nullptr);
          break;
        }
      }
    }
  }
}

int RoundTripAll(const google::protobuf::FileDescriptor* file) {
  int checked = 0;
  google::protobuf::MessageFactory* factory = google::protobuf::MessageFactory::generated_factory();
  for (int m = 0; m < file->message_type_count(); ++m) {
    const Descriptor* d = file->message_type(m);
    // One pass per oneof member (plus one for messages without oneofs).
    std::vector<const FieldDescriptor*> passes{nullptr};
    for (int o = 0; o < d->oneof_decl_count(); ++o) {
      const google::protobuf::OneofDescriptor* oneof = d->oneof_decl(o);
      if (oneof->is_synthetic()) continue;  // proto3 `optional` fields.
      for (int f = 0; f < oneof->field_count(); ++f) passes.push_back(oneof->field(f));
    }
    for (const FieldDescriptor* pass : passes) {
      std::unique_ptr<Message> original(factory->GetPrototype(d)->New());
      Fill(original.get(), 3, 0, pass);
      std::string wire;
      EXPECT_TRUE(original->SerializeToString(&wire)) << d->full_name();
      if (d->field_count() > 0) {
        EXPECT_FALSE(wire.empty()) << d->full_name();
      }
      std::unique_ptr<Message> parsed(factory->GetPrototype(d)->New());
      EXPECT_TRUE(parsed->ParseFromString(wire)) << d->full_name();
      std::string diff;
      google::protobuf::util::MessageDifferencer differencer;
      differencer.ReportDifferencesToString(&diff);
      EXPECT_TRUE(differencer.Compare(*original, *parsed)) << d->full_name() << ": " << diff;
      ++checked;
    }
  }
  return checked;
}

TEST(ProtoRoundTripTest, EveryMessageSurvivesTheWire) {
  // Touch one message per file so the generated descriptors are linked in.
  const Descriptor* anchors[] = {v1::KvTarget::descriptor(), v1::GenerateRequest::descriptor(),
                                 v1::DecodeStats::descriptor(), v1::PrefillRequest::descriptor(),
                                 v1::WorkerMessage::descriptor()};
  ASSERT_EQ(std::size(anchors), std::size(kFiles));
  int total = 0;
  for (const char* name : kFiles) {
    const auto* file = google::protobuf::DescriptorPool::generated_pool()->FindFileByName(name);
    ASSERT_NE(file, nullptr) << name;
    EXPECT_EQ(file->package(), "pdserve.v1");
    total += RoundTripAll(file);
  }
  EXPECT_GT(total, 30);
}

TEST(ProtoRoundTripTest, OptionalFieldsKeepPresence) {
  v1::SamplingParams params;
  params.set_temperature(0.0f);
  v1::SamplingParams parsed;
  ASSERT_TRUE(parsed.ParseFromString(params.SerializeAsString()));
  EXPECT_TRUE(parsed.has_temperature());
  EXPECT_FALSE(parsed.has_top_p());
  EXPECT_FALSE(parsed.has_max_tokens());
}

// A field line is "type name = N;" inside a message; the line before it must be a comment.
TEST(ProtoDocumentationTest, EveryFieldIsDocumented) {
  for (const char* name : kFiles) {
    std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/proto/" + name);
    ASSERT_TRUE(in) << name;
    std::string line, previous;
    int line_no = 0, fields = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const size_t first = line.find_first_not_of(' ');
      std::string trimmed = first == std::string::npos ? "" : line.substr(first);
      const bool is_field = trimmed.find(" = ") != std::string::npos && trimmed.back() == ';' &&
                            trimmed.rfind("option", 0) != 0 && trimmed.rfind("//", 0) != 0;
      const bool is_enum_value = is_field && trimmed.find(' ') == trimmed.find(" = ");
      if (is_field && !is_enum_value) {
        ++fields;
        const bool commented_before = previous.rfind("//", 0) == 0;
        EXPECT_TRUE(commented_before) << name << ":" << line_no << " undocumented: " << trimmed;
      }
      if (!trimmed.empty()) previous = trimmed;
    }
    EXPECT_GT(fields, 0) << name;
  }
}

}  // namespace
}  // namespace pdserve
