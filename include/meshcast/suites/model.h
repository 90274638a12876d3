// The weights of a real architecture as a batch: every parameter of a Llama- or GPT-like
// transformer with its Megatron-style layout on the training meshes and on the serving meshes,
// so that a weight sync (trainer -> inference engine) can be planned, simulated and run.
// docs/models.md gives the exact layout of every parameter class.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/layout/cluster.h"
#include "meshcast/layout/tensor.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

enum class ModelArch { llama, gpt };
std::string_view to_string(ModelArch arch);
// Throws InvalidArgument naming the text and the accepted names.
ModelArch parse_model_arch(std::string_view text);

struct ModelConfig {
  ModelArch arch = ModelArch::llama;
  int64_t hidden = 4096;
  int64_t layers = 32;
  int64_t heads = 32;
  int64_t kv_heads = 0;  // 0: heads; fewer: grouped-query attention (llama only)
  int64_t ffn = 11008;
  int64_t vocab = 32000;
  int64_t positions = 2048;  // gpt: rows of the learned position embedding; llama: unused
  DType dtype = DType::bfloat16;

  int64_t key_value_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  // Throws InvalidArgument naming the field: non-positive sizes (kv_heads: negative), hidden not
  // a multiple of heads, heads not a multiple of kv_heads, or kv_heads != heads for gpt.
  void validate() const;
};

// Llama-2-7B, Llama-2-70B and a GPT-3-2.7B-like model: the weights suite's architectures.
ModelConfig llama_7b();
ModelConfig llama_70b();
ModelConfig gpt_2_7b();

// How one side (trainer or server) spreads the model: tp-way tensor parallelism inside each
// pipeline stage, pp stages, and `replicas` identical copies (data parallelism on the trainer).
struct ModelParallelism {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t replicas = 1;

  int64_t devices() const { return tp * pp * replicas; }
};

// Parses "tp=4,pp=2,dp=2": keys tp, pp and `replica_key` ("dp" for the trainer, "replicas" for
// the server), each at most once, values positive integers; missing keys are 1. Throws
// InvalidArgument naming `option`, the bad entry and what was expected.
ModelParallelism parse_model_parallelism(std::string_view text, std::string_view replica_key,
                                         std::string_view option);

// What decides a parameter's layout (docs/models.md): column-parallel weights and their biases
// are split on the output dimension over tp, row-parallel weights on the input dimension,
// vocab-parallel tables on the vocabulary dimension; everything else is replicated.
enum class ParamClass { column, column_bias, row, vocab, replicated };
std::string_view to_string(ParamClass param_class);

struct ModelParameter {
  std::string name;  // "layers.3.attn.q.weight"
  std::vector<int64_t> shape;
  ParamClass param_class = ParamClass::replicated;
  int64_t layer = -1;  // transformer layer; -1 for embeddings, the final norm and the head
  // Serving engines hold some parameters fused (docs/models.md): this one is a part of the
  // per-device buffer `fused` ("" for its own buffer), its serving tile stacked after the parts
  // before it (in parameter order) along dim `fused_dim`; model_batch binds it there
  // (dst_buffer). Llama: q, k, v in attn.qkv_proj and gate, up in mlp.gate_up_proj.
  std::string fused = {};
  int fused_dim = 0;
};

// Every parameter of the model in order: embeddings, layer 0..L-1, final norm, head.
std::vector<ModelParameter> model_parameters(const ModelConfig& config);

// The pipeline stage (0..pp-1) that holds a parameter: layers split in pp contiguous runs, stage
// s holding layers [s*L/pp, (s+1)*L/pp) rounded down; embeddings on the first stage, the final
// norm and the head on the last.
int64_t stage_of(const ModelParameter& parameter, int64_t layers, int64_t pp);

// The weight sync of `config` from `train` to `serve` as a batch, each fused parameter's
// destination bound into its serving buffer (ModelParameter::fused). Devices: the trainer on the
// first hosts, stage by stage (within a stage, replica by replica, tp fastest), the server on the
// hosts after the trainer's, in the same order. Each stage is a (replicas, tp) mesh. `cluster`
// gives devices per host, links and NICs; its host count is replaced by the hosts both sides
// need. Throws InvalidArgument naming the bad value (a side with more stages than layers).
Batch model_batch(const ModelConfig& config, const ModelParallelism& train,
                  const ModelParallelism& serve, Cluster cluster);

}  // namespace meshcast
