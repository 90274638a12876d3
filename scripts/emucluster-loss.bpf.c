// Packet loss on an emulated NIC (scripts/emucluster up --loss-pct), for kernels without the
// netem qdisc: a tc cls_bpf classifier in direct-action mode on the host's egress that drops each
// packet with probability LOSS_PER_MILLION / 10^6. Built by `emucluster up` with clang -target bpf.
typedef unsigned int u32;
static u32 (*bpf_get_prandom_u32)(void) = (void *)7;  // BPF_FUNC_get_prandom_u32

enum { kTcActOk = 0, kTcActShot = 2 };

__attribute__((section("classifier"), used)) int drop_some(void *skb) {
  (void)skb;
  return bpf_get_prandom_u32() % 1000000 < LOSS_PER_MILLION ? kTcActShot : kTcActOk;
}

char bpf_license[] __attribute__((section("license"), used)) = "GPL";
