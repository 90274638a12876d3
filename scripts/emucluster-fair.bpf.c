// Per-flow queues on an emulated NIC (scripts/emucluster up --nic-queue fair): a tc cls_bpf
// classifier, in classid mode, on the NIC's htb qdisc that puts each packet in class
// 1:(16 + flow hash % FLOW_CLASSES), so that each flow (one TCP connection, hashed on its
// addresses and ports) has a queue of its own and the htb serves the busy ones in turn. Built by
// `emucluster up` with clang -target bpf.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

static __u32 (*bpf_get_hash_recalc)(struct __sk_buff *skb) = (void *)BPF_FUNC_get_hash_recalc;

__attribute__((section("classifier"), used)) int by_flow(struct __sk_buff *skb) {
  return TC_H_MAKE(1u << 16, 16 + bpf_get_hash_recalc(skb) % FLOW_CLASSES);
}

char bpf_license[] __attribute__((section("license"), used)) = "GPL";
