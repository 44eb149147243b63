#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "core/error.h"
#include "io/safetensors.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("memtrain_safetensors_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  // A file as the format spells it: length field, header padded with spaces to `pad_to`, then data.
  static std::string encode(std::string header, const std::string& data, size_t pad_to = 1) {
    header.append((pad_to - header.size() % pad_to) % pad_to, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
    return out + header + data;
  }

  // Writes `bytes` to a fresh file and expects opening it to fail as a data error naming the file and `what`.
  void expect_bad(const std::string& bytes, const std::string& what) {
    const std::string path = file("bad.safetensors");
    write_bytes(path, bytes);
    expect_open_fails(path, what);
  }
  static void expect_open_fails(const std::string& path, const std::string& what) {
    try {
      SafetensorsReader reader(path);
      ADD_FAILURE() << "opened " << path << ", expected: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  static void expect_data_error(const std::function<void()>& f, const std::string& path,
                                const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error, expected: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

template <typename T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string read_tensor(const SafetensorsReader& r, const std::string& name) {
  const TensorEntry* e = r.find(name);
  if (!e) return "<absent>";
  std::string out(e->bytes(), '\0');
  r.read(*e, out.data());
  return out;
}

TEST_F(Safetensors, RoundTrip) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, 7.0f};
  const std::vector<int32_t> ids = {-1, 0, 2147483647};
  const std::vector<uint16_t> tokens = {0, 50256, 65535, 7};
  const std::vector<uint16_t> half = {0x3f80, 0xc000};  // bf16 1.0 and -2.0
  const std::vector<float> scalar = {42.0f};
  const std::string path = file("model.safetensors");
  {
    SafetensorsWriter writer(path,
                             {{"wte.weight", DType::f32, {2, 3}},
                              {"ids", DType::i32, {3}},
                              {"tokens", DType::u16, {2, 2}},
                              {"ln.bias", DType::bf16, {2}},
                              {"step", DType::f32, {}},
                              {"empty", DType::f32, {0}}},
                             {{"format", "pt"}, {"step", "12"}});
    writer.write_next(w.data(), 24);
    writer.write_next(ids.data(), 12);
    writer.write_next(tokens.data(), 8);
    writer.write_next(half.data(), 4);
    writer.write_next(scalar.data(), 4);
    writer.write_next(nullptr, 0);
    writer.finish();
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"model.safetensors"});  // no temporary left behind

  SafetensorsReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  std::vector<std::string> order;
  for (const TensorEntry& e : r.tensors()) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"wte.weight", "ids", "tokens", "ln.bias", "step", "empty"}));

  const TensorEntry* e = r.find("wte.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::f32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(e->numel(), 6);
  EXPECT_EQ(e->begin, 0u);
  EXPECT_EQ(e->end, 24u);
  EXPECT_EQ(read_tensor(r, "wte.weight"), as_bytes(w));
  EXPECT_EQ(r.find("ids")->dtype, DType::i32);
  EXPECT_EQ(read_tensor(r, "ids"), as_bytes(ids));
  EXPECT_EQ(r.find("tokens")->dtype, DType::u16);
  EXPECT_EQ(read_tensor(r, "tokens"), as_bytes(tokens));
  EXPECT_EQ(r.find("ln.bias")->dtype, DType::bf16);
  EXPECT_EQ(read_tensor(r, "ln.bias"), as_bytes(half));
  EXPECT_TRUE(r.find("step")->shape.empty());
  EXPECT_EQ(r.find("step")->numel(), 1);
  EXPECT_EQ(read_tensor(r, "step"), as_bytes(scalar));
  EXPECT_EQ(r.find("empty")->numel(), 0);
  EXPECT_EQ(read_tensor(r, "empty"), "");
  EXPECT_EQ(r.find("missing"), nullptr);
}

TEST_F(Safetensors, DataSectionIsEightByteAligned) {
  // Names of every length mod 8, so some header would be unaligned without padding.
  for (int len = 1; len <= 8; ++len) {
    const std::string path = file("aligned.safetensors");
    {
      SafetensorsWriter writer(path, {{std::string(len, 'x'), DType::f16, {1}}});
      const uint16_t v = 0x3c00;
      writer.write_next(&v, 2);
      writer.finish();
    }
    const std::string bytes = read_bytes(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    EXPECT_EQ((8 + header_len) % 8, 0u) << "name length " << len;
    EXPECT_EQ(bytes.size(), 8 + header_len + 2);
    EXPECT_EQ(bytes.substr(8 + header_len), std::string("\x00\x3c", 2));
    EXPECT_EQ(SafetensorsReader(path).find(std::string(len, 'x'))->dtype, DType::f16);
  }
}

TEST_F(Safetensors, ReadsFileBuiltBySpec) {
  // Laid out as Python's safetensors.torch.save_file does: metadata, offsets in order, space padding to 8.
  const std::vector<float> a = {1.0f, 2.0f};
  const std::vector<int32_t> b = {3, 4, 5};
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I32","shape":[1,3],"data_offsets":[8,20]}})";
  const std::string path = file("python.safetensors");
  write_bytes(path, encode(header, as_bytes(a) + as_bytes(b), 8));
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.find("b")->shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(read_tensor(r, "a"), as_bytes(a));
  EXPECT_EQ(read_tensor(r, "b"), as_bytes(b));
}

TEST_F(Safetensors, RejectsBadFiles) {
  expect_open_fails(file("absent.safetensors"), "cannot open");
  expect_bad("abc", "file size 3 is below the 8-byte header length field");
  expect_bad(encode("{}", "").substr(0, 8) + "{", "header length 2 exceeds file size 9");
  expect_bad(std::string("\x00\xe1\xf5\x05\x01\x00\x00\x00", 8) + "{}", "exceeds the limit of 100000000");
  expect_bad(encode("{\"a\":", ""), "header is not valid JSON");
  expect_bad(encode("[1, 2]", ""), "header is not a JSON object");
  expect_bad(encode(R"({"a": 3})", ""), "tensor \"a\": entry is not an object");
  expect_bad(encode(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "abcd"), "\"dtype\" must be a string");
  expect_bad(encode(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"),
             "\"dtype\" must be a string");
  expect_bad(encode(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"), "\"shape\" must be an array");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
             "\"shape\" must be an array of integers");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"), "\"data_offsets\" must be two");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd"),
             "\"data_offsets\" must be two");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,4]}})", "abcd"),
             "\"data_offsets\" must be two non-negative integers");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
             "dimension -1 is negative or too large");
  expect_bad(encode(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", "abcdefgh"),
             "tensor \"a\": unknown dtype \"F64\"");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "abcd"),
             "data_offsets begin 4 > end 0");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
             "data_offsets end 8 beyond the data section of 4 bytes");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"),
             "data_offsets span 4 bytes but F32 [2] needs 8");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "abcd"),
             "shape [4294967296, 4294967296] is too large");
  expect_bad(encode(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    "abcdefghijkl"),
             "tensor \"a\" and tensor \"b\" overlap");
  expect_bad(encode(R"({"__metadata__":{"step":12}})", ""), "__metadata__ value of \"step\" is not a string");
  expect_bad(encode(R"({"__metadata__":[]})", ""), "__metadata__ is not an object");
}

