// The weights of a real architecture as a batch: every parameter of a Llama- or GPT-like
// transformer, or of a DeepSeek-V3-class mixture of experts, with its Megatron-style layout on
// the training meshes and its vLLM/SGLang-style layout on the serving meshes,
// so that a weight sync (trainer -> inference engine) can be planned, simulated and run.
// docs/models.md gives the exact layout of every parameter class.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshcast/layout/cluster.h"
#include "meshcast/layout/tensor.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

// moe: a DeepSeek-V3-class mixture of experts (MLA or grouped-query attention, dense layers
// first, then layers of stacked routed experts, shared experts and a router), with the
// Hugging Face parameter names.
enum class ModelArch { llama, gpt, moe };
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
  // moe only. Grouped-query attention's head size (0: hidden / heads).
  int64_t head_dim = 0;
  // MLA (multi-head latent attention) when kv_lora_rank > 0, else grouped-query attention.
  // q_lora_rank 0: the query is one projection (q_proj) rather than q_a_proj and q_b_proj.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  int64_t dense_layers = 0;  // the first layers have a dense MLP of size ffn, the others experts
  int64_t experts = 0;       // routed experts per MoE layer
  int64_t shared_experts = 0;
  int64_t moe_ffn = 0;       // inner size of one expert (and of each shared expert)
  bool router_bias = false;  // the router's e_score_correction_bias (DeepSeek-V3, Kimi-K2)

  int64_t key_value_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t attention_head_dim() const { return head_dim == 0 ? hidden / heads : head_dim; }
  bool mla() const { return kv_lora_rank > 0; }
  // Throws InvalidArgument naming the field: non-positive sizes (kv_heads: negative), hidden not
  // a multiple of heads, heads not a multiple of kv_heads, or kv_heads != heads for gpt; for
  // moe: no experts, dense_layers above layers, an MLA dimension missing.
  void validate() const;
};

// The public configurations (docs/models.md names each source): deepseek-v3, kimi-k2 and
// qwen3-235b-a22b, in bfloat16. Throws InvalidArgument naming the text and the known names.
ModelConfig model_preset(std::string_view name);
// Sets the dimension `key` ("hidden", "experts", "q-lora-rank", ..., the CLI's option names
// without dashes) of `config`. Throws InvalidArgument naming an unknown key.
void set_model_dimension(ModelConfig& config, std::string_view key, int64_t value);
// The keys set_model_dimension takes, in the CLI's order; "router-bias" (0 or 1) sets
// router_bias.
const std::vector<std::string_view>& model_dimension_keys();
// What `meshcast model` and mc.model_batch build: the preset's configuration (when `preset` is
// not empty), else the architecture's defaults (`arch` empty: llama; moe: DeepSeek-V3's
// dimensions), with `dimensions` (key, value) set in order. Throws InvalidArgument naming a bad
// arch, preset or key, or an arch that is not the preset's.
ModelConfig make_model_config(std::string_view arch, std::string_view preset,
                              const std::vector<std::pair<std::string, int64_t>>& dimensions);

// Llama-2-7B, Llama-2-70B and a GPT-3-2.7B-like model: the weights suite's architectures.
ModelConfig llama_7b();
ModelConfig llama_70b();
ModelConfig gpt_2_7b();

// How one side (trainer or server) spreads the model: tp-way tensor parallelism inside each
// pipeline stage, pp stages, and `replicas` identical copies (data parallelism on the trainer).
// Routed experts (moe) are spread over the same devices of a stage differently: ep-way expert
// parallelism with etp-way tensor parallelism inside each expert, replicated over the rest
// (Megatron's expert parallelism carved out of tp x dp; a server's ep ranks inside one replica,
// its etp = tp / ep).
struct ModelParallelism {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t replicas = 1;
  int64_t ep = 1;
  int64_t etp = 1;

  int64_t devices() const { return tp * pp * replicas; }
};

// Which side a parallelism string describes: the trainer ("tp=,pp=,dp=,ep=,etp=") or the server
// ("tp=,pp=,replicas=,ep=", etp = tp / ep).
enum class ModelSide { train, serve };

// Parses "tp=4,pp=2,dp=2,ep=8": each key at most once, values positive integers; missing keys
// are 1 (a server's etp is tp / ep). Throws InvalidArgument naming `option`, the bad entry and
// what was expected (a server's ep not dividing its tp).
ModelParallelism parse_model_parallelism(std::string_view text, ModelSide side,
                                         std::string_view option);

// What decides a parameter's layout (docs/models.md): column-parallel weights and their biases
// are split on the output dimension over tp, row-parallel weights on the input dimension,
// vocab-parallel tables on the vocabulary dimension; kv_column (moe's grouped-query k and v) like
// column but, with fewer kv heads than tp ranks, each head on tp / kv_heads ranks; stacked
// experts ([experts, out, in]) split on the expert dimension over ep and on out (expert_column)
// or in (expert_row) over etp; everything else is replicated.
enum class ParamClass {
  column,
  column_bias,
  row,
  vocab,
  replicated,
  kv_column,
  expert_column,
  expert_row
};
std::string_view to_string(ParamClass param_class);

struct ModelParameter {
  std::string name;  // "layers.3.attn.q.weight"
  std::vector<int64_t> shape;
  ParamClass param_class = ParamClass::replicated;
  // Transformer layer 0..L-1; -1 for the embeddings, L for the final norm and the head.
  int64_t layer = -1;
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
// norm and the head (layer L) on the last.
int64_t stage_of(const ModelParameter& parameter, int64_t layers, int64_t pp);

// The weight sync of `config` from `train` to `serve` as a batch, each fused parameter's
// destination bound into its serving buffer (ModelParameter::fused). Devices: the trainer on the
// first hosts, stage by stage (within a stage, replica by replica, tp fastest), the server on the
// hosts after the trainer's, in the same order. Each stage is a (replicas, tp) mesh. `cluster`
// gives devices per host, links and NICs; its host count is replaced by the hosts both sides
// need. Routed experts' meshes are (stage devices / (ep*etp), ep, etp) over the same devices.
// Throws InvalidArgument naming the bad value (a side with more stages than layers, ep*etp not
// dividing a stage's devices, ep not dividing the experts, ep or etp above 1 for a dense model).
Batch model_batch(const ModelConfig& config, const ModelParallelism& train,
                  const ModelParallelism& serve, Cluster cluster);

}  // namespace meshcast
