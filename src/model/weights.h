// Model weights in safetensors with Hugging Face names and layouts (hf_tensors.h): one file, or the
// shards a model.safetensors.index.json lists.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "io/safetensors.h"
#include "memory/allocation.h"
#include "model/graph_builder.h"
#include "model/hf_tensors.h"
#include "model/spec.h"

namespace mt {

// Hugging Face's default shard size for save_pretrained.
constexpr uint64_t kDefaultShardBytes = 5'000'000'000;

// The safetensors files behind a weights path: a .safetensors file, or the shards a
// model.safetensors.index.json lists (in name order, from the index's folder), or those of a folder holding
// either.
std::vector<std::string> weight_files(const std::string& path);

// A model's weight files open for reading, their tensors found by Hugging Face name (hf_tensor_name: tensors
// memtrain ignores are left out).
class WeightFiles {
 public:
  struct Found {
    const SafetensorsReader* reader;
    const TensorEntry* entry;
  };
  WeightFiles(const std::string& path, const ModelSpec& spec);
  const std::map<std::string, Found>& tensors() const { return by_name_; }
  // A data error naming the path when the files lack it.
  const Found& at(const std::string& name) const;
  // Tensor f's values in fp32, checked as load_weights checks them.
  void read_f32(const FileTensor& f, float* dst) const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, Found> by_name_;
};

// One shard file of sharded weights (its name beside the index) and the tensors it holds, in order.
struct WeightShard {
  std::string file;
  std::vector<FileTensor> tensors;
};
// Writes model.safetensors.index.json at `path`, atomically: Hugging Face's weight_map of the shards.
void write_weight_index(const std::string& path, const std::vector<WeightShard>& shards,
                        uint64_t total_bytes);

// Elements of a parameter that follow each other both in this rank's part and in the whole tensor: part
// elements [local, local + count) are the whole tensor's [whole, whole + count).
struct ElementRun {
  int64_t local = 0, whole = 0, count = 0;
};
// The run that starts at element `local` of t's part, at most `limit` long. A tensor without a shard is its
// own whole: one run.
ElementRun run_at(const TensorDesc& t, int64_t local, int64_t limit);

// Creates the file at path with `file`'s header, sized for all its data (the other bytes zero), for several
// writers to fill in place; a data error naming it otherwise.
void create_laid_out_file(const std::string& path, const SafetensorsLayout& file);

// Hands the bytes of flat parameter elements [first, last) to `sink`, in order, in pieces.
using FlatSource =
    std::function<void(int64_t first, int64_t last, const std::function<void(const char*, uint64_t)>& sink)>;

// The values of the weights this rank holds, in their dtype, and of its fp32 master copy (through the
// optimizer state's windows).
FlatSource weight_values(const Allocation& memory);
FlatSource master_values(const Allocation& memory);

// Writes this rank's elements of each file tensor of `tensors` (those of flat index in [first, last); none of
// a tensor without a parameter here, FileTensor::param -1) into their places in the file at path, laid out
// as `file` (tensor i at file.tensor_offset[i]), then fsyncs it: a split parameter's part at its whole
// indices; a whole parameter only when `writes_whole` (on one tensor-parallel rank: every one holds it).
// Values come from `source`, `element_bytes` each.
void write_tensor_parts(const std::string& path, const SafetensorsLayout& file,
                        const std::vector<FileTensor>& tensors, const Allocation& memory, bool writes_whole,
                        int64_t first, int64_t last, uint64_t element_bytes, const FlatSource& source);

// Reads every parameter of `model` from `path`: a .safetensors file, a model.safetensors.index.json (its
// shards are read from the index's folder), or a folder holding either. Tensors hf_tensor_name ignores are
// accepted. F32, BF16 and F16 tensors are converted to the run's storage (the fp32 master copy, or the
// weights without one); under tensor parallelism each rank stores its own part of every split parameter,
// under pipeline parallelism its stage's parameters (a tied embedding's copy too). A tensor of the whole
// model missing, a wrong shape or dtype, or an unknown tensor is a data error naming the file and the tensor.
void load_weights(const std::string& path, const ModelSpec& spec, const ModelGraph& model,
                  Allocation& memory);

// Reads exactly the file tensors `into` (each under its file name) from one safetensors file, converted as
// load_weights converts; a missing or unexpected tensor, or a wrong shape or dtype, is a data error naming
// the file and the tensor.
void load_weight_file(const std::string& path, const std::vector<FileTensor>& into, Allocation& memory);

// The ranks that write one weight file together, collective over `group` (alone when it is null or of one
// rank): its rank 0 lays the file out and renames it into place; each rank that `writes` puts its elements of
// the file's tensors there (write_tensor_parts: whole parameters only where `writes_whole`), never those of
// `tied_copy` (the last stage's copy of a tied embedding, which the first stage writes; -1: none).
struct WeightWriters {
  Communicator* group = nullptr;
  bool writes = true, writes_whole = true;
  int tied_copy = -1;
};

// Writes the file tensors `from` (ranges of parameters the optimizer trains, each under its file name) into
// one safetensors file, atomically: the fp32 master copy when this rank holds it whole, else the weights in
// their own dtype. With several `writers`, collective over their group.
void write_weight_file(const std::string& path, const std::vector<FileTensor>& from, const Allocation& memory,
                       const WeightWriters& writers = {});

// Writes every parameter of the whole model (vocabulary padding removed), each file atomically: the fp32
// master copy when there is one, else the weights in their own dtype (also under ZeRO, where the master copy
// is sharded). A path ending in .index.json gets shards model-0000i-of-0000n.safetensors beside it of at most
// max_shard_bytes each (a larger tensor gets a shard of its own), written before the index; any other path
// one file. Under model parallelism `model` is a rank's part, and the ranks of `writers` write the files
// together (write_weight_file).
void save_weights(const std::string& path, const ModelSpec& spec, const ModelGraph& model,
                  const Allocation& memory, uint64_t max_shard_bytes = kDefaultShardBytes,
                  const WeightWriters& writers = {});

}  // namespace mt