TEST_F(Safetensors, EmptyTensorInsideAnotherIsNoOverlap) {
  const std::string path = file("empty.safetensors");
  write_bytes(path, encode(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                           "abcdefgh"));
  EXPECT_EQ(SafetensorsReader(path).tensors().size(), 2u);
}

TEST_F(Safetensors, ReadFailsWhenFileShrinks) {
  const std::string path = file("shrink.safetensors");
  write_bytes(path, encode(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcdefgh"));
  SafetensorsReader r(path);
  fs::resize_file(path, fs::file_size(path) - 4);
  std::string dst(8, '\0');
  expect_data_error([&] { r.read(*r.find("a"), dst.data()); }, path,
                    "reading tensor \"a\": unexpected end of file");
}

TEST_F(Safetensors, TensorsStreamedInPartsEqualWholeWrites) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7}, b = {8, 9};
  const std::vector<SafetensorsWriter::Item> items = {{"a", DType::f32, {7}}, {"b", DType::f32, {2}}};
  {
    SafetensorsWriter whole(file("whole.safetensors"), items);
    whole.write_next(a.data(), 28);
    whole.write_next(b.data(), 8);
    whole.finish();
  }
  SafetensorsWriter parts(file("parts.safetensors"), items);
  parts.write_part(a.data(), 12);  // uneven pieces: 3 + 3 + 1 floats
  parts.write_part(a.data() + 3, 12);
  expect_data_error([&] { parts.write_next(a.data(), 28); }, file("parts.safetensors"),
                    "tensor \"a\" is F32 [7] = 28 bytes, got 28");  // whole writes only between tensors
  expect_data_error([&] { parts.write_part(a.data(), 8); }, file("parts.safetensors"),
                    "tensor \"a\" is 28 bytes, 24 written, got 8 more");
  parts.write_part(a.data() + 6, 4);
  parts.write_part(b.data(), 8);
  parts.finish();
  EXPECT_EQ(read_bytes(file("parts.safetensors")), read_bytes(file("whole.safetensors")));
}

TEST_F(Safetensors, WriterMisuseIsAnError) {
  const std::string path = file("misuse.safetensors");
  const float v[2] = {1, 2};
  SafetensorsWriter writer(path, {{"a", DType::f32, {2}}});
  expect_data_error([&] { writer.finish(); }, path, "finish after 0 of 1 tensors");
  expect_data_error([&] { writer.write_next(v, 4); }, path, "tensor \"a\" is F32 [2] = 8 bytes, got 4");
  writer.write_next(v, 8);
  expect_data_error([&] { writer.write_next(v, 8); }, path, "write_next after all 1 tensors were written");
  expect_data_error(
      [&] {
        SafetensorsWriter(path, {{"a", DType::f32, {1}}, {"a", DType::f32, {1}}});
      },
      path, "tensor \"a\": duplicate or reserved name");
  expect_data_error(
      [&] {
        SafetensorsWriter(path, {{"a", DType::f32, {-1}}});
      },
      path, "shape [-1] is negative or too large");
  const std::string nowhere = file("no/such/dir/x.safetensors");
  expect_data_error([&] { SafetensorsWriter(nowhere, {}); }, nowhere, "cannot create");
}

TEST_F(Safetensors, AbandonedWriterLeavesDestinationAlone) {
  const std::string fresh = file("fresh.safetensors");
  {
    SafetensorsWriter writer(fresh, {{"a", DType::i32, {1}}});
    const int32_t v = 1;
    writer.write_next(&v, 4);
    EXPECT_EQ(entries().size(), 1u);  // the temporary exists while writing
  }
  EXPECT_TRUE(entries().empty());

  const std::string existing = file("existing.safetensors");
  write_bytes(existing, "old contents");
  { SafetensorsWriter writer(existing, {{"a", DType::i32, {1}}}); }
  EXPECT_EQ(read_bytes(existing), "old contents");
  EXPECT_EQ(entries(), std::vector<std::string>{"existing.safetensors"});
}

}  // namespace
}  // namespace mt
