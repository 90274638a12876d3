# The three spec vocabularies of docs/python.md, their Alpa forms, and shard/unshard with torch.
import torch
import meshcast as mc

mesh = mc.Mesh([2, 4], axis_names=("dp", "tp"))
assert mc.Layout(mesh, "S0,R").spec == "S0R"                                   # Alpa
assert mc.Layout(mesh, [mc.Shard(0), mc.Replicate()], ndim=2).spec == "S0R"   # DTensor
assert mc.Layout(mesh, mc.P("dp", None)).spec == "S0R"                        # JAX
assert mc.Layout(mesh, ("dp", None)).spec == "S0R"                            # plain tuple
assert mc.Layout(mesh, mc.P(("dp", "tp"), None)).spec == "S01R"               # flat over dp, tp
assert mc.Layout(mesh, [mc.Shard(0), mc.Shard(0)], ndim=2).spec == "S0/1R"  # nested

# Nested and flat differ when sizes do not divide: 10 rows over 8 devices.
x = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3)
nested = mc.shard(x, mc.Layout(mesh, [mc.Shard(0), mc.Shard(0)]))
flat = mc.shard(x, mc.Layout(mesh, mc.P(("dp", "tp"), None)))
print("nested rows:", [t.shape[0] for t in nested.values()])   # chunk(10, 2) = 5, 5; each by 4: 2, 2, 1, 0
print("flat rows:  ", [t.shape[0] for t in flat.values()])     # chunk(10, 8) = 2, 2, 2, 2, 2, 0, 0, 0
assert torch.equal(mc.unshard(nested, mc.Layout(mesh, "S0/1R")), x)
