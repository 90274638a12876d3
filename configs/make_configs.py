#!/usr/bin/env python3
"""Writes the end-to-end model configurations of docs/results.md (run from the repository root:
python3 configs/make_configs.py). Compute times come from FLOP counts at a stated device
throughput; the tensors each edge carries come from the model dimensions."""
import json

CLUSTER = {"hosts": 2, "devices_per_host": 4, "nic_gbps": 10, "dev_gbps": 800, "latency_us": 5}
V100_FP16_TFLOPS = 40.0  # effective, 32% of the V100's 125 TFLOP/s tensor-core peak
V100_FP32_TFLOPS = 10.0  # effective, 64% of the V100's 15.7 TFLOP/s fp32 peak


def layer_flops(tokens, hidden, samples):
    """Forward FLOPs of one transformer layer (QKV, projection, 4h MLP, attention scores)."""
    return samples * (24 * tokens * hidden**2 + 4 * tokens**2 * hidden)


def gpt(pp, microbatches, devices_per_stage, mesh, layers_per_stage, spec):
    seq, hidden, vocab, batch = 1024, 2560, 51200, 1024
    samples = batch // microbatches
    stages = []
    for i, layers in enumerate(layers_per_stage):
        fwd = layers * layer_flops(seq, hidden, samples)
        if i == pp - 1:
            fwd += 2 * samples * seq * hidden * vocab  # LM head
        stages.append({
            "mesh": mesh,
            "devices": list(range(i * devices_per_stage, (i + 1) * devices_per_stage)),
            "forward_tflop": round(fwd / 1e12, 4),
            # Rematerialization (Alpa's GPT setting): the backward recomputes the forward.
            "backward_tflop": round(3 * fwd / 1e12, 4),
            # With remat a stage keeps only each layer's input (fp16) per microbatch.
            "activation_bytes": layers * samples * seq * hidden * 2,
        })
    act = {"shape": [samples, seq, hidden], "dtype": "float16", "src_spec": spec, "dst_spec": spec}
    return {
        "name": f"GPT 2.6B-like, pp {pp}",
        "cluster": CLUSTER,
        "microbatches": microbatches,
        "samples_per_microbatch": samples,
        "device_tflops": V100_FP16_TFLOPS,
        "stages": stages,
        "edges": [{"from": i, "to": i + 1, "tensors": [act]} for i in range(pp - 1)],
    }


def u_transformer():
    # Image 32x32 (one token per pixel), 4 resolution blocks with channels 672 x (1, 2, 4, 8),
    # 13 layers: down 32,32,16,16,8,8, bottleneck 4, up 8,8,16,16,32,32. Up layers take the skip
    # concatenated to their input: their first projection sees twice the channels (x1.25 FLOPs).
    res = [32, 32, 16, 16, 8, 8, 4, 8, 8, 16, 16, 32, 32]
    channels = {32: 672, 16: 1344, 8: 2688, 4: 5376}
    batch, microbatches = 2048, 32
    samples = batch // microbatches
    flops = [layer_flops(r * r, channels[r], samples) * (1.25 if i > 6 else 1.0)
             for i, r in enumerate(res)]
    split = [range(0, 9), range(9, 13)]
    stages = [{
        "mesh": "4", "first_host": h,
        "forward_tflop": round(sum(flops[i] for i in layers) / 1e12, 4),
        # fp32 layer outputs kept for the backward (a lower bound of the activation memory).
        "activation_bytes": sum(samples * res[i]**2 * channels[res[i]] * 4 for i in layers),
    } for h, layers in enumerate(split)]

    def tensor(r):  # activations are batch-sharded on the sender, replicated on the receiver
        return {"shape": [samples, r * r, channels[r]], "dtype": "float32", "src_spec": "S0RR",
                "dst_spec": "RRR"}
    # Stage 1 (layers 9-12, resolutions 16 and 32) needs layer 8's output (resolution 8) and the
    # skips of the down layers at resolutions 16 (layer 3) and 32 (layer 1).
    return {
        "name": "U-Transformer-like, two (1,4) meshes with skip connections",
        "cluster": CLUSTER,
        "microbatches": microbatches,
        "samples_per_microbatch": samples,
        "device_tflops": V100_FP32_TFLOPS,
        "stages": stages,
        "edges": [{"from": 0, "to": 1, "tensors": [tensor(8), tensor(16), tensor(32)]}],
    }


def u_transformer_pp4():
    """The same model on four (1,2) meshes: skip connections now cross to non-adjacent stages."""
    base = u_transformer()
    res = [32, 32, 16, 16, 8, 8, 4, 8, 8, 16, 16, 32, 32]
    channels = {32: 672, 16: 1344, 8: 2688, 4: 5376}
    samples = base["samples_per_microbatch"]
    flops = [layer_flops(r * r, channels[r], samples) * (1.25 if i > 6 else 1.0)
             for i, r in enumerate(res)]
    split = [range(0, 4), range(4, 7), range(7, 10), range(10, 13)]
    stages = [{
        "mesh": "2", "devices": [2 * k, 2 * k + 1],
        "forward_tflop": round(sum(flops[i] for i in layers) / 1e12, 4),
        "activation_bytes": sum(samples * res[i]**2 * channels[res[i]] * 4 for i in layers),
    } for k, layers in enumerate(split)]

    def tensor(r):
        return {"shape": [samples, r * r, channels[r]], "dtype": "float32", "src_spec": "S0RR",
                "dst_spec": "RRR"}
    # Chain: outputs of layers 3 (res 16), 6 (res 4), 9 (res 16). Skips: layer 1 -> 11 (stage
    # 0 -> 3, res 32), layer 3 -> 9 (0 -> 2, res 16), layer 5 -> 7 (1 -> 2, res 8).
    edges = [
        {"from": 0, "to": 1, "tensors": [tensor(16)]},
        {"from": 1, "to": 2, "tensors": [tensor(4), tensor(8)]},
        {"from": 2, "to": 3, "tensors": [tensor(16)]},
        {"from": 0, "to": 2, "tensors": [tensor(16)]},
        {"from": 0, "to": 3, "tensors": [tensor(32)]},
    ]
    return dict(base, name="U-Transformer-like, four (1,2) meshes, skips across stages",
                stages=stages, edges=edges)


CONFIGS = {
    # dp 2 x op 2 inside each (1,4) mesh: batch split over mesh axis 0, replicated over axis 1.
    "gpt-2.6b-pp2.json": gpt(2, 64, 4, "2x2", [17, 15], "S0RR"),
    # dp 2 inside each (1,2) mesh; stages 0,1 on host 0 and 2,3 on host 1.
    "gpt-2.6b-pp4.json": gpt(4, 128, 2, "2", [9, 8, 8, 7], "S0RR"),
    "u-transformer.json": u_transformer(),
    "u-transformer-pp4.json": u_transformer_pp4(),
}

if __name__ == "__main__":
    for name, config in CONFIGS.items():
        with open(f"configs/{name}", "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        print("wrote", name)
