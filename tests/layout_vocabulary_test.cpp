// The three spec vocabularies (Alpa strings, DTensor placements, JAX PartitionSpecs): what each
// form means, the nested split of DTensor against a literal re-computation, and equivalent specs
// giving identical plans over the random corpus.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/planner/planner.h"

namespace meshcast {
namespace {

using Axes = ShardingSpec::DimAxes;

std::string error_of(std::string_view text, const SpecContext& context) {
  try {
    parse_sharding_spec(text, context);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(SpecVocabularyTest, DTensorPlacementsOnePerMeshAxis) {
  const SpecContext rank2{.tensor_rank = 2, .mesh_rank = 2, .axis_names = {}};
  EXPECT_EQ(parse_sharding_spec("Shard(0),Replicate()", rank2).to_string(), "S0R");
  EXPECT_EQ(parse_sharding_spec("[Shard(dim=1), Replicate()]", rank2).to_string(), "RS0");
  EXPECT_EQ(parse_sharding_spec("Replicate(),Shard(1)", rank2).to_string(), "RS1");
  EXPECT_EQ(parse_sharding_spec("Shard(1),Shard(0)", rank2).to_string(), "S1S0");
  EXPECT_EQ(parse_sharding_spec("Shard(-1),Replicate()", rank2).to_string(), "RS0");
  // Several axes on one dim: nested, in mesh order.
  const auto nested = parse_sharding_spec("Shard(0),Shard(0)", rank2);
  EXPECT_EQ(nested.to_string(), "S0/1R");
  EXPECT_TRUE(nested.nested(0));
  EXPECT_EQ(nested.dims(), (std::vector<Axes>{{0, 1}, {}}));
  // Without a known rank the placements decide it.
  EXPECT_EQ(parse_sharding_spec("Replicate(),Shard(2)").to_string(), "RRS1");
}

TEST(SpecVocabularyTest, JaxPartitionSpecsOverNamedAxes) {
  const SpecContext names{.tensor_rank = 2, .mesh_rank = 2, .axis_names = {"dp", "tp"}};
  EXPECT_EQ(parse_sharding_spec("P(None,tp)", names).to_string(), "RS1");
  EXPECT_EQ(parse_sharding_spec("P('dp', None)", names).to_string(), "S0R");
  EXPECT_EQ(parse_sharding_spec("PartitionSpec((\"dp\", \"tp\"), None)", names).to_string(),
            "S01R");
  EXPECT_EQ(parse_sharding_spec("P((tp, dp), None)", names).to_string(), "S10R");
  EXPECT_EQ(parse_sharding_spec("(None, 'dp')", names).to_string(), "RS0");
  EXPECT_FALSE(parse_sharding_spec("P((dp,tp))", names).nested(0));
  // Missing trailing entries are None; an empty tuple is None too.
  EXPECT_EQ(parse_sharding_spec("P(tp)", names).to_string(), "S1R");
  EXPECT_EQ(parse_sharding_spec("P((), dp)", names).to_string(), "RS0");
  // Unnamed meshes number their axes.
  EXPECT_EQ(parse_sharding_spec("P(None, 1)", {.tensor_rank = 2, .mesh_rank = 2, .axis_names = {}})
                .to_string(),
            "RS1");
}

TEST(SpecVocabularyTest, AlpaFormsIncludingNested) {
  EXPECT_EQ(parse_sharding_spec("S0,R").to_string(), "S0R");
  EXPECT_EQ(ShardingSpec::parse("S1/0R").to_string(), "S1/0R");
  EXPECT_TRUE(ShardingSpec::parse("RS0/1").nested(1));
  EXPECT_FALSE(ShardingSpec::parse("RS01").nested(1));
  EXPECT_NE(ShardingSpec::parse("S0/1"), ShardingSpec::parse("S01"));
  for (const char* bad : {"S0/", "S01/2", "S0/12", "S/0", "S0/0"})
    EXPECT_THROW(ShardingSpec::parse(bad), InvalidArgument) << bad;
}

TEST(SpecVocabularyTest, BadFormsNameTheEntryAndWhatWasExpected) {
  const SpecContext names{.tensor_rank = 2, .mesh_rank = 2, .axis_names = {"dp", "tp"}};
  EXPECT_NE(error_of("P(None,pp)", names).find("'pp' (expected one of dp, tp)"), std::string::npos);
  EXPECT_NE(error_of("P(dp,tp,None)", names).find("3 entries, but the tensor has 2"),
            std::string::npos);
  EXPECT_NE(error_of("P(dp,(dp,tp))", names).find("mesh axis 0 is used twice"), std::string::npos);
  EXPECT_NE(error_of("P(None,dp", names).find("bad sharding spec"), std::string::npos);
  EXPECT_NE(error_of("Shard(0)", names).find("1 placements, but the mesh has 2 axes"),
            std::string::npos);
  EXPECT_NE(error_of("Shard(2),Replicate()", names).find("outside a tensor of 2 dims"),
            std::string::npos);
  EXPECT_NE(error_of("Shard(x),Replicate()", names).find("'Shard(x)' needs an integer"),
            std::string::npos);
  // Found by fuzz_sharding_spec: without the tensor's rank, Shard(77777802) sized a spec of 77
  // million dims (1.8 GB) before anything checked it.
  EXPECT_NE(
      error_of("Shard(1),Shard(77777802)", {.tensor_rank = 0, .mesh_rank = 2, .axis_names = {}})
          .find("'Shard(77777802)' is outside any tensor (at most 8 dims)"),
      std::string::npos);
  EXPECT_NE(error_of("Partial(),Replicate()", names).find("pending reduction"), std::string::npos);
  EXPECT_NE(error_of("Shard(0),Foo()", names).find("'Foo()' is not a placement"),
            std::string::npos);
  EXPECT_NE(error_of("P(dp)", {.tensor_rank = 1, .mesh_rank = 2, .axis_names = {"dp"}})
                .find("1 mesh axis names (dp) for a mesh of 2 axes"),
            std::string::npos);
  EXPECT_NE(error_of("P(dp)", {.tensor_rank = 1, .mesh_rank = 2, .axis_names = {"dp", "dp"}})
                .find("expected distinct non-empty names"),
            std::string::npos);
  EXPECT_NE(
      error_of("P(dp)", {.tensor_rank = 1, .mesh_rank = 1, .axis_names = {}}).find("have no names"),
      std::string::npos);
}

// A spec read without the tensor's rank (SpecContext::tensor_rank) that then does not fit the
// tensor: the error quotes what the user wrote, with its converted form beside it.
TEST(SpecVocabularyTest, ErrorsQuoteTheSpecAsWritten) {
  const TensorSpec tensor{{8, 8}, DType::float32};
  const auto validation_error = [&](const ShardingSpec& spec) -> std::string {
    try {
      Layout{Mesh::placed({2, 4}, 0, 4), spec}.validate(tensor);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(validation_error(parse_sharding_spec("Shard(0), Replicate()"))
                .find("sharding spec 'Shard(0), Replicate()' (read as S0) has 1 entries, but the "
                      "tensor has 2 dimensions (DTensor placements and PartitionSpecs do not say "
                      "the tensor's rank: parse them with SpecContext::tensor_rank)"),
            std::string::npos);
  EXPECT_NE(validation_error(parse_sharding_spec("P(None, None, 1)"))
                .find("sharding spec 'P(None, None, 1)' (read as RRS1) has 3 entries"),
            std::string::npos);
  // An Alpa string is what the user wrote: quoted once.
  EXPECT_NE(validation_error(parse_sharding_spec("S0RR"))
                .find("sharding spec 'S0RR' has 3 entries, but the tensor has 2 dimensions"),
            std::string::npos);
  // The text read is no part of the value.
  const SpecContext rank2{.tensor_rank = 2, .mesh_rank = 2, .axis_names = {}};
  EXPECT_EQ(parse_sharding_spec("Shard(0),Replicate()", rank2), ShardingSpec::parse("S0R"));
  EXPECT_EQ(validation_error(parse_sharding_spec("Shard(0),Replicate()", rank2)), "accepted");
}

TEST(NestedSplitTest, DiffersFromFlatWhenSizesDoNotDivide) {
  const TensorSpec tensor{{5}, DType::float32};
  const Mesh mesh({2, 2}, {0, 1, 2, 3});
  // torch.chunk(5, 4): 2,2,1,0. DTensor: chunk(5, 2) = 3,2, then each again by 2: 2,1 and 1,1.
  EXPECT_EQ(device_tiles(tensor, Layout{mesh, ShardingSpec::parse("S01")}),
            (std::vector<Box>{{{{0, 2}}}, {{{2, 4}}}, {{{4, 5}}}, {{{5, 5}}}}));
  EXPECT_EQ(device_tiles(tensor, Layout{mesh, ShardingSpec::parse("S0/1")}),
            (std::vector<Box>{{{{0, 2}}}, {{{2, 3}}}, {{{3, 4}}}, {{{4, 5}}}}));
  // Sizes that divide: the same tiles.
  const TensorSpec even{{8}, DType::float32};
  EXPECT_EQ(device_tiles(even, Layout{mesh, ShardingSpec::parse("S01")}),
            device_tiles(even, Layout{mesh, ShardingSpec::parse("S0/1")}));
}

// DTensor's local shape and offset, computed literally: for each mesh axis in order, the dim it
// shards is torch.chunk'ed again at the device's coordinate on that axis.
Box dtensor_tile(const TensorSpec& tensor, const Layout& layout, int64_t flat_index) {
  const auto coords = layout.mesh.coords_of(flat_index);
  Box box = full_box(tensor.shape);
  for (int d = 0; d < tensor.rank(); ++d) {
    for (int a : layout.spec.axes_of(d)) {
      const int64_t n = layout.mesh.shape()[a];
      const int64_t length = box.dims[d].size();
      const int64_t c = (length + n - 1) / n;
      const int64_t lo = box.dims[d].lo + std::min(length, coords[a] * c);
      box.dims[d] = {lo, box.dims[d].lo + std::min(length, (coords[a] + 1) * c)};
    }
  }
  return box;
}

TEST(NestedSplitTest, TilesMatchDTensorsLocalShapesOnTheCorpus) {
  int nested_uneven = 0;
  for (const auto& p : testing::property_corpus(7, 2000)) {
    for (const Layout* layout : {&p.src, &p.dst}) {
      bool any_nested = false;
      for (int d = 0; d < p.tensor.rank(); ++d) any_nested |= layout->spec.nested(d);
      if (!any_nested) continue;
      const auto tiles = device_tiles(p.tensor, *layout);
      bool differs_from_flat = false;
      ShardingSpec flat(layout->spec.dims());
      for (int64_t i = 0; i < layout->mesh.size(); ++i) {
        const Box want = dtensor_tile(p.tensor, *layout, i);
        ASSERT_EQ(tiles[i].empty(), want.empty()) << testing::describe(p);
        if (!want.empty()) {
          ASSERT_EQ(tiles[i], want) << testing::describe(p) << " device " << i;
        }
        differs_from_flat |= tiles[i] != tile_at(p.tensor, Layout{layout->mesh, flat}, i);
      }
      nested_uneven += differs_from_flat;
    }
  }
  EXPECT_GT(nested_uneven, 50);  // the corpus does exercise splits where nested != flat
}

// The DTensor and JAX texts of a spec, where that vocabulary can say it ("" otherwise).
std::string as_placements(const ShardingSpec& spec, int mesh_rank) {
  std::vector<std::string> placements(mesh_rank, "Replicate()");
  for (int d = 0; d < spec.rank(); ++d) {
    const auto& axes = spec.axes_of(d);
    if (axes.size() > 1 && (!spec.nested(d) || !std::is_sorted(axes.begin(), axes.end())))
      return "";
    for (int a : axes) placements[a] = fmt::format("Shard({})", d);
  }
  return fmt::format("{}", fmt::join(placements, ","));
}

std::string as_partition_spec(const ShardingSpec& spec, const std::vector<std::string>& names) {
  std::vector<std::string> entries;
  for (int d = 0; d < spec.rank(); ++d) {
    const auto& axes = spec.axes_of(d);
    if (spec.nested(d)) return "";
    std::vector<std::string> named;
    for (int a : axes) named.push_back(fmt::format("'{}'", names[a]));
    if (axes.empty()) entries.push_back("None");
    if (axes.size() == 1) entries.push_back(named[0]);
    if (axes.size() > 1) entries.push_back(fmt::format("({})", fmt::join(named, ", ")));
  }
  return fmt::format("P({})", fmt::join(entries, ", "));
}

TEST(SpecVocabularyPropertyTest, EquivalentSpecsGiveIdenticalPlans) {
  const std::vector<std::string> names = {"dp", "tp", "pp"};
  int placements = 0;
  int partition_specs = 0;
  for (const auto& p : testing::property_corpus(11, testing::sanitized_count(300))) {
    const std::string want = plan_to_json(make_plan(p, {.search_effort = 0.02})).dump();
    for (int side = 0; side < 2; ++side) {
      const Layout& layout = side == 0 ? p.src : p.dst;
      const SpecContext context{
          p.tensor.rank(), layout.mesh.rank(), {names.begin(), names.begin() + layout.mesh.rank()}};
      for (const std::string& text :
           {as_placements(layout.spec, layout.mesh.rank()),
            as_partition_spec(layout.spec, context.axis_names), layout.spec.to_string()}) {
        if (text.empty()) continue;
        SCOPED_TRACE(testing::describe(p) + " as " + text);
        Resharding q = p;
        (side == 0 ? q.src : q.dst).spec = parse_sharding_spec(text, context);
        EXPECT_EQ(plan_to_json(make_plan(q, {.search_effort = 0.02})).dump(), want);
        placements +=
            text.find("Replicate") != std::string::npos || text.find("Shard") != std::string::npos;
        partition_specs += text[0] == 'P';
      }
    }
  }
  EXPECT_GT(placements, testing::sanitized_count(100));
  EXPECT_GT(partition_specs, testing::sanitized_count(100));
}

TEST(SpecVocabularyPropertyTest, NestedAndFlatGiveIdenticalPlansWhenSizesDivide) {
  Resharding p;
  p.tensor = {{16, 12}, DType::float32};
  p.cluster = {.hosts = 4, .devices_per_host = 4};
  p.src = Layout{Mesh::placed({2, 4}, 0, 4), ShardingSpec::parse("S01R")};
  p.dst = Layout{Mesh::placed({2, 2}, 2, 4), ShardingSpec::parse("RS0/1")};
  Resharding q = p;
  q.src.spec = ShardingSpec::parse("S0/1R");
  q.dst.spec = ShardingSpec::parse("RS01");
  const Plan a = make_plan(p);
  const Plan b = make_plan(q);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.lower_bound_s, b.lower_bound_s);
}

}  // namespace
}  // namespace meshcast
